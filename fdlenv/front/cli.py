"""The argparse front: parse, dispatch, map failures to exit codes.

Kept thin and cheap to import: the re-dial path (`fdlenv prepare`/`join` with
everything in place) starts here, so command modules import their heavy
dependencies (rattler, conda-lock, paramiko, gitpython) inside the functions
that need them, never at module level.

The `--` tail is split off before argparse sees it: `None` means "no tail",
an empty list means "an explicit empty tail" (join clears the block's args).
"""

import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    import types

    from ..base.errors import Fail
    from .options import Args
    from .table import Shape

# True once main() runs as the program itself (console script, python -m): only then
# may the store fork its install worker; commands read it as `args.owns_process`.
OWNS_PROCESS = False

# A closed stdout (`fdlenv env list | head`): quiet, with a SIGPIPE death's status (128 + 13).
EXIT_BROKEN_PIPE = 141
EXIT_INTERRUPTED = 130      # 128 + SIGINT, as a shell reports a command ended by Ctrl-C
# SIGTERM (a service manager's stop, `kill`) ends a command as Ctrl-C does: the same unwinding
# (nothing left in staging), one `error:` line, the JSON object under --json, and the same 130:
# neither permanent (2) nor a failure of the work, so a unit or a script re-runs it as after Ctrl-C.
_STOPPED_BY: list[int] = []
# [True] once this call was answered from the hot memo (`_answered`): the program then leaves
# without the interpreter's teardown (`main`).
_REPLAYED: list[bool] = []

# One module per command under fdlenv/front/commands; each defines add_parser(sub).
COMMANDS = ("env", "run", "shell_hook", "detect", "lock", "pack", "mirror", "walkthrough", "join", "recipe", "build",
            "prepare")

# The hot commands (a re-dial's `env realize`, a new shell's `shell-hook`, every `fdlenv run`,
# `detect`) in their usual shapes are read here, without argparse (parser.py says what that
# saves), from the one option table (`table.SHAPES`, `table.OPTIONS`), which argparse's
# arguments are made from too. tests/test_cli_quick.py holds every shape read here to
# argparse's own reading of it.


def _quick(head: list[str]) -> "types.SimpleNamespace | None":
    """The Namespace argparse would make of `head`, when it is one of the table's shapes (else
    None): `_read_quick`'s reading, with the command's function."""
    read = _read_quick(head)
    return None if read is None else _namespace(*read)


def _namespace(shape: "Shape", got: dict[str, object]) -> "types.SimpleNamespace":
    import types

    # __import__, not importlib: one module fewer (0.7 ms) on the hottest path
    func = getattr(__import__(f"fdlenv.front.commands.{shape.module}", fromlist=(shape.func,)), shape.func)
    return types.SimpleNamespace(**got, func=func)


def _read_quick(head: list[str]) -> "tuple[Shape, dict[str, object]] | None":
    """(shape, what argparse would set) for `head`, when it is one of the table's shapes: only
    the shape's options, a value-taking one once, given as `--opt VALUE` or `--opt=VALUE` with a
    value that is not an option (and one of its choices, when it has some), a repeatable one as
    often as wanted, each flag once, `-q`; its bare words as the shape says (`env realize` one
    variant, `run` its CMD from the first). Anything else (help, a typo, `--shell csh`, a value
    starting with `-`): None, and argparse reads and refuses it."""
    from .table import OPTIONS, SHAPES

    shape = SHAPES.get(tuple(head[:2])) or SHAPES.get(tuple(head[:1]))
    if shape is None:
        return None
    got: dict[str, object] = {"debug": False, "quiet": False, **{d: OPTIONS[d].default for d in shape.options}, **dict(shape.fixed)}
    if shape.bare:
        got[shape.bare] = [] if shape.rest else None
    rest, seen = head[len(shape.words):], set[str]()
    i = 0
    while i < len(rest):
        took = _words_read(shape, rest, i, got, seen)
        if took is None:
            return None
        i += took
    return shape, got


