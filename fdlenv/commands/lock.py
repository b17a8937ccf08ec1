"""`fdlenv lock`: solve envs/<variant>.yml into conda-lock.yml, or `--check` it."""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..cli import home_option
from ..progress import say

EPILOG = """examples:
  fdlenv lock                                   # every envs/<variant>.yml -> conda-lock.yml
  fdlenv lock --variant cpu --variant cu128 --out locks/conda-lock.yml
  fdlenv lock --split                           # conda-lock.<variant>.yml, one per variant
  fdlenv lock --mirror conda-forge=file:///srv/mirror/conda-forge
  fdlenv lock --check                           # exit 0: still satisfied, 1: stale (says what)

Channels: `flodl` is the home's local channel ($FLODL_HOME/channels/flodl,
filled by `fdlenv pack libtorch`); --mirror NAME=URL maps any channel name.
Platforms: the env file's `platforms:`, else --platform, else this machine's.
Each variant is solved for declared virtual packages (cu126: __cuda 12.6,
cu128: __cuda 12.8, __glibc baseline), never this machine's GPU.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("lock", help="solve envs/<variant>.yml into a conda-lock v1 file",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--envs", metavar="DIR", default="envs", help="env files directory (default: envs)")
    p.add_argument("--variant", metavar="V", action="append", help="lock only this variant (repeatable)")
    p.add_argument("--platform", metavar="P", action="append",
                   help="platform when an env file names none (repeatable), e.g. linux-64")
    p.add_argument("--mirror", metavar="NAME=URL", action="append", help="channel mirror (repeatable)")
    p.add_argument("--out", metavar="FILE", default="conda-lock.yml", help="lock file (default: conda-lock.yml)")
    p.add_argument("--split", action="store_true", help="write <out-stem>.<variant>.yml per variant")
    p.add_argument("--check", action="store_true", help="exit 1 when the lock no longer satisfies the env files")
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from .. import mirrors
    from ..home import Home
    from ..lock import check_locks, lock_envs

    home = Home.resolve(args.home)
    kwargs = dict(variants=args.variant, platforms=args.platform,
                  mirrors=mirrors.parse(args.mirror), home=home)
    t0 = time.monotonic()
    if args.check:
        problems = check_locks(Path(args.envs), Path(args.out), **kwargs)
        for line in problems:
            say(f"stale: {line}")
        if not problems:
            say(f"{args.out} satisfies every spec in {args.envs}")
        if args.json:
            print(json.dumps({"stale": bool(problems), "problems": problems}))
        return 1 if problems else 0
    written = lock_envs(Path(args.envs), Path(args.out), split=args.split, **kwargs)
    seconds = round(time.monotonic() - t0, 3)
    for path in written:
        say(f"wrote {path}")
    say(f"locked in {seconds:.2f} s")
    if args.json:
        print(json.dumps({"written": [str(p) for p in written], "seconds": seconds}))
    return 0
