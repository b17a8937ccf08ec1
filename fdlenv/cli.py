"""The argparse front: parse, dispatch, map failures to exit codes.

Kept thin and cheap to import: the re-dial path (`fdlenv prepare`/`join` with
everything in place) starts here, so command modules import their heavy
dependencies (rattler, conda-lock, paramiko, gitpython) inside the functions
that need them, never at module level.

The `--` tail is split off before argparse sees it: `None` means "no tail",
an empty list means "an explicit empty tail" (join clears the block's args).
"""

from __future__ import annotations

import argparse
import importlib
import os
import sys

from . import __version__
from .errors import EXIT_PERMANENT, EXIT_TRANSIENT, Fail, os_failure

# True once main() runs as the program itself (console script, python -m): only then
# may the store fork its install worker; commands read it as `args.owns_process`.
OWNS_PROCESS = False

# One module per command under fdlenv/commands; each defines add_parser(sub).
COMMANDS = ("env", "run", "shell_hook", "detect", "lock", "pack", "walkthrough", "join", "recipe", "build", "prepare")

EPILOG = """examples:
  fdlenv detect --json
  fdlenv env realize --libtorch cpu --json
  fdlenv run --libtorch cpu -- python -c 'import os; print(os.environ["LIBTORCH_PATH"])'
"""


class Parser(argparse.ArgumentParser):
    """argparse with fdlenv's error shape: usage, then one `error:` line, exit 2.

    argparse builds a help formatter for every `add_argument` (to check metavars),
    and each asks `shutil` for the terminal width: ~4 ms of imports on every re-dial.
    The width is computed here the same way (COLUMNS, else the terminal, else 80)."""

    def _get_formatter(self):
        return self.formatter_class(prog=self.prog, width=_help_width())

    def error(self, message: str):
        self.print_usage(sys.stderr)
        print(f"error: {self.prog}: {message}", file=sys.stderr)
        sys.exit(EXIT_PERMANENT)


def _help_width() -> int:
    try:
        cols = int(os.environ.get("COLUMNS", "0"))
    except ValueError:
        cols = 0
    if cols <= 0:
        try:
            cols = os.get_terminal_size(sys.__stdout__.fileno()).columns
        except (AttributeError, ValueError, OSError):
            cols = 80
    return max(cols - 2, 11)   # what argparse's own formatter subtracts


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
    """The full parser, or just the `only` command's (the re-dial path pays for one module)."""
    parser = Parser(
        prog="fdlenv",
        description="Locked libtorch environments and the flodl dial-in worker.",
        epilog=EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    parser.add_argument("--version", action="version", version=f"fdlenv {__version__}")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    sub.required = True
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"fdlenv.commands.{name}").add_parser(sub)
    return parser


def _command_of(argv: list[str]) -> str | None:
    """The module name of the command in argv, when it names one (else None: full help)."""
    for arg in argv:
        if not arg.startswith("-"):
            name = arg.replace("-", "_")
            return name if name in COMMANDS else None
    return None


def split_tail(argv: list[str]) -> tuple[list[str], list[str] | None]:
    if "--" in argv:
        i = argv.index("--")
        return argv[:i], argv[i + 1:]
    return argv, None


def main(argv: list[str] | None = None) -> int:
    global OWNS_PROCESS
    OWNS_PROCESS = argv is None  # run as the program, not called by a host process
    rc = _main(list(sys.argv[1:] if argv is None else argv))
    if OWNS_PROCESS and "rattler" in sys.modules:
        # py-rattler 0.28 can crash at interpreter exit (134/139) after its calls succeeded
        # (`lock`, `pack`): the exit code must stay 0/1/2, so leave without the teardown.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(rc)
    return rc


def _main(argv: list[str]) -> int:
    head, tail = split_tail(argv)
    args = build_parser(_command_of(head)).parse_args(head)
    args.tail = tail
    args.owns_process = OWNS_PROCESS   # only then may the store fork its install worker
    try:
        return int(args.func(args) or 0)
    except Fail as f:
        print(f"error: {f.message}", file=sys.stderr)
        return f.exit_code
    except KeyboardInterrupt:
        print("error: interrupted", file=sys.stderr)
        return EXIT_TRANSIENT
    except OSError as e:
        # Disk full, permission denied, ...: errors.os_failure's one rule; the message names the path.
        f = os_failure(e)
        print(f"error: {f.message}", file=sys.stderr)
        return f.exit_code


if __name__ == "__main__":
    sys.exit(main())
