"""Flags several commands share, and what they mean, in one place.

A command module (`fdlenv/front/commands/<name>.py`) never imports another command
or the CLI front: what two commands share lives here, below them.
- `add`: an option of the one table (`front.table.OPTIONS`) as an argparse argument;
  `add_shape` (a hot command's options, as its shape in the table lists them),
  `home_option` (`--home` everywhere), `mirror_option` and `frozen_option` are made with it;
- `store_ask`: a store command's Namespace as its typed request (`app.settings.StoreAsk`,
  the `--libtorch` token parsed once), which `app.libtorch.settle` answers; `hot_ask`: the
  same command's request to the hot memo (`hot.replay.Ask`);
- `add_source_flags` (build, prepare, join), `add_join_flags` (prepare, join),
  `add_dial_flags` (join) and `join_flags`: read into `config.model.JoinFlags`,
  the same meaning in every command.
Nothing below the front sees a Namespace.

`args.owns_process` is set by the CLI front: true only when fdlenv runs as
the program itself, which is when the store may fork its install worker.

`Args` is what a command's run() is handed: argparse's Namespace, or, for a hot
command's usual shape, the front's own reading of it (`cli._read_quick`), a
SimpleNamespace with the same attributes.
"""

from __future__ import annotations

from ..names.variants import VARIANTS

TYPE_CHECKING = False   # argparse is imported only where a parser is built (parser.py)
if TYPE_CHECKING:
    import argparse
    import types
    from typing import Any

    from ..app.settings import StoreAsk
    from ..config.model import JoinFlags
    from ..names.variants import Libtorch
    from ..hot.replay import Ask

    Args = argparse.Namespace | types.SimpleNamespace
    Subparsers = argparse._SubParsersAction[argparse.ArgumentParser]   # what add_parser(sub) is handed

_VARIANTS = ", ".join(VARIANTS)   # cpu, cu126, cu128, cu130, rocm7.0, rocm7.1


def add(p: argparse.ArgumentParser, dest: str, help: str | None = None) -> None:
    """The table's option `dest` on `p` (`help` over the table's)."""
    from .table import FLAG, MANY, OPTIONS

    o = OPTIONS[dest]
    if o.takes == FLAG:
        p.add_argument(*o.flags, dest=dest, default=o.default, help=help or o.help, action="store_true")
    else:
        p.add_argument(*o.flags, dest=dest, default=o.default, help=help or o.help, metavar=o.metavar,
                       choices=o.choices, action="append" if o.takes == MANY else "store")


def home_option(parser: argparse.ArgumentParser) -> None:
    """--home on a subcommand; FLODL_HOME, fdl.yml's `fdlenv: home:` and ~/.flodl otherwise."""
    add(parser, "home")


def mirror_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    add(parser, "mirror", help)


def add_shape(p: argparse.ArgumentParser, words: tuple[str, ...], **helps: str) -> None:
    """A hot command's options, as its shape in the table lists them (`helps`: a command's own
    help for an option); the front reads the same shape itself (`cli._read_quick`)."""
    from .table import SHAPES

    shape = SHAPES[words]
    for dest in shape.options:
        if dest == "libtorch" and shape.bare == "variant":   # `env realize cu128`: the positional alias
            variant_option(p, True, _VARIANTS + " (or auto)")
        else:
            add(p, dest, helps.get(dest))
    p.set_defaults(**{k: v for k, v in shape.fixed if k.startswith("_")})


def frozen_option(p: argparse.ArgumentParser) -> None:
    add(p, "frozen")


def variant_option(p: argparse.ArgumentParser, required: bool, help: str | None = None) -> None:
    """The variant of `env realize|path|use|verify|remove`: `--libtorch V` as everywhere, or the
    positional V (kept as an alias); giving both with different values is refused."""
    import argparse

    p.add_argument("variant", nargs="?", metavar="VARIANT", help=argparse.SUPPRESS)
    add(p, "libtorch", help or _VARIANTS + ("" if required else " (default: every realised variant)"))
    p.set_defaults(_variant_required=required)


def fold_variant_alias(args: Args) -> None:
    """Fold the positional alias into `args.libtorch` (called by the CLI front after parsing)."""
    from ..base.errors import Fail

    pos = getattr(args, "variant", None)
    if pos is not None and args.libtorch is not None and pos != args.libtorch:
        raise Fail.permanent(f"--libtorch: given twice ({args.libtorch!r} and {pos!r}); give one")
    args.libtorch = args.libtorch or pos
    if args.libtorch is None and getattr(args, "_variant_required", False):
        from ..names import variants
        accepted = variants.ACCEPTED if getattr(args, "_variant_auto", False) else variants.ACCEPTED.replace("auto, ", "")
        raise Fail.permanent("--libtorch: which variant? accepted: " + accepted)


def owns_process(args: Args) -> bool:
    return bool(getattr(args, "owns_process", False))


