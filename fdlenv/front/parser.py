"""The argparse side of the front: fdlenv's parser, built for one command or for all.

Imported only when the argv is not one the front reads itself (`cli._quick`:
the hot commands' usual shapes): argparse, gettext and locale cost about
9 ms, which a re-dial, a new shell's hook and every `fdlenv run` would pay.
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from .. import __version__
from ..base.errors import DEBUG_VAR, EXIT_PERMANENT
from ..base.output import fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, NoReturn

EPILOG = """examples:
  fdlenv detect --json
  fdlenv env realize --libtorch cpu --json
  fdlenv run --libtorch cpu -- python -c 'import os; print(os.environ["LIBTORCH_PATH"])'
  fdlenv @farm join       # fdl.farm.yml over fdl.yml: also --env farm, or FDL_ENV=farm
"""


class Parser(argparse.ArgumentParser):
    """argparse with fdlenv's error shape: usage, then one `error:` line, exit 2.

    argparse builds a help formatter for every `add_argument` (to check metavars),
    and each asks `shutil` for the terminal width: ~4 ms of imports on every re-dial.
    The width is computed here the same way (COLUMNS, else the terminal, else 80).

    No abbreviations (`--dev 0` is not `--devices 0`), as in fdl: every subparser is this
    class too (argparse makes subparsers with the parent's class), so the rule holds for
    every command and sub-command."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:   # argparse's own, handed on
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_formatter(self) -> argparse.HelpFormatter:
        # every argparse formatter takes width=; typeshed's protocol for the class names prog only
        return self.formatter_class(prog=self.prog, width=_help_width())  # type: ignore[call-arg]

    def error(self, message: str) -> NoReturn:
        self.print_usage(sys.stderr)
        fail(f"{self.prog}: {message}", EXIT_PERMANENT)
        sys.exit(EXIT_PERMANENT)


def _help_width() -> int:
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno() if sys.__stdout__ else 1).columns
        except (AttributeError, ValueError, OSError):
            cols = 80
    return max(cols - 2, 11)   # what argparse's own formatter subtracts


def build_parser(commands: tuple[str, ...], only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or just the `only` command's (the re-dial path pays for one module)."""
    parser = Parser(
        prog="fdlenv",
        description="Locked libtorch environments and the flodl dial-in worker.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fdlenv {__version__}")
    parser.add_argument("--debug", action="store_true",
                        help=f"print the traceback of a bug in fdlenv (also {DEBUG_VAR}=1)")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in commands if only is None else (only,):
        importlib.import_module(f"fdlenv.front.commands.{name}").add_parser(sub)
    _add_quiet(parser, False)
    return parser


def _add_quiet(parser: argparse.ArgumentParser, default: bool | str) -> None:
    """`-q`/`--quiet` on every (sub)command: no progress, only results and errors. Below the
    root its default is SUPPRESS, so a `-q` given earlier on the line is not undone."""
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="no progress lines: only results and errors")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in {id(c): c for c in action.choices.values()}.values():
                _add_quiet(child, argparse.SUPPRESS)
