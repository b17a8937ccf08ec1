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
from .errors import DEBUG_VAR, EXIT_PERMANENT, Fail, bug, os_failure

# True once main() runs as the program itself (console script, python -m): only then
# may the store fork its install worker; commands read it as `args.owns_process`.
OWNS_PROCESS = False

# A closed stdout (`fdlenv env list | head`): quiet, with a SIGPIPE death's status (128 + 13).
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130      # 128 + SIGINT, as a shell reports a command ended by Ctrl-C

# One module per command under fdlenv/commands; each defines add_parser(sub).
COMMANDS = ("env", "run", "shell_hook", "detect", "lock", "pack", "mirror", "walkthrough", "join", "recipe", "build",
            "prepare")

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

    def __init__(self, *args, **kwargs):
        kwargs.setdefault("allow_abbrev", False)
        super().__init__(*args, **kwargs)

    def _get_formatter(self):
        return self.formatter_class(prog=self.prog, width=_help_width())

    def error(self, message: str):
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


def build_parser(only: str | None = None) -> argparse.ArgumentParser:
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
    for name in COMMANDS if only is None else (only,):
        importlib.import_module(f"fdlenv.commands.{name}").add_parser(sub)
    _add_quiet(parser, False)
    return parser


def _add_quiet(parser: argparse.ArgumentParser, default) -> None:
    """`-q`/`--quiet` on every (sub)command: no progress, only results and errors. Below the
    root its default is SUPPRESS, so a `-q` given earlier on the line is not undone."""
    parser.add_argument("-q", "--quiet", action="store_true", default=default,
                        help="no progress lines: only results and errors")
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for child in {id(c): c for c in action.choices.values()}.values():
                _add_quiet(child, argparse.SUPPRESS)


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


def take_env(head: list[str]) -> list[str]:
    """Strip fdl's env selectors from the argv before `--` and export the choice as FDL_ENV
    (what the fdl.yml loader reads, and what children inherit), as fdl does: `--env X` and
    `--env=X` anywhere before `--`, `@X` only before the command name (`fdlenv join @farm`
    names a controller, not an env). The last one given wins."""
    out: list[str] = []
    env = None
    i, command_seen = 0, False
    while i < len(head):
        a = head[i]
        if command_seen and _first_word(out) == "run" and _run_command_starts(head, i):
            out += head[i:]      # `fdlenv run CMD ...`: from CMD on, every word is CMD's own
            break
        if a == "--env":
            if i + 1 >= len(head) or head[i + 1].startswith("-"):
                raise Fail.permanent("--env requires a value: the name of an env overlay "
                                     "(--env NAME, --env=NAME or @NAME selects fdl.NAME.yml)")
            env, where, i = head[i + 1], "--env", i + 2
            continue
        if a.startswith("--env="):
            env, where, i = a[len("--env="):], "--env", i + 1
            continue
        if a.startswith("@") and not command_seen:
            env, where, i = a[1:], "@NAME", i + 1
            continue
        command_seen = command_seen or not a.startswith("-")
        out.append(a)
        i += 1
    if env is not None:
        name = env.strip()
        if not name or "/" in name or "\0" in name:
            raise Fail.permanent(f"{where}: {env!r} is not an env name; expected the NAME of an "
                                 "overlay fdl.NAME.{yml,yaml,json} beside fdl.yml (no `/`)")
        os.environ["FDL_ENV"] = name
    return out


# `run`'s own options that take a value: the word after one is not CMD.
_RUN_VALUED = ("--libtorch", "--lock", "--home", "--mirror")


def _first_word(words: list[str]) -> str | None:
    return next((w for w in words if not w.startswith("-")), None)


def _run_command_starts(head: list[str], i: int) -> bool:
    """Whether head[i], after `run`, is the first word of its CMD."""
    if head[i].startswith("-"):
        return False
    return not (i >= 1 and head[i - 1] in _RUN_VALUED)


def main(argv: list[str] | None = None) -> int:
    global OWNS_PROCESS
    OWNS_PROCESS = argv is None  # run as the program, not called by a host process
    try:
        try:
            rc = _main(list(sys.argv[1:] if argv is None else argv))
        except BrokenPipeError:
            raise
        except Exception as e:  # noqa: BLE001 - a bug before a command ran (parsing): one line too
            told = bug(e, "fdlenv")
            rc = fail(told.message, told.exit_code)
        sys.stdout.flush()
    except BrokenPipeError:
        # stdout closed by its reader (`| head`): quiet, as a tool killed by SIGPIPE is,
        # and no second complaint when the interpreter flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = EXIT_BROKEN_PIPE
    if OWNS_PROCESS and ("rattler" in sys.modules or rc == EXIT_INTERRUPTED):
        # py-rattler 0.28 can crash at interpreter exit (134/139) after its calls succeeded
        # (`lock`, `pack`): the exit code must stay 0/1/2, so leave without the teardown.
        # After Ctrl-C, too: a download thread still in a socket read would hold the exit.
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):
                pass
        os._exit(rc)
    return rc


def fail(message: str, code: int) -> int:
    """The one way a failure is told (`output.fail`): an `error:` line on stderr and, under
    --json, {"schema", "error", "exit"} on stdout."""
    from .output import fail as told
    return told(message, code)


def _first_interrupt(signum, frame) -> None:
    """Ctrl-C: stop what runs (KeyboardInterrupt unwinds it, its cleanup included); a second
    press while it cleans up changes nothing. main() then leaves at once with 130."""
    import _signal

    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    raise KeyboardInterrupt


def _main(argv: list[str]) -> int:
    head, tail = split_tail(argv)
    if "--json" in head:
        from .output import set_json
        set_json(True)
    try:
        head = take_env(head)   # --env X, --env=X, @X: exported as FDL_ENV
    except Fail as f:
        return fail(f.message, f.exit_code)
    args = build_parser(_command_of(head)).parse_args(head)
    args.tail = tail
    if args.debug:
        os.environ[DEBUG_VAR] = "1"   # children (the install worker) print theirs too
    args.owns_process = OWNS_PROCESS   # only then may the store fork its install worker
    if getattr(args, "quiet", False):
        from .progress import set_quiet
        set_quiet(True)
    if hasattr(args, "_variant_required"):   # `env path|use|remove|verify`: VARIANT or --libtorch
        from .flags import fold_variant_alias
        try:
            fold_variant_alias(args)
        except Fail as f:
            return fail(f.message, f.exit_code)
    if OWNS_PROCESS:
        # The C module: `signal` itself builds its enums at import (1.5 ms on every command).
        import _signal

        _signal.signal(_signal.SIGINT, _first_interrupt)
    try:
        return int(args.func(args) or 0)
    except Fail as f:
        return fail(f.message, f.exit_code)
    except KeyboardInterrupt:
        return fail("interrupted", EXIT_INTERRUPTED)
    except BrokenPipeError:
        raise           # main() makes it quiet
    except OSError as e:
        # Disk full, permission denied, ...: errors.os_failure's one rule; the message names the path.
        told = os_failure(e)
        return fail(told.message, told.exit_code)
    except Exception as e:  # noqa: BLE001 - what fdlenv did not expect: one line, a bug, exit 1
        told = bug(e, f"fdlenv {args.command}")
        return fail(told.message, told.exit_code)


if __name__ == "__main__":
    sys.exit(main())
