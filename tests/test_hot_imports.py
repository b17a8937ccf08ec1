"""What a hot command answered from its memo imports, read from `python -X importtime`.

Each case runs the installed command's own script (scripts/fdlenv) in a child process against
a real home: a first real call writes the memo (`cache/hot/<kind>-<hash>`), then one more call,
run with `-X importtime`, is answered from it and its imports are compared with the pinned
sets below. The child starts with `-S`, as tests/helpers_imports.py does: no `site`, so no
`.pth` file of this interpreter (its editable finder imports pathlib, re and typing) imports
anything before fdlenv runs; what `python -S -c "import os"` imports (what `site` imports in
any venv) is the start, and every module beyond it was imported by the command.

The fdlenv modules are pinned exactly, so a module added to the path (or one dropped, which
should then leave this list) fails here; other modules may only be the few C modules named in
`OTHERS`: no json, re, pathlib, warnings, subprocess, typing, types or __future__ (each an
import, or a pure-Python module's exec, on every new shell, every `fdlenv run`, every re-dial).
`test_the_pin_catches_an_import_added_to_the_path` holds the check itself to that.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_imports import ROOT
from helpers_store import make_world, realise_json

# Every replayed command: the front, the option table, the replay and the codec it shares with
# the slow path, the home's names, and the packages they live in.
REPLAY = {
    "fdlenv", "fdlenv.front", "fdlenv.front.cli", "fdlenv.front.table", "fdlenv.hot", "fdlenv.hot.replay",
    "fdlenv.base", "fdlenv.base.record", "fdlenv.names", "fdlenv.names.roots", "fdlenv.store",
    "fdlenv.store.statecodec",
}
TREE = {"fdlenv.names.buildtree"}        # shell-hook and run: the variant's build tree (cwd-dependent)
SHELL = {"fdlenv.base.shells"}           # shell-hook's own text: each shell's syntax
LEASE = {"fdlenv.names.leasefile"}       # run: the env's lease, held by CMD
JSON = {"fdlenv.base.output"}            # --json: the writer over the C encoder
# C modules only: the store lock's flock, Record's field getter, json's C encoder (--json).
OTHERS = {"fcntl", "_collections", "_json"}
NEVER = ("json", "re", "pathlib", "warnings", "subprocess", "typing", "types", "__future__", "errno",
         "shutil", "enum", "functools", "collections", "fdlenv.app", "fdlenv.base.errors", "fdlenv.base.memory",
         "fdlenv.base.confine", "fdlenv.hot.memo")

CASES = {   # id: (argv before the store options, argv after them, the fdlenv modules pinned)
    "shell-hook": (["shell-hook"], [], REPLAY | TREE | SHELL),
    "shell-hook --json": (["shell-hook", "--json"], [], REPLAY | TREE | JSON),
    "run true": (["run"], ["true"], REPLAY | TREE | LEASE),
    "env realize": (["env", "realize"], [], REPLAY),
    "env realize --json": (["env", "realize", "--json"], [], REPLAY | JSON),
}


def _child_env(package_root: Path) -> dict[str, str]:
    # This interpreter's path as `site` and the .pth files left it, their import lines not run,
    # behind the checkout (or a copy of it) whose fdlenv is under test.
    paths = [str(package_root), *dict.fromkeys(p for p in sys.path if p and os.path.isdir(p))]
    # (no activation to undo: a shell where fdlenv's hook ran exports _FDLENV_STATE, whose
    # names `restored` checks with base.shells)
    env = {k: v for k, v in os.environ.items() if k not in ("FDLENV_NO_HOTPATH", "_FDLENV_STATE")}
    return {**env, "PYTHONPATH": os.pathsep.join(paths)}


def _importtime(args: list[str], env: dict[str, str], cwd: Path) -> tuple[subprocess.CompletedProcess, list[str]]:
    """(the result, its stderr's imported modules in order) of `python -S -X importtime args`."""
    res = subprocess.run([sys.executable, "-S", "-X", "importtime", *args], capture_output=True, text=True,
                         env=env, cwd=cwd)
    mods = [ln.split("|")[2].strip() for ln in res.stderr.splitlines()
            if ln.startswith("import time:") and ln.count("|") == 2 and "imported package" not in ln]
    res.stderr = "\n".join(ln for ln in res.stderr.splitlines() if not ln.startswith("import time:"))
    return res, mods


def replayed_imports(tmp_path: Path, case: str, package_root: Path = ROOT) -> tuple[set[str], set[str]]:
    """(fdlenv modules, other modules) imported by the command `case`, answered from the memo a
    first real call wrote (in a real home, from a real lock), beyond the interpreter's start."""
    w = make_world(tmp_path)
    realise_json(w)
    before, after, _ = CASES[case]
    argv = [*before, "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), *after]
    env = _child_env(package_root)
    script = str(package_root / "scripts" / "fdlenv")
    kind = "realize" if before[0] == "env" else before[0]
    for _ in range(4):   # the memo is written by the first call that finds its files settled (a clock tick)
        res = subprocess.run([sys.executable, "-S", script, *argv], capture_output=True, text=True, env=env,
                             cwd=tmp_path)
        assert res.returncode == 0, res.stderr
        if any(p.name.startswith(f"{kind}-") for p in (w.home.root / "cache" / "hot").glob("*")):
            break
    else:
        raise AssertionError(f"fdlenv {case}: no memo written")
    _, start = _importtime(["-c", "import os"], env, tmp_path)
    res, mods = _importtime([script, *argv], env, tmp_path)
    assert res.returncode == 0 and res.stderr == "", res.stderr
    new = set(mods) - set(start)
    return {m for m in new if m.split(".")[0] == "fdlenv"}, {m for m in new if m.split(".")[0] != "fdlenv"}


def findings(case: str, ours: set[str], others: set[str]) -> list[str]:
    pinned = CASES[case][2]
    return ([f"imports {m}, which is not pinned" for m in sorted(ours - pinned)]
            + [f"no longer imports {m}: drop it from the pin" for m in sorted(pinned - ours)]
            + [f"imports {m}, beyond the C modules pinned (OTHERS)" for m in sorted(others - OTHERS)]
            + [f"imports {m}, which it never may" for m in sorted((ours | others) & set(NEVER))])


@pytest.mark.parametrize("case", list(CASES))
def test_a_replayed_hot_command_imports_only_its_pinned_modules(tmp_path, case):
    ours, others = replayed_imports(tmp_path, case)
    assert findings(case, ours, others) == []


def test_the_pin_catches_an_import_added_to_the_path(tmp_path):
    copy = tmp_path / "checkout"
    shutil.copytree(ROOT / "fdlenv", copy / "fdlenv", ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copytree(ROOT / "scripts", copy / "scripts")
    roots = copy / "fdlenv" / "names" / "roots.py"
    roots.write_text(roots.read_text().replace("\nimport os\n", "\nimport json  # noqa: F401\nimport os\n", 1))
    replay = copy / "fdlenv" / "hot" / "replay.py"
    replay.write_text(replay.read_text().replace("\nimport os\n", "\nimport os\n\nfrom ..base import errors  # noqa: F401\n", 1))
    ours, others = replayed_imports(tmp_path / "world", "env realize", copy)
    got = findings("env realize", ours, others)
    assert "imports fdlenv.base.errors, which is not pinned" in got and "imports json, which it never may" in got, got
    assert "imports json, beyond the C modules pinned (OTHERS)" in got and "imports re, which it never may" in got, got
