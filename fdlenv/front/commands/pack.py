"""`fdlenv pack libtorch`: PyTorch's zip or wheel -> a conda package in a local channel."""

from __future__ import annotations

from ...base.output import emit

import argparse
import dataclasses

from ..options import home_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv pack libtorch --libtorch cu128 --from libtorch-shared-with-deps-2.10.0+cu128.zip
  fdlenv pack libtorch --libtorch cpu --from torch-2.10.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl
  fdlenv pack libtorch --libtorch rocm7.1 --from https://host/libtorch.zip --channel /srv/flodl

The package is libtorch-<variant> (libtorch-cpu, libtorch-cu126, libtorch-cu128,
libtorch-rocm70, libtorch-rocm71) in CHANNEL/linux-64; the channel is re-indexed.
Its version is the artifact's (build-version or wheel version, local tag
dropped) unless --version is given. The default channel is the home's
$FLODL_HOME/channels/flodl, which env files name as `flodl`.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("pack", help="repackage PyTorch artifacts as conda packages",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    what = p.add_subparsers(dest="what", metavar="WHAT")
    what.required = True
    lt = what.add_parser("libtorch", help="pack a libtorch zip or torch wheel as libtorch-<variant>",
                         description=__doc__, epilog=EPILOG,
                         formatter_class=argparse.RawDescriptionHelpFormatter)
    lt.add_argument("--libtorch", "--variant", dest="variant", required=True, metavar="V",
                    help="cpu, cu126 (12.6), cu128 (12.8), cu130 (13.0), rocm7.0 (rocm70), rocm7.1 (rocm71) "
                         "(--variant is the older spelling)")
    lt.add_argument("--from", dest="source", required=True, metavar="PATH_OR_URL",
                    help="libtorch-shared-with-deps-*.zip or torch-*.whl, a path or URL")
    lt.add_argument("--channel", metavar="DIR", default=None,
                    help="channel directory (default: $FLODL_HOME/channels/flodl)")
    lt.add_argument("--version", metavar="X", default=None, help="package version (default: the artifact's)")
    lt.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(lt)
    lt.set_defaults(func=run)


def run(args: Args) -> int:
    from pathlib import Path

    from ...pack.libtorch import pack_libtorch
    from ...app.settings import resolve

    channel = Path(args.channel) if args.channel else resolve(args.home).home.channel
    packed = pack_libtorch(args.variant, args.source, channel, version=args.version)
    if args.json:
        emit({k: str(v) if isinstance(v, Path) else v
                          for k, v in dataclasses.asdict(packed).items()})
    return 0
