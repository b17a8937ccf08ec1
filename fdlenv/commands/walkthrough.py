"""`fdlenv walkthrough`: wheel -> package -> lock -> env -> C++ build -> run, timed."""

from __future__ import annotations

import argparse
import json

from ..cli import home_option

EPILOG = """examples:
  fdlenv walkthrough                      # in $FLODL_HOME (default ~/.flodl)
  fdlenv walkthrough --home ./fdlenv-demo --json

Needs pip (to obtain a torch CPU wheel) and g++; no conda channel. A second
run reuses the cached wheel, the packed package, the env and the build.
"""


def add_parser(sub) -> None:
    p = sub.add_parser("walkthrough", help="the end-to-end tour on a torch CPU wheel, timed",
                       description=__doc__, epilog=EPILOG,
                       formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--json", action="store_true", help="print the result as one JSON object on stdout")
    home_option(p)
    p.set_defaults(func=run)


def run(args) -> int:
    from ..home import Home
    from ..walkthrough import run_walkthrough

    result = run_walkthrough(Home.resolve(args.home))
    if args.json:
        print(json.dumps(result.to_json()))
    return 0