def _words_read(shape: "Shape", rest: list[str], i: int, got: dict[str, object], seen: set[str]) -> int | None:
    """How many words from `rest[i]` on are read into `got` (a command's tail: all the rest);
    None: not this shape."""
    from .table import FLAG, MANY, OPTIONS, QUIET

    word = rest[i]
    if word in QUIET.flags:
        got["quiet"] = True
        return 1
    if not word.startswith("-"):
        return _bare(shape, rest, i, got)
    name, eq, value = word.partition("=")
    opt = next((OPTIONS[d] for d in shape.options if name in OPTIONS[d].flags), None)
    if opt is None or (name in seen and opt.takes != MANY):
        return None
    seen.add(name)
    if opt.takes == FLAG:
        got[opt.dest] = True
        return None if eq else 1
    if not eq:
        value = rest[i + 1] if i + 1 < len(rest) else ""
    if not value or value.startswith("-") or (opt.choices and value not in opt.choices):
        return None
    given = got[opt.dest]   # a repeatable one's values so far: None, or a list
    got[opt.dest] = [*(given if isinstance(given, list) else []), value] if opt.takes == MANY else value
    return 1 if eq else 2


def _bare(shape: "Shape", rest: list[str], i: int, got: dict[str, object]) -> int | None:
    if shape.rest:
        got[shape.bare] = list(rest[i:])
        return len(rest) - i
    if shape.bare and got[shape.bare] is None:
        got[shape.bare] = rest[i]
        return 1
    return None


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
                raise _fail_type().permanent("--env requires a value: the name of an env overlay "
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
            raise _fail_type().permanent(f"{where}: {env!r} is not an env name; expected the NAME of an "
                                 "overlay fdl.NAME.{yml,yaml,json} beside fdl.yml (no `/`)")
        os.environ["FDL_ENV"] = name
    return out


def _first_word(words: list[str]) -> str | None:
    return next((w for w in words if not w.startswith("-")), None)


def _run_command_starts(head: list[str], i: int) -> bool:
    """Whether head[i], after `run`, is the first word of its CMD."""
    from .table import SHAPES, valued_flags

    if head[i].startswith("-"):
        return False
    return not (i >= 1 and head[i - 1] in valued_flags(SHAPES[("run",)]))


def _fail_type() -> "type[Fail]":
    """`base.errors.Fail`, imported when a failure is raised or caught: a memo's answer never
    needs it (`except _fail_type() as f` evaluates only when something was raised)."""
    from ..base.errors import Fail
    return Fail


def _own() -> None:
    """This call's state in the modules a memo's answer does not import (`base.output`,
    `base.memory`), set once the slow path runs or a failure is told: a fail ends what the
    program says (`output._OWNED`), and malloc's policy is the program's, never a host's
    (`base.memory.own_process`). An earlier call's state is reset in `main`."""
    from ..base import output
    output._OWNED = OWNS_PROCESS
    if OWNS_PROCESS:
        from ..base.memory import own_process
        own_process()


def main(argv: list[str] | None = None) -> int:
    global OWNS_PROCESS
    OWNS_PROCESS = argv is None  # run as the program, not called by a host process
    _REPLAYED.clear()
    output = sys.modules.get("fdlenv.base.output")
    if output is not None:   # a host's earlier call: what it ended is not this call's end
        output._ENDED, output._OWNED = False, OWNS_PROCESS   # type: ignore[attr-defined]
    if OWNS_PROCESS:
        # The stop handler first, before anything slow (argparse and a command's imports take
        # 0.1-0.15 s): a SIGTERM at any moment after this is 130, never the default's -15/143.
        # The C module: `signal` itself builds its enums at import (1.5 ms on every command).
        import _signal

        _signal.signal(_signal.SIGINT, _first_interrupt)
        _signal.signal(_signal.SIGTERM, _first_interrupt)
    try:
        rc = _main(list(sys.argv[1:] if argv is None else argv))
        sys.stdout.flush()
    except KeyboardInterrupt:   # stopped before a command ran (parsing, importing it)
        rc = _stopped()
    except BrokenPipeError:
        # stdout closed by its reader (`| head`): quiet, as a tool killed by SIGPIPE is,
        # and no second complaint when the interpreter flushes at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        rc = EXIT_BROKEN_PIPE
    except Exception as e:  # noqa: BLE001 - a bug before a command ran (parsing): one line too
        from ..base.errors import bug
        told = bug(e, "fdlenv")
        rc = fail(told.message, told.exit_code)
    if OWNS_PROCESS and ("rattler" in sys.modules or rc == EXIT_INTERRUPTED or _REPLAYED):
        # py-rattler 0.28 can crash at interpreter exit (134/139) after its calls succeeded
        # (`lock`, `pack`): the exit code must stay 0/1/2, so leave without the teardown.
        # After Ctrl-C, too: a download thread still in a socket read would hold the exit.
        # And after a memo's answer (a new shell's hook, a re-dial): its output is flushed here,
        # the kernel closes its descriptors (the store lock), it started no thread and registered
        # no exit handler, so the interpreter's teardown (every module freed: 1-2 ms, as much as
        # the answer itself) would only delay the exit.
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
    _own()
    from ..base.output import fail as told
    return told(message, code)


def _stopped() -> int:
    """The one line and 130 of a command stopped by Ctrl-C or SIGTERM."""
    import _signal

    term = _STOPPED_BY[:1] == [_signal.SIGTERM]
    return fail("stopped by SIGTERM; nothing half-written was kept" if term else "interrupted",
                EXIT_INTERRUPTED)


def _first_interrupt(signum: int, frame: "types.FrameType | None") -> None:
    """Ctrl-C or SIGTERM: stop what runs (KeyboardInterrupt unwinds it, its cleanup included); a
    second signal while it cleans up changes nothing. main() then leaves at once with 130."""
    import _signal

    _signal.signal(_signal.SIGINT, _signal.SIG_IGN)
    _signal.signal(_signal.SIGTERM, _signal.SIG_IGN)
    _STOPPED_BY.append(signum)
    netread = sys.modules.get("fdlenv.base.netread")
    if netread is not None:   # requests in flight end now, not at their deadline (a held download)
        netread.stop_all()
    raise KeyboardInterrupt


def _answered(shape: "Shape", got: dict[str, object], tail: list[str] | None) -> int | None:
    """The exit code when the command's memo answered it (run, shell-hook, the re-dial env
    realize: `hot.replay`), else None."""
    from .table import ask_of

    ask = ask_of(shape.kind, got, tail) if shape.kind else None
    if ask is None:
        return None
    from ..hot.replay import answer
    return answer(ask)


def _main(argv: list[str]) -> int:
    head, tail = split_tail(argv)
    if "--json" in head:
        from ..base.output import set_json
        set_json(True)
    try:
        head = take_env(head)   # --env X, --env=X, @X: exported as FDL_ENV
    except _fail_type() as f:
        return fail(f.message, f.exit_code)
    read = _read_quick(head)
    if read is not None:
        rc = _answered(read[0], read[1], tail)
        if rc is not None:
            _REPLAYED.append(True)
            return rc
    _own()
    return _slow(head, tail, read)


def _slow(head: list[str], tail: list[str] | None, read: "tuple[Shape, dict[str, object]] | None") -> int:
    """The command run by its module: no memo answered it (or it has none)."""
    from ..base.errors import DEBUG_VAR, Fail, bug, os_failure

    args: Args
    if read is not None:
        args = _namespace(*read)
        args.tail = tail
    else:
        from .parser import build_parser
        args = build_parser(COMMANDS, _command_of(head)).parse_args(head)
        args.tail = tail
    if args.debug:
        os.environ[DEBUG_VAR] = "1"   # children (the install worker) print theirs too
    args.owns_process = OWNS_PROCESS   # only then may the store fork its install worker
    if getattr(args, "quiet", False):
        from ..base.progress import set_quiet
        set_quiet(True)
    if hasattr(args, "_variant_required"):   # `env path|use|remove|verify`: VARIANT or --libtorch
        from .options import fold_variant_alias
        try:
            fold_variant_alias(args)
        except Fail as f:
            return fail(f.message, f.exit_code)
    try:
        return int(args.func(args) or 0)
    except Fail as f:
        return fail(f.message, f.exit_code)
    except KeyboardInterrupt:
        return _stopped()
    except BrokenPipeError:
        raise           # main() makes it quiet
    except OSError as e:
        # Disk full, permission denied, ...: errors.os_failure's one rule; the message names the path.
        told = os_failure(e)
        return fail(told.message, told.exit_code)
    except Exception as e:  # noqa: BLE001 - what fdlenv did not expect: one line, a bug, exit 1
        told = bug(e, f"fdlenv {_first_word(head)}")   # args.command: run's is its CMD
        return fail(told.message, told.exit_code)


if __name__ == "__main__":
    sys.exit(main())
