"""`fdlenv join`: prepare this box, dial the controller, run the agent.

Parse -> load fdl.yml (+ FDL_ENV overlay) -> resolve flags over the `join:`
block -> check a given binary once -> run the attempt loop. Every authoring
error exits 2 before anything runs. `add_common_flags` and `flags_from_args`
are shared with `fdlenv prepare` (the non-dial subset).
"""

from __future__ import annotations

import argparse
import math

from ..config.model import JoinFlags

EPILOG = """examples:
  # one-shot, binary already on the box, controller reached directly
  fdlenv join ctrl.lan:1337 --bin ./target/release/train -- --epochs 10

  # through an ssh hop (controller address as seen from the hop), re-dial forever
  fdlenv join --ssh join@gateway:2222 --identity ~/.ssh/farm_ed25519 \\
      --source git+https://git.example/me/model#main --libtorch auto --persist

  # everything baked into fdl.yml's join: block (golden image)
  fdlenv join

exit codes: the agent's own code (one-shot; killed by a signal -> 1),
            1 transient (retrying may help), 2 permanent (config, bad input).
"""


def _share(text: str) -> float:
    try:
        v = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a number, got {text!r}") from None
    if not math.isfinite(v) or v < 0:
        raise argparse.ArgumentTypeError(f"must be a finite number >= 0, got {text!r}")
    return v


def add_common_flags(p: argparse.ArgumentParser) -> None:
    """The flags `join` shares with `prepare` (no controller, token, persist, probe)."""
    p.add_argument("--ssh", metavar="[USER@]HOST[:PORT]",
                   help="ssh hop: tunnel to the controller (and pull rsync sources) through it")
    p.add_argument("--identity", metavar="FILE", help="key file for the ssh hop")
    p.add_argument("--bin", metavar="PATH", help="training binary on this box, run as given")
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
    p.add_argument("--mirror", metavar="NAME=URL", action="append", default=[],
                   help="channel or wheel-index mirror (pypi=URL, pytorch=URL), repeatable")
    p.add_argument("--host", metavar="NAME", help="logical host name (default: hostname)")
    p.add_argument("--devices", metavar="0,1|all", help="device ids to offer (default: all)")
    p.add_argument("--data-path", metavar="P", help="dataset root (with --data-source: mountpoint)")
    p.add_argument("--data-source", metavar="S", help="sshfs://... mounted when not already")
    p.add_argument("--home", metavar="DIR", default=None,
                   help="fdlenv home (default $FLODL_HOME, else fdlenv.home, else ~/.flodl)")


def add_parser(sub) -> None:
    p = sub.add_parser(
        "join", help="prepare this box and dial a flodl controller as a worker",
        description="Prepare this box (GPU gate, data, source, locked libtorch env, build), "
                    "then run the training binary as a flodl agent dialing the controller. "
                    "Arguments after `--` are the binary's own.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("controller", nargs="?", metavar="CONTROLLER",
                   help="controller host[:port] ([v6]:port); under --ssh as seen from the hop "
                        "(default 127.0.0.1:1337)")
    p.add_argument("--token", metavar="T", help="pre-shared session token (never on argv of "
                   "the agent; prefer join.token in fdl.yml over this flag)")
    add_common_flags(p)
    p.add_argument("--persist", action="store_true", help="re-dial with backoff forever")
    p.add_argument("--gpu-ram-share", metavar="F", type=_share,
                   help="integrated-GPU share of host RAM (APU only), finite and >= 0")
    p.add_argument("--no-sig-probe", action="store_true",
                   help="skip the pre-dial model-signature probe")
    p.set_defaults(func=run)


def flags_from_args(args: argparse.Namespace) -> JoinFlags:
    g = lambda name, default=None: getattr(args, name, default)  # noqa: E731
    return JoinFlags(
        controller=g("controller"), ssh=g("ssh"), identity=g("identity"), token=g("token"),
        bin=g("bin"), source=g("source"), source_cwd=g("source_cwd"),
        source_build=g("source_build"), source_bin=g("source_bin"), libtorch=g("libtorch"),
        lock=g("lock"), mirrors=tuple(g("mirror") or ()), home=g("home"), host=g("host"),
        devices=g("devices"), persist=bool(g("persist", False)), data_path=g("data_path"),
        data_source=g("data_source"), gpu_ram_share=g("gpu_ram_share"),
        no_sig_probe=bool(g("no_sig_probe", False)), tail=g("tail"))


def real_prepare(settings):
    """Preparation through fdlenv.prepare (imported lazily: the heavy part)."""
    from .. import prepare as mod  # noqa: PLC0415
    from ..home import Home  # noqa: PLC0415

    return mod.prepare(mod.request_from_settings(settings), Home.resolve(settings.home))


def run(args: argparse.Namespace) -> int:
    from ..config.load import load_project  # noqa: PLC0415
    from ..config.resolve import check_given_bin, resolve  # noqa: PLC0415
    from ..join.loop import run_join  # noqa: PLC0415
    from ..progress import say  # noqa: PLC0415

    settings = resolve(flags_from_args(args), load_project())
    if settings.controller_defaulted:
        say(f"no controller named: dialing {settings.controller_host}:"
            f"{settings.controller_port} (give CONTROLLER, --ssh, or join.controller)")
    settings = check_given_bin(settings)
    return run_join(settings, real_prepare)
