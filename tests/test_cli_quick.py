"""The front reads the hot commands' usual argv itself (`cli._quick`), without argparse: each
shape it reads must come out exactly as argparse's own parser reads it, and every other shape
must be left to argparse (which explains or refuses it)."""

from __future__ import annotations

import subprocess
import sys

import pytest

from fdlenv.front import cli
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