def libtorch_given(args: Args, *, allow_auto: bool = True) -> Libtorch | None:
    """`--libtorch` parsed, once (`names.variants.parse`); None when not given."""
    token = getattr(args, "libtorch", None)
    if token is None:
        return None
    from ..names.variants import parse
    return parse(token, allow_auto=allow_auto)


def store_ask(args: Args, *, allow_auto: bool = True) -> StoreAsk:
    """A store command's typed request: its --libtorch (parsed once), --home, --lock, --mirror, --frozen."""
    from ..app.settings import StoreAsk

    return StoreAsk(libtorch_given(args, allow_auto=allow_auto), getattr(args, "home", None),
                    getattr(args, "lock", None), tuple(getattr(args, "mirror", None) or ()),
                    bool(getattr(args, "frozen", False)))


def hot_ask(kind: str, args: Args) -> Ask | None:
    """The same command's request to the hot memo (`hot.replay.Ask`, keyed as the replay keys it)."""
    from .table import ask_of
    return ask_of(kind, vars(args), getattr(args, "tail", None))


# ------------------------------------------------------------------- join and prepare

def _share(text: str) -> float:
    import argparse
    import math

    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a finite number >= 0 (e.g. 0.5), got {text!r}") from None
    if not math.isfinite(v) or v < 0:   # fdl takes these unchecked (NaN reaches the agent as null)
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0 (a share of host RAM, e.g. 0.5; "
                                         f"over 1.0 is legal), got {text!r}")
    return v


def add_source_flags(p: argparse.ArgumentParser) -> None:
    """The flags `join`, `prepare` and `build` share: the ssh hop, the source, the variant and the
    store's settings. `--identity` is the hop's key, which rsync:// and sshfs:// use too."""
    p.add_argument("--ssh", metavar="[USER@]HOST[:PORT]",
                   help="ssh hop: tunnel to the controller (and pull rsync sources) through it")
    p.add_argument("--identity", metavar="FILE", help="key file for the ssh hop (rsync:// sources use it too)")
    p.add_argument("--source", metavar="SPEC",
                   help="fetch and build here: file:///abs, rsync://[user@]host[:port]:/abs, "
                        "git+https|ssh|file://...#ref")
    p.add_argument("--source-cwd", metavar="DIR", help="project dir inside the fetched tree")
    p.add_argument("--source-build", metavar="CMD",
                   help="build recipe, a shell line (default: cargo build --release)")
    p.add_argument("--source-bin", metavar="PATH", help="built artifact, relative to the project dir")
    add(p, "libtorch", "auto, " + _VARIANTS + " (default: the box's active one)")
    add(p, "lock", "conda-lock file (default: discovered)")
    mirror_option(p)
    frozen_option(p)
    home_option(p)


def add_join_flags(p: argparse.ArgumentParser) -> None:
    """The flags `join` shares with `prepare` (no controller, token, persist, probe)."""
    add_source_flags(p)
    p.add_argument("--bin", metavar="PATH", help="training binary on this box, run as given")
    p.add_argument("--host", metavar="NAME", help="logical host name (default: hostname)")
    p.add_argument("--devices", metavar="0,1|all", help="device ids to offer, each once and each a GPU "
                   "found (checked with the GPU gate; docs/ROUTING.md) (default: all)")
    p.add_argument("--data-path", metavar="P", help="dataset root (with --data-source: mountpoint)")
    p.add_argument("--data-source", metavar="S", help="sshfs://... mounted when not already")


def add_dial_flags(p: argparse.ArgumentParser) -> None:
    """The flags only `join` has (it dials)."""
    p.add_argument("--persist", action="store_true", help="re-dial with backoff forever")
    p.add_argument("--gpu-ram-share", metavar="F", type=_share,
                   help="integrated-GPU share of host RAM (APU only), finite and >= 0")
    p.add_argument("--no-sig-probe", action="store_true",
                   help="skip the pre-dial model-signature probe")


def join_flags(args: Args) -> JoinFlags:
    """The parsed flags as `JoinFlags` (absent dial flags read as unset; --libtorch parsed, once)."""
    from ..config.model import JoinFlags

    def g(name: str, default: object = None) -> Any:   # a Namespace's attribute: argparse's Any
        return getattr(args, name, default)

    return JoinFlags(
        controller=g("controller"), ssh=g("ssh"), identity=g("identity"), token=g("token"),
        bin=g("bin"), source=g("source"), source_cwd=g("source_cwd"),
        source_build=g("source_build"), source_bin=g("source_bin"), libtorch=libtorch_given(args),
        lock=g("lock"), mirrors=tuple(g("mirror") or ()), home=g("home"), host=g("host"),
        devices=g("devices"), persist=bool(g("persist", False)), data_path=g("data_path"),
        data_source=g("data_source"), gpu_ram_share=g("gpu_ram_share"),
        no_sig_probe=bool(g("no_sig_probe", False)), tail=g("tail"), token_file=g("token_file"),
        frozen=bool(g("frozen", False)))
