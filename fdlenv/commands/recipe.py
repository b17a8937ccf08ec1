"""`fdlenv recipe systemd`: print deployment recipes around `fdlenv join`."""

from __future__ import annotations

import argparse
import sys

EPILOG = """examples:
  fdlenv recipe systemd --user flodl --workdir /srv/flodl > /etc/systemd/system/fdlenv-join.service
  # extra join flags go after `--` (the unit always adds --persist):
  fdlenv recipe systemd --workdir /srv/flodl -- --libtorch auto
"""


def add_parser(sub) -> None:
    p = sub.add_parser("recipe", help="print deployment recipes (systemd unit)",
                       description="Print a deployment recipe for `fdlenv join` on stdout.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs = p.add_subparsers(dest="recipe", metavar="RECIPE")
    rs.required = True
    s = rs.add_parser("systemd", help="a unit that re-dials forever and stops on exit 2",
                      epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--user", metavar="U", help="run as this user (default: the unit's default)")
    s.add_argument("--workdir", metavar="D",
                   help="working directory, where fdl.yml is found (default: the cwd)")
    s.add_argument("--home", metavar="DIR", help="set FLODL_HOME in the unit")
    s.set_defaults(func=run_systemd)


def run_systemd(args: argparse.Namespace) -> int:
    from ..progress import say  # noqa: PLC0415
    from ..recipes import systemd_unit  # noqa: PLC0415

    tail = list(getattr(args, "tail", None) or [])
    if any(a == "--token" or a.startswith("--token=") for a in tail):
        say("warning: --token in ExecStart is readable by every user through `ps`; "
            "put it in fdl.yml's join.token (readable only by the service user) instead")
    sys.stdout.write(systemd_unit(user=args.user, workdir=args.workdir,
                                  join_args=tail,
                                  home=args.home))
    return 0
