"""`fdlenv join`: prepare this box, dial the controller, run the agent.

Parse -> load fdl.yml (+ FDL_ENV overlay) -> resolve flags over the `join:`
block -> check a given binary once -> run the attempt loop (its first attempt
reads the token file). Every authoring error exits 2 before anything runs. The
flags it shares with `fdlenv prepare` (the non-dial subset) live in `fdlenv.front.options`.
"""

from __future__ import annotations

import argparse

from ..options import add_dial_flags, add_join_flags, join_flags, owns_process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers
    from collections.abc import Callable

    from ...app.prepare import Prepared
    from ...config.model import JoinSettings
    from ...join.loop import AttemptReport, Injected


EPILOG = """examples:
  # one-shot, binary already on the box, controller reached directly
  fdlenv join ctrl.lan:1337 --bin ./target/release/train -- --epochs 10

  # through an ssh hop (controller address as seen from the hop), re-dial forever
  fdlenv join --ssh join@gateway:2222 --identity ~/.ssh/farm_ed25519 \\
      --source git+https://git.example/me/model#main --libtorch auto --persist

  # everything baked into fdl.yml's join: block (golden image), the token in a root-only
  # file that systemd hands over (LoadCredential=fdlenv-token:/etc/fdlenv/token)
  fdlenv join

  # the token from a file, never on argv
  fdlenv join ctrl.lan:1337 --token-file ~/.config/flodl/token --bin ./train

  # one JSON object per attempt on stdout, for a supervisor that reads it
  fdlenv join ctrl.lan:1337 --bin ./train --persist --json

exit codes: the agent's own code (one-shot; killed by a signal -> 1),
            1 transient (retrying may help: a controller, mirror or token file not there yet),
            2 permanent (config, bad input, no GPU, an agent that cannot be executed),
            130 stopped by SIGTERM or SIGINT at any moment (once or --persist; a running
            agent's process group gets the signal, and join still exits 130);
            every class: docs/FAILURES.md.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "join", help="prepare this box and dial a flodl controller as a worker",
        description="Prepare this box (GPU gate, data, source, locked libtorch env, build), "
                    "then run the training binary as a flodl agent dialing the controller. "
                    "Arguments after `--` are the binary's own.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("controller", nargs="?", metavar="CONTROLLER",
                   help="controller host[:port] ([v6]:port); under --ssh as seen from the hop "
                        "(default 127.0.0.1:1337)")
    p.add_argument("--token", metavar="T", help="pre-shared session token (readable by every "
                   "user through `ps`: prefer --token-file)")
    p.add_argument("--token-file", metavar="FILE",
                   help="read the token from FILE (one line; one trailing newline dropped). "
                        "Without --token/--token-file: fdlenv.token_file in fdl.yml, then "
                        "$CREDENTIALS_DIRECTORY/fdlenv-token (systemd LoadCredential=), "
                        "then join.token")
    p.add_argument("--json", action="store_true",
                   help="one JSON object per attempt on stdout (the agent's own output goes to stderr)")
    add_join_flags(p)
    add_dial_flags(p)
    p.set_defaults(func=run)


def real_prepare(settings: JoinSettings, fork: bool = False) -> Prepared:
    """Preparation through fdlenv.app.prepare (imported lazily: the heavy part)."""
    from ...app import prepare as mod
    from pathlib import Path

    from ...names.home import Home

    return mod.prepare(mod.request_from_settings(settings), Home(Path(settings.home)), fork=fork)


def run(args: Args) -> int:
    import functools

    from ...config.load import load_project
    from ...app.joinsettings import check_given_bin, resolve
    from ...config.token import read_chosen_file
    from ...join.loop import run_join
    from ...base.progress import say

    settings = resolve(join_flags(args), load_project())
    if settings.controller_defaulted:
        say(f"no controller named: dialing the default, {settings.controller_host}:"
            f"{settings.controller_port} (this box); name one as `fdlenv join HOST[:PORT]`, "
            "through a hop with --ssh, or in fdl.yml as `join: {controller: HOST:PORT}`")
    # The token file is read by the first attempt (a file not there yet: transient, re-dialed)
    checked = check_given_bin(settings)   # before --json takes stdout over: its failure is told there
    deps: Injected = {"settle": read_chosen_file}
    if args.json:   # `report` only under --json (a stand-in run_join may take no such argument)
        deps["report"] = json_lines()
    return run_join(checked, functools.partial(real_prepare, fork=owns_process(args)), **deps)


def json_lines() -> Callable[[AttemptReport], None]:
    """`--json`: stdout carries only the attempts' objects, one line each, as written; what
    else would reach it (the agent's and its ranks' output, a build's) goes to stderr."""
    import os
    import sys

    from ...base.output import SCHEMA, dumps

    sys.stdout.flush()
    out = os.dup(1)
    os.dup2(2, 1)

    def report(obj: AttemptReport) -> None:
        os.write(out, (dumps({"schema": SCHEMA, **obj}) + "\n").encode())
    return report
