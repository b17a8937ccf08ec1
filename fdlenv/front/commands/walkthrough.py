"""`fdlenv walkthrough`: shipped lock -> env -> C++ build -> run, timed."""

from __future__ import annotations

from ...base.output import emit

import argparse

from ..options import home_option, mirror_option

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv walkthrough                      # in $FLODL_HOME (default ~/.flodl)
  fdlenv walkthrough --home ./fdlenv-demo --json
  fdlenv walkthrough --libtorch cpu --lock conda-lock.yml   # a variant you locked yourself

Needs an index that serves PyTorch's wheels (pip's and uv's default index does,
for cu128), g++, and for cu128 about 3.9 GB of download and 6 GB of disk; no conda
channel and no pip. The index: --mirror pypi=URL, else PIP_INDEX_URL, UV_DEFAULT_INDEX,
pip's config files (index-url), uv.toml, else pip's own default.
A second run reuses the env and the build and takes a couple of seconds.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("walkthrough", help="the end-to-end tour on the shipped cu128 lock, timed",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--libtorch", metavar="VARIANT", default="cu128", help="variant to realise (default cu128)")
    p.add_argument("--lock", metavar="FILE", default=None, help="lock file (default: the one shipped with fdlenv)")
    mirror_option(p)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(p)
    p.set_defaults(func=run)


def run(args: Args) -> int:
    from pathlib import Path

    from ..options import owns_process
    from ...app.settings import resolve
    from ...names.variants import parse_token
    from ...app.walkthrough import run_walkthrough

    variant = parse_token(args.libtorch, allow_auto=False)
    s = resolve(args.home, args.mirror)   # the lock: --lock, else the shipped one (not fdl.yml's)
    result = run_walkthrough(s.home, variant, Path(args.lock).absolute() if args.lock else None, s.mirrors,
                             fork=owns_process(args))
    if args.json:
        emit(result.to_json())
    return 0
