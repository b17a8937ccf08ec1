"""The front reads the hot commands' usual argv itself (`cli._quick`), without argparse: each
shape it reads must come out exactly as argparse's own parser reads it, and every other shape
must be left to argparse (which explains or refuses it)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from fdlenv.front import cli, table
from fdlenv.front.parser import build_parser

READ_HERE = [
    ["shell-hook"],
    ["shell-hook", "--libtorch", "cu128"],
    ["shell-hook", "--libtorch=cpu", "--shell", "fish", "--json", "-q"],
    ["shell-hook", "--deactivate", "--shell=zsh"],
    ["shell-hook", "--libtorch", "cpu", "--lock", "f.yml", "--mirror", "pypi=http://m/simple",
     "--mirror", "conda-forge=file:///srv/cf", "--frozen", "--home", "/h"],
    ["run", "true"],
    ["run", "--libtorch", "cpu", "python", "-c", "pass"],
    ["run", "-q", "--home", "/h", "--lock=l.yml", "make", "--json", "-j4"],
    ["run"],
    ["env", "realize", "cpu"],
    ["env", "realize", "--libtorch", "cu128", "--lock", "conda-lock.yml", "--json"],
    ["env", "realize", "rocm7.1", "--frozen", "--mirror", "pypi=http://m", "-q", "--home=/h"],
    ["env", "realize"],
    ["detect"], ["detect", "--json"], ["detect", "-q", "--json"],
]

LEFT_TO_ARGPARSE = [
    ["shell-hook", "--help"], ["shell-hook", "-h"], ["shell-hook", "--shell", "csh"],
    ["shell-hook", "--lib", "cpu"], ["shell-hook", "--libtorch"], ["shell-hook", "--libtorch", "--json"],
    ["shell-hook", "--libtorch", "cpu", "--libtorch", "cu128"], ["shell-hook", "extra"],
    ["shell-hook", "--json", "--json"], ["run", "--shell", "sh", "true"], ["run", "--json", "true"],
    ["run", "--libtorch", "-x", "true"], ["env", "realize", "cpu", "cu128"], ["env", "list"],
    ["env", "realize", "--deactivate"], ["-q", "shell-hook"], ["--debug", "run", "true"], ["detect", "--libtorch", "cpu"],
    ["detect", "--json", "--json"], ["detect", "--mirror", "a=b://c"],
    ["env", "realize", "--home"], ["run", "--mirror=", "true"],
]


def _argparse(argv: list[str]) -> dict:
    return vars(build_parser(cli.COMMANDS, cli._command_of(argv)).parse_args(argv))


@pytest.mark.parametrize("argv", READ_HERE, ids=" ".join)
def test_each_shape_read_without_argparse_is_what_argparse_reads(argv):
    quick = cli._quick(argv)
    assert quick is not None, f"{argv} should be read by the front"
    assert vars(quick) == _argparse(argv)


@pytest.mark.parametrize("argv", LEFT_TO_ARGPARSE, ids=" ".join)
def test_every_other_shape_is_left_to_argparse(argv):
    assert cli._quick(argv) is None


def test_the_hot_commands_never_import_argparse():
    code = ("import sys; from fdlenv.front import cli; "
            "[cli._quick(a) for a in (['shell-hook', '--libtorch', 'cpu'], ['run', 'true'], ['env', 'realize', 'cpu'], "
            "['detect'])]; "
            "print(sorted(m for m in ('argparse', 'gettext', 'locale') if m in sys.modules))")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout
    assert out.strip() == "[]"


# ------------------------------------------------------------------ the one option table

def _spellings(dest: str) -> list[list[str]]:
    """Each way the front reads option `dest`: a flag; `--opt V` and `--opt=V`; a repeatable one twice."""
    o = table.OPTIONS[dest]
    if o.takes == table.FLAG:
        return [[flag] for flag in o.flags]
    v, w = (o.choices[0], o.choices[-1]) if o.choices else ("v1", "v2")
    forms = [[o.flags[0], v], [f"{o.flags[0]}={w}"]]
    return forms + ([[o.flags[0], v, f"{o.flags[-1]}={w}"]] if o.takes == table.MANY else [])


def _walk() -> list[list[str]]:
    out = []
    for shape in table.SHAPES.values():
        for dest in shape.options:
            for form in _spellings(dest):
                out.append([*shape.words, *form, *(["true"] if shape.rest else [])])
    return out


@pytest.mark.parametrize("argv", _walk(), ids=" ".join)
def test_every_option_of_every_shape_in_the_table_is_read_as_argparse_reads_it(argv):
    quick = cli._quick(argv)
    assert quick is not None, f"{argv} should be read by the front"
    assert vars(quick) == _argparse(argv)


def test_an_option_added_to_the_table_is_read_alike_by_the_front_and_by_argparse(monkeypatch):
    new = table.Opt(("--new-thing",), "new_thing", metavar="X", help="an option not yet in fdlenv", memo="value")
    run = table.SHAPES[("run",)]
    monkeypatch.setitem(table.OPTIONS, "new_thing", new)
    monkeypatch.setitem(table.SHAPES, ("run",), run._replace(options=(*run.options, "new_thing")))
    for argv in (["run", "--new-thing", "x", "make"], ["run", "--new-thing=y", "--libtorch", "cpu", "make"], ["run", "make"]):
        quick = cli._quick(argv)
        assert quick is not None and vars(quick) == _argparse(argv)
    assert cli._quick(["run", "--new-thing", "x", "--new-thing", "y", "make"]) is None   # once, as every VALUE


def test_each_memo_keying_option_moves_the_memo_key_and_no_other_does():
    shape = table.SHAPES[("shell-hook",)]
    base = cli._read_quick(list(shape.words))
    assert base is not None
    plain = table.ask_of(shape.kind, base[1], None)
    for dest in shape.options:
        o = table.OPTIONS[dest]
        got = cli._read_quick([*shape.words, *_spellings(dest)[0]])
        assert got is not None
        ask = table.ask_of(shape.kind, got[1], None)
        assert ask is not None and plain is not None
        moved = ask.keyed != plain.keyed
        assert moved == bool(o.memo), dest


def test_the_word_after_each_of_runs_valued_options_is_its_value_not_cmd(monkeypatch):
    # take_env (the `--env` selector) stops at run's CMD, and the table says which words are not CMD
    for flag in table.valued_flags(table.SHAPES[("run",)]):
        monkeypatch.delenv("FDL_ENV", raising=False)
        assert cli.take_env(["run", flag, "v", "--env=y", "true", "--env", "z"]) == ["run", flag, "v", "true", "--env", "z"]
        assert os.environ["FDL_ENV"] == "y"
