"""Flags several commands share, and what they mean, in one place.

A command module (`fdlenv/front/commands/<name>.py`) never imports another command
or the CLI front: what two commands share lives here, below them.
- `home_option`: `--home` everywhere;
- `store_options` (`--libtorch`, `--lock`, `--mirror`, `--frozen`) and `libtorch_of`:
  env realize, use, run and shell-hook settle a libtorch the same way
  (`settings.resolve`, then the one resolver, `libtorch.choose`);
- `add_source_flags` (build, prepare, join), `add_join_flags` (prepare, join),
  `add_dial_flags` (join) and `join_flags`: read into `config.model.JoinFlags`,
  the same meaning in every command.

`args.owns_process` is set by the CLI front: true only when fdlenv runs as
the program itself, which is when the store may fork its install worker.
"""

from __future__ import annotations

TYPE_CHECKING = False   # argparse is imported only where a parser is built (cliparse.py)
if TYPE_CHECKING:
    import argparse


def home_option(parser: argparse.ArgumentParser) -> None:
    """--home on a subcommand; FLODL_HOME, fdl.yml's `fdlenv: home:` and ~/.flodl otherwise."""
    parser.add_argument("--home", metavar="DIR", default=None,
                        help="fdlenv home (default $FLODL_HOME, else fdlenv.home in fdl.yml, else ~/.flodl)")


def mirror_option(parser: argparse.ArgumentParser, help: str | None = None) -> None:
    parser.add_argument("--mirror", metavar="NAME=URL", action="append", default=None,
                        help=help or "map a channel or wheel index (pypi, pytorch) to a mirror (repeatable)")


def store_options(p: argparse.ArgumentParser, variant_required: bool, positional: bool = False) -> None:
    """--libtorch, --lock, --mirror, --frozen; `positional`: the variant may also be given bare
    (`env realize cu128`, as `env use cu128`)."""
    if positional:
        variant_option(p, variant_required, "cpu, cu126, cu128, rocm7.0, rocm7.1 (or auto)")
        p.set_defaults(_variant_auto=True)
    else:
        p.add_argument("--libtorch", metavar="VARIANT", required=variant_required,
                       help="cpu, cu126, cu128, rocm7.0, rocm7.1 (or auto)")
    p.add_argument("--lock", metavar="FILE", help="conda-lock v1 file (default: discovered)")
    mirror_option(p)
    frozen_option(p)


def frozen_option(p: argparse.ArgumentParser) -> None:
    p.add_argument("--frozen", action="store_true", default=False,
                   help="never lock a variant on demand: only what a lock holds (also FDLENV_FROZEN=1, "
                        "`fdlenv: frozen: true`)")


def variant_option(p: argparse.ArgumentParser, required: bool, help: str | None = None) -> None:
    """The variant of `env realize|path|use|verify|remove`: `--libtorch V` as everywhere, or the
    positional V (kept as an alias); giving both with different values is refused."""
    import argparse

    p.add_argument("variant", nargs="?", metavar="VARIANT", help=argparse.SUPPRESS)
    p.add_argument("--libtorch", metavar="VARIANT", help=help or "cpu, cu126, cu128, rocm7.0, rocm7.1"
                   + ("" if required else " (default: every realised variant)"))
    p.set_defaults(_variant_required=required)


def fold_variant_alias(args) -> None:
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


def owns_process(args) -> bool:
    return bool(getattr(args, "owns_process", False))


def settings_of(args):
    """`settings.resolve` of the command's --home, --mirror, --lock and --frozen."""
    from ..app.settings import resolve
    return resolve(getattr(args, "home", None), getattr(args, "mirror", None), getattr(args, "lock", None),
                   frozen=getattr(args, "frozen", False))


def libtorch_of(args, say, *, prefer_realised: bool, activate: bool = False, settings=None):
    """(Settings, `store.active.Active`) for a command's --libtorch, through the one resolver
    (`fdlenv.app.libtorch.choose`); its notes go through `say`. No token and nothing active is
    one `error:` line."""
    from ..names import variants
    from ..base.errors import Fail
    from ..app.libtorch import choose

    st = settings or settings_of(args)
    notes: list[str] = []
    try:
        act = choose(st.home, args.libtorch, st.view(), st.mirrors, platform=st.platform, frozen=st.frozen,
                     prefer_realised=prefer_realised, project_root=st.project_root, activate=activate,
                     fork=owns_process(args), notes=notes)
    finally:
        for n in notes:
            say(n)
    if act is None:
        from ..store.maintain import env_dirs
        from ..store.env import read_manifest

        realised = sorted({read_manifest(d)["variant"] for d in env_dirs(st.home)})
        hint = (f"; realised here: {', '.join(realised)} (`fdlenv env use {realised[0]}` makes one active)"
                if realised else "")
        raise Fail.permanent("--libtorch: no variant given and none active (flodl's libtorch/.active names "
                             f"none){hint}; accepted: " + variants.ACCEPTED)
    return st, act


def run_prepare(args, settings, req, say):
    """`prepare(req)` for a command (prepare, build): its notes go through `say`, also before
    the error when a step fails."""
    from pathlib import Path

    from ..base.errors import Fail
    from ..names.home import Home
    from ..app.prepare import prepare

    try:
        out = prepare(req, Home(Path(settings.home)), fork=owns_process(args))
    except Fail as f:
        for n in f.notes:
            say(n)
        raise
    for n in out.notes:
        say(n)
    return out


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
    p.add_argument("--libtorch", metavar="VARIANT",
                   help="auto, cpu, cu126, cu128, rocm7.0, rocm7.1 (default: the box's active one)")
    p.add_argument("--lock", metavar="FILE", help="conda-lock file (default: discovered)")
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


def join_flags(args: argparse.Namespace):
    """The parsed flags as `JoinFlags` (absent dial flags read as unset)."""
    from ..config.model import JoinFlags

    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    return JoinFlags(
        controller=g("controller"), ssh=g("ssh"), identity=g("identity"), token=g("token"),
        bin=g("bin"), source=g("source"), source_cwd=g("source_cwd"),
        source_build=g("source_build"), source_bin=g("source_bin"), libtorch=g("libtorch"),
        lock=g("lock"), mirrors=tuple(g("mirror") or ()), home=g("home"), host=g("host"),
        devices=g("devices"), persist=bool(g("persist", False)), data_path=g("data_path"),
        data_source=g("data_source"), gpu_ram_share=g("gpu_ram_share"),
        no_sig_probe=bool(g("no_sig_probe", False)), tail=g("tail"), token_file=g("token_file"),
        frozen=bool(g("frozen", False)))
