"""`fdlenv lock`: solve envs/<variant>.yml into conda-lock.yml, or `--check` it."""

from __future__ import annotations

import argparse
import time
from pathlib import Path

from ... import PACKAGE_DIR
from ...base.output import emit
from ..options import home_option, mirror_option
from ...base.progress import say

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv lock --libtorch cu128                   # envs/cu128.yml -> conda-lock.yml (others kept)
  fdlenv lock --libtorch cu126                   # from PyTorch's index -> cu126.conda-lock.yml
  fdlenv lock --libtorch cu130 --envs envs       # a project's own env file (its own torch pin)
  fdlenv lock --libtorch cpu --platform linux-aarch64   # for another platform (markers for it)
  fdlenv lock --split                           # <variant>.conda-lock.yml, one per variant
  fdlenv lock --layer toolchain                 # add envs/toolchain.yml (conda-forge) to each variant
  fdlenv lock --mirror conda-forge=file:///srv/mirror/conda-forge
  fdlenv lock --check                           # exit 0: still satisfied, 1: stale (says what)

Wheel variants (`pip:` requirements in the env file) resolve through the index
named by `pip-index:` (and `pip-sources:` per project), with fdlenv's own
resolver (no pip needed): `pypi` is the index your pip is configured with,
`pytorch/<variant>` is PyTorch's own, https://download.pytorch.org/whl/<variant>
(--mirror pytorch=URL for a mirror). A variant that cannot share the lock with
those already in it (another torch build) goes to its own
<variant>.conda-lock.yml, which every reader finds. You rarely need this
command: any command locks a variant no lock holds on demand (docs/LOCK.md).

Channels: `flodl` is the home's local channel ($FLODL_HOME/channels/flodl,
filled by `fdlenv pack libtorch`); --mirror NAME=URL maps any channel name.
Platforms: the env file's `platforms:` (those --platform names, if any), else
--platform, else this machine's.
Each variant is solved for declared virtual packages (cu126: __cuda 12.6,
cu128: __cuda 12.8, cu130: __cuda 13.0, __glibc baseline), never this machine's GPU.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("lock", help="solve envs/<variant>.yml into a conda-lock v1 file",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", metavar="DIR", default=None,
                   help="env files directory (default: ./envs, else the env files shipped with fdlenv)")
    p.add_argument("--layer", metavar="NAME", action="append",
                   help="add envs/NAME.yml's conda specs to every variant (repeatable), e.g. toolchain")
    p.add_argument("--libtorch", "--variant", dest="variant", metavar="V", action="append",
                   help="lock only this variant (repeatable; --variant is the older spelling)")
    p.add_argument("--platform", metavar="P", action="append",
                   help="platform when an env file names none (repeatable), e.g. linux-64")
    mirror_option(p, "channel or wheel-index mirror (repeatable), e.g. pytorch=URL")
    p.add_argument("--out", metavar="FILE", default="conda-lock.yml", help="lock file (default: conda-lock.yml)")
    p.add_argument("--split", action="store_true", help="write <out-stem>.<variant>.yml per variant")
    p.add_argument("--check", action="store_true", help="exit 1 when the lock no longer satisfies the env files")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(p)
    p.set_defaults(func=run)


def envs_dir(flag: str | None) -> Path:
    if flag:
        return Path(flag)
    local = Path("envs")
    if local.is_dir():
        return local
    return Path(PACKAGE_DIR) / "data" / "envs"


def run(args: Args) -> int:
    from ...lock import check_locks, lock_envs
    from ...app.settings import resolve

    s = resolve(args.home, args.mirror)
    envs = envs_dir(args.envs)
    kwargs = dict(variants=args.variant, platforms=args.platform, mirrors=s.mirrors, home=s.home)
    t0 = time.monotonic()
    if args.check:
        problems = check_locks(envs, Path(args.out), **kwargs)
        for line in problems:
            say(f"stale: {line}")
        if not problems:
            say(f"{args.out} satisfies every spec in {envs}")
        if args.json:
            emit({"stale": bool(problems), "problems": problems})
        return 1 if problems else 0
    written = lock_envs(envs, Path(args.out), split=args.split, layers=args.layer, **kwargs)
    seconds = round(time.monotonic() - t0, 3)
    for path in written:
        say(f"wrote {path}")
    say(f"locked in {seconds:.2f} s")
    if args.json:
        emit({"written": [str(p) for p in written], "seconds": seconds})
    return 0
