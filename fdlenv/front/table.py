"""The options the hot commands share, each defined once, as data: argparse's arguments are
made from this table (`options.add`), the front reads the hot commands' usual shapes with it
(`cli._read_quick`, without argparse) and the hot memo's key is made of its memo-keying
options (`ask_of`).

Each option (`Opt`): its flags, its dest, whether it takes a value (VALUE), is a flag (FLAG)
or may be given again (MANY), its metavar, help, default and choices, and what it adds to the
memo's key (`memo`: "" nothing, "value" its value, "path" its absolute path). Each hot shape
(`Shape`): the command words, the module and function that run it, the options it has (in
--help's order), what argparse sets that no option does, and what its bare words are.
tests/test_cli_quick.py walks the table: every option of every shape is read by the front
as argparse reads it.

On the hottest path (a memo answers `run`, `shell-hook`, `env realize`): plain Records and
tuples, nothing imported beyond `base.record` and `names.roots`.
"""

from ..base.record import Record
from ..names.roots import absolute

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..hot.replay import Ask

VALUE, FLAG, MANY = "value", "flag", "many"
# What --shell accepts (`base.shells.render` writes fish's form for fish, the POSIX form for the
# rest): here, not in base.shells, so a replayed `run` or `env realize` never imports that.
SHELLS = ("bash", "zsh", "fish", "sh")


class Opt(Record):
    """One option, as argparse is told it and as the front reads it."""
    flags: tuple[str, ...]
    dest: str
    takes: str = VALUE                    # VALUE, FLAG or MANY
    metavar: str | None = None
    help: str = ""
    default: str | bool | None = None
    choices: tuple[str, ...] | None = None
    memo: str = ""                        # what it adds to the hot memo's key: "", "value", "path"


OPTIONS: dict[str, Opt] = {o.dest: o for o in (
    Opt(("--libtorch",), "libtorch", metavar="VARIANT", help="cpu, cu126, cu128, cu130, rocm7.0, rocm7.1 (or auto)"),
    Opt(("--lock",), "lock", metavar="FILE", help="conda-lock v1 file (default: discovered)", memo="path"),
    Opt(("--mirror",), "mirror", MANY, "NAME=URL",
        "map a channel or wheel index (pypi, pytorch) to a mirror (repeatable)", memo="value"),
    Opt(("--frozen",), "frozen", FLAG, help="never lock a variant on demand: only what a lock holds (also "
        "FDLENV_FROZEN=1, `fdlenv: frozen: true`)", default=False, memo="value"),
    Opt(("--shell",), "shell", help="the shell that reads the output (bash, zsh and sh read the same; default: "
        "$SHELL's name when it is one of these, else sh)", choices=SHELLS, memo="value"),
    Opt(("--deactivate",), "deactivate", FLAG, help="print what undoes an earlier shell-hook in this shell",
        default=False),
    Opt(("--json",), "json", FLAG, help="print one JSON object on stdout", default=False),
    Opt(("--home",), "home", metavar="DIR",
        help="fdlenv home (default $FLODL_HOME, else fdlenv.home in fdl.yml, else ~/.flodl)", memo="path"),
)}
# Every command and sub-command has it (`parser._add_quiet`); the root also has --debug.
QUIET = Opt(("-q", "--quiet"), "quiet", FLAG, help="no progress lines: only results and errors", default=False)
STORE = ("libtorch", "lock", "mirror", "frozen")


class Shape(Record):
    """A hot command's usual shape, which the front reads itself."""
    words: tuple[str, ...]
    module: str                           # fdlenv.front.commands.<module>
    func: str
    options: tuple[str, ...]              # OPTIONS' dests, in --help's order
    fixed: tuple[tuple[str, object], ...] = ()   # what argparse sets that no option does
    bare: str = ""                        # the dest of its bare words ("": none taken)
    rest: bool = False                    # from its first bare word on, every word is the bare's (run's CMD)
    kind: str = ""                        # its memo's kind ("": never answered from a memo)


SHAPES: dict[tuple[str, ...], Shape] = {s.words: s for s in (
    Shape(("shell-hook",), "shell_hook", "cmd_shell_hook", (*STORE, "shell", "deactivate", "json", "home"),
          (("command", "shell-hook"),), kind="shell-hook"),
    Shape(("run",), "run", "cmd_run", (*STORE, "home"), bare="command", rest=True, kind="run"),
    Shape(("detect",), "detect", "run", ("json", "home"), (("command", "detect"),)),
    Shape(("env", "realize"), "env", "cmd_realize", (*STORE, "json", "home"),
          (("command", "env"), ("env_command", "realize"), ("_variant_required", True), ("_variant_auto", True)),
          bare="variant", kind="realize"),
)}
_MEMO_KEYED = tuple(o for o in OPTIONS.values() if o.memo)


def valued_flags(shape: Shape) -> tuple[str, ...]:
    """The flags of `shape` that take a value: the word after one is that value."""
    return tuple(f for d in shape.options if OPTIONS[d].takes != FLAG for f in OPTIONS[d].flags)


def command_of(head: list[str], tail: list[str] | None) -> list[str]:
    """run's CMD: what followed its options, and what followed `--` (the CLI splits it off first)."""
    if tail is None:
        return list(head)
    return head + ["--"] + tail if head else list(tail)


def _words(value: object) -> list[str]:
    return [str(w) for w in value] if isinstance(value, (list, tuple)) else []


def _str(value: object) -> str | None:
    return None if value is None else str(value)


def _digest(word: str) -> str:
    import hashlib
    return "sha256:" + hashlib.sha256(word.encode()).hexdigest()


def _keyed(opt: Opt, value: object) -> str:
    """What `opt` given as `value` adds to the memo's key."""
    if opt.memo == "path":
        return absolute(str(value)) if value else ""
    if opt.takes == MANY:   # a URL that may carry a secret (`--mirror`) keys by its digest, never written
        return "\x1e".join(_digest(w) if "://" in w and ("@" in w or "?" in w) else w for w in _words(value))
    return "1" if value is True else str(value or "")


def chosen_shell(given: object, environ: "Mapping[str, str] | None" = None) -> str:
    """`--shell`, else the login shell's name from $SHELL as pixi reads it (`/usr/bin/fish` ->
    fish), else sh: a fish user's `fdlenv shell-hook | source` needs no flag."""
    if given:
        return str(given)
    import os
    name = os.path.basename(((os.environ if environ is None else environ).get("SHELL") or "").strip())
    return name if name in SHELLS else "sh"


def ask_of(kind: str, values: "Mapping[str, object]", tail: list[str] | None) -> "Ask | None":
    """The typed request the memo is keyed and replayed by (`hot.replay.Ask`), from the values the
    front read (the quick reader's, or argparse's Namespace as a dict); None when the token and the
    positional alias disagree (the slow path refuses that)."""
    from ..hot.replay import Ask

    get = values.get
    token, alias = _str(get("libtorch")), _str(get("variant"))
    if alias is not None and token is not None and alias != token:
        return None
    return Ask(kind, token or alias, _str(get("home")), _str(get("lock")),
               tuple(_keyed(o, get(o.dest)) for o in _MEMO_KEYED), bool(get("json")), chosen_shell(get("shell")),
               bool(get("deactivate")), tuple(command_of(_words(get("command")), tail)) if kind == "run" else ())
