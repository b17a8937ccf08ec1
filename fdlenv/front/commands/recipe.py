"""`fdlenv recipe systemd|cloud-init`: print deployment recipes around `fdlenv join`.

Everything is checked before a line is printed: bad input is one `error:` line and
exit 2 with nothing on stdout. Warnings about where the token sits go to stderr.
"""

from __future__ import annotations

import argparse
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv recipe systemd --user flodl --workdir /srv/flodl \\
      --token-file /etc/fdlenv/token > /etc/systemd/system/fdlenv-join.service
  # extra join flags go after `--` (the unit always adds --persist):
  fdlenv recipe systemd --workdir /srv/flodl -- --libtorch auto
  # pin the fdlenv the unit starts (default: fdlenv on the unit's PATH, ~/.local/bin
  # first, when that is this fdlenv; else this one by absolute path, with a note):
  fdlenv recipe systemd --exec /opt/fdlenv/bin/fdlenv --user flodl
  # user-data for a stock Ubuntu image; the token file is provisioned apart:
  fdlenv recipe cloud-init --fdl-yml worker.yml --token-file /etc/fdlenv/token > user-data.yml

the token: --token-file F emits LoadCredential=fdlenv-token:F; systemd hands the service
a private copy, which join reads as $CREDENTIALS_DIRECTORY/fdlenv-token. F may stay
root-only (0600). No token is ever written into the unit.
"""


def _common(s: argparse.ArgumentParser, workdir: str, home: str) -> None:
    s.add_argument("--workdir", metavar="D",
                   help=f"working directory, where join finds fdl.yml (default: {workdir})")
    s.add_argument("--home", metavar="DIR", help=f"set FLODL_HOME in the unit (default: {home})")
    s.add_argument("--token-file", metavar="FILE",
                   help="root-only token file on the box, passed as a systemd credential")
    s.add_argument("--sshfs", action="store_true",
                   help="the join mounts an sshfs:// data source (found by itself from "
                        "`-- --data-source` or fdl.yml's join.data_source)")


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser("recipe", help="print deployment recipes (systemd unit, cloud-init)",
                       description="Print a deployment recipe for `fdlenv join` on stdout.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    rs = p.add_subparsers(dest="recipe", metavar="RECIPE")
    rs.required = True
    s = rs.add_parser("systemd", help="a hardened unit that re-dials forever and stops on exit 2",
                      epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s.add_argument("--user", metavar="U", help="run as this user (default: the invoking user, "
                   "$SUDO_USER under sudo, with a note)")
    _common(s, "the cwd", "$FLODL_HOME when set here")
    s.add_argument("--exec", metavar="PATH", dest="exec_path",
                   help="the fdlenv console script to start (default: fdlenv on the unit's PATH "
                        "when that is this one, else this one by absolute path)")
    s.add_argument("--gpu-groups", metavar="auto|none|G,G", default="auto",
                   help="SupplementaryGroups for AMD's /dev/kfd and /dev/dri (default auto: "
                        "those of render, video this box has)")
    s.set_defaults(func=run_systemd)
    c = rs.add_parser("cloud-init", help="#cloud-config user-data: fdlenv, fdl.yml and the unit",
                      epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    c.add_argument("--user", metavar="U", default="ubuntu",
                   help="service user (default: ubuntu, the image's own; another is created)")
    _common(c, "<the user's home>/training", "unset: ~/.flodl")
    c.add_argument("--fdl-yml", metavar="FILE", help="fdl.yml to ship into the working directory")
    c.add_argument("--install", metavar="SPEC",
                   help="pip requirement installing fdlenv on the box: a wheel URL, fdlenv @ git+URL@COMMIT, "
                        "or a version (default: how this fdlenv was installed)")
    c.add_argument("--embed-token", metavar="LOCAL_FILE",
                   help="write this token into the --token-file path (makes the output a secret)")
    c.set_defaults(func=run_cloud_init)


def run_systemd(args: Args) -> int:
    from ...base.progress import say
    from ...recipes import plan
    from ...recipes.systemd import (check_name, check_path, invoking_user, start_command,
                                    systemd_unit, tmp_traps, user_home)

    tail = list(getattr(args, "tail", None) or [])
    plan.refuse_token(tail)   # a token is refused before anything is said
    user = check_name(args.user, "--user") if args.user else invoking_user()
    if not args.user:   # never root, or anyone, silently
        as_root = " (root: a user of its own is safer)" if user == "root" else ""
        say(f"note: User={user}, the invoking user{as_root}; --user U runs the unit as another")
    workdir = check_path(os.path.abspath(args.workdir or os.getcwd()), "--workdir")
    raw_home = args.home or (os.environ.get("FLODL_HOME") or "").strip() or None
    home = check_path(os.path.abspath(os.path.expanduser(raw_home)), "--home") if raw_home else None
    token_file = check_path(args.token_file, "--token-file") if args.token_file else None
    command, why = plan.exec_command(args.exec_path), None
    if command is None:   # /usr/bin/env fdlenv, unless the unit's PATH finds another fdlenv there
        command, why = start_command(user_home(user))
    groups = plan.gpu_groups(args.gpu_groups)
    facts = plan.facts(tail, plan.project_at(workdir), workdir)
    fdl_env = (os.environ.get("FDL_ENV") or "").strip() or None
    text = systemd_unit(user=user, workdir=workdir, join_args=tail, command=command, home=home,
                        rw_home=facts.home or home, token_file=token_file,
                        sshfs=args.sshfs or facts.sshfs, groups=groups, fdl_env=fdl_env,
                        mountpoint=facts.mountpoint, command_why=why)
    if why:
        say(f"note: {why}")
    for w in [*plan.warnings(facts, token_file), *tmp_traps(workdir, facts.home or home, command)]:
        say(w)
    sys.stdout.write(text)
    return 0


def run_cloud_init(args: Args) -> int:
    from ...config.token import read_token_file
    from ...base.progress import say
    from ...recipes import plan
    from ...recipes.cloudinit import cloud_config
    from ...recipes.systemd import check_name, check_path

    tail = list(getattr(args, "tail", None) or [])
    user = check_name(args.user, "--user")
    workdir = check_path(args.workdir, "--workdir") if args.workdir else \
        ("/root" if user == "root" else f"/home/{user}") + "/training"
    home = check_path(args.home, "--home") if args.home else None
    token_file = check_path(args.token_file, "--token-file") if args.token_file else None
    embedded = read_token_file(args.embed_token, "--embed-token") if args.embed_token else None
    install = args.install if args.install is not None else plan.install_spec()
    if not install.strip() or any(ord(c) < 0x20 for c in install):
        from ...base.errors import Fail
        raise Fail.permanent(f"--install: expected a pip requirement (fdlenv, fdlenv==X.Y, a "
                             f"wheel or git URL), got {install!r}")
    text, project = plan.project_file(args.fdl_yml, workdir) if args.fdl_yml else (None, None)
    facts = plan.facts(tail, project, workdir)
    facts = facts._replace(sshfs=args.sshfs or facts.sshfs)
    stripped = plan.without_token(text) if text is not None else None
    if stripped is not None:   # never shipped: the fdl.yml it writes is 0644 on the box
        from ...recipes.cloudinit import DEFAULT_TOKEN_FILE

        text, facts = stripped, facts._replace(token_in_clear=None)
        token_file = token_file or DEFAULT_TOKEN_FILE
        say(f"note: --fdl-yml {args.fdl_yml}: join.token is left out of the shipped fdl.yml (it would "
            f"be readable on the box and in the user-data); the unit reads the token from "
            f"{token_file}: provision it there (root, 0600), or pass --embed-token FILE")
    lock = plan.shipped_lock(args.fdl_yml, text) if text is not None else None
    out = cloud_config(user=user, install=install.strip(), fdl_yml=text, project=project,
                       facts=facts, join_args=tail, workdir=workdir, home=home,
                       token_file=token_file, embedded_token=embedded,
                       tail_source=plan.tail_value(tail, "--source"),
                       cargo=plan.needs_cargo(project, tail), lock=lock)
    for w in plan.warnings(facts, token_file or (embedded and "embedded")):
        say(w)
    if embedded is not None:
        say("warning: --embed-token: the cloud-config holds the token; most clouds let any "
            "process on the instance read user-data, so provision the file apart if you can")
    sys.stdout.write(out)
    return 0
