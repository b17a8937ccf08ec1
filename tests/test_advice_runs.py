"""Advice that works: every `fdlenv ...` example line of the README and of every `--help` is
parsed by fdlenv's own parser (a flag that does not exist fails here, not on a user), and those
a CPU box can run are run, in bash, against a home with the cpu variant realised.

What runs: examples naming `cpu` or no variant, of the commands that need neither a GPU, a
controller nor an outside index (`env list|path|use|verify`, `run`, `shell-hook`, `detect`,
`recipe systemd`); the rest (cu128 downloads, joins, exports) are parse-checked only. A line
is run as written (pipes, `eval "$(...)"`, `jq`), with `fdlenv` on PATH.
"""

from __future__ import annotations

import argparse
import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from fdlenv.front import cli, parser

ROOT = Path(__file__).resolve().parent.parent
RUNNABLE = re.compile(r"^fdlenv (env (list|path|use|verify)|run|shell-hook|detect|recipe systemd)\b")
GPU_OR_NET = re.compile(r"\b(cu12[68]|rocm7\.[01]|auto)\b|--lock|--mirror|https?://|cargo|\./target/|--repair")


def _joined(lines: list[str]) -> list[str]:
    out, cur = [], ""
    for ln in lines:
        if ln.rstrip().endswith("\\"):
            cur += ln.rstrip()[:-1] + " "
            continue
        out.append((cur + ln).strip())
        cur = ""
    return out


def readme_examples() -> list[str]:
    text = (ROOT / "README.md").read_text()
    blocks = re.findall(r"```sh\n(.*?)```", text, re.S)
    return [ln for b in blocks for ln in _joined(b.splitlines()) if re.search(r"(^|\$\(|\| )fdlenv ", ln)]


def help_examples() -> list[str]:
    top = parser.build_parser(cli.COMMANDS)
    found, todo = [], [top]
    while todo:
        p = todo.pop()
        if p.epilog:
            lines = [ln for ln in p.epilog.splitlines() if ln.startswith("  ")]
            found += [ln for ln in _joined(lines) if re.search(r"(^|\$\(|\| )fdlenv ", ln)]
        for a in p._actions:
            if isinstance(a, argparse._SubParsersAction):
                todo += list(dict.fromkeys(a.choices.values()))
    return sorted(set(found))


def commands_in(line: str) -> list[list[str]]:
    """The fdlenv invocations of a shell line, as argv (after `fdlenv`): its words split as a
    shell does (quotes, `#` comments, `|` `;` `>`), a `$(...)` word's own command included."""
    lex = shlex.shlex(line, posix=True, punctuation_chars=True)
    lex.whitespace_split = True
    out: list[list[str]] = []
    cur: list[str] | None = None
    for tok in lex:
        if tok.startswith("$(") and tok.endswith(")"):
            out += commands_in(tok[2:-1])
        elif tok in ("|", ";", "&&", "||", ">", ">>", "<"):
            cur = None
        elif cur is None and tok == "fdlenv":
            cur = []
            out.append(cur)
        elif cur is not None:
            cur.append(tok)
    return out


EXAMPLES = sorted(set(readme_examples()) | set(help_examples()))


def test_the_examples_are_found():
    assert len(readme_examples()) >= 8 and len(help_examples()) >= 25
    assert any(e.startswith("fdlenv env path cpu --json") for e in EXAMPLES)


@pytest.mark.parametrize("line", EXAMPLES)
def test_every_example_parses_with_fdlenvs_own_parser(line):
    p = parser.build_parser(cli.COMMANDS)
    for argv in commands_in(line):
        head, _ = cli.split_tail(argv)
        head = cli.take_env(head)
        try:
            p.parse_args(head)
        except SystemExit as e:
            pytest.fail(f"{line!r}: fdlenv's parser refuses {head} (exit {e.code})")


@pytest.fixture(scope="module")
def cpu_box(tmp_path_factory):
    from helpers_store import make_world, realise_json

    tmp = tmp_path_factory.mktemp("advice")
    w = make_world(tmp)
    realise_json(w, "cpu")
    bindir = tmp / "bin"
    bindir.mkdir()
    (bindir / "fdlenv").write_text(f'#!/bin/sh\nexec {sys.executable} -m fdlenv "$@"\n')
    (bindir / "fdlenv").chmod(0o755)
    return w, bindir


RUN = [e for e in EXAMPLES if RUNNABLE.search(re.sub(r"^(eval \"\$\(|)", "", e)) and not GPU_OR_NET.search(e)]


def test_some_examples_are_run():
    assert len(RUN) >= 6, RUN


@pytest.mark.parametrize("line", RUN)
def test_an_example_a_cpu_box_can_run_exits_0(line, cpu_box, tmp_path):
    w, bindir = cpu_box
    units = Path("/etc/systemd/system")
    written = sorted(units.glob("fdlenv*"))
    if "jq" in line and shutil.which("jq") is None:
        pytest.skip("jq is not installed")
    env = {**os.environ, "PATH": f"{bindir}:{os.environ['PATH']}", "FLODL_HOME": str(w.home.root),
           "FLODL_TESTING_GPU_JSON": "[]"}
    line = re.sub(r">\s*/\S*/", "> ./", line)   # what an example writes under /etc lands in the test's dir
    activates = "shell-hook" in line and "--deactivate" not in line and "--json" not in line
    if "| source" in line:   # fish's form
        fish = shutil.which("fish")
        if fish is None:
            pytest.skip("fish is not installed (apt-get install fish)")
        argv = [fish, "--no-config", "-c", line + '\ntest -n "$LIBTORCH_PATH"']
    else:
        check = '\n[ -n "$LIBTORCH_PATH" ]' if activates else ""
        if (m := re.match(r"export (\w+)=", line)):   # what it exports names something that is there
            check += f'\n[ -e "${m.group(1)}" ]'
        argv = ["bash", "-eo", "pipefail", "-c", line + check]
    res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=120)
    assert res.returncode == 0, (line, res.stdout[-2000:], res.stderr[-2000:])
    assert "Traceback" not in res.stderr
    if ">" in line:
        assert any(tmp_path.iterdir()), line
    assert sorted(units.glob("fdlenv*")) == written   # nothing written outside the test's dir
