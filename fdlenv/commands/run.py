"""`fdlenv run -- CMD`: exec CMD inside a variant's activated env (no shell, exit code passes through)."""

from __future__ import annotations

import argparse
import os

from ..errors import Fail

EPILOG = """examples:
  fdlenv run --libtorch cpu -- ./target/release/agent --epochs 3
  fdlenv run --libtorch cu128 --lock conda-lock.yml -- cargo build --release
"""


def add_parser(sub) -> None:
    from ..flags import home_option, store_options

    p = sub.add_parser("run", help="run a command inside a variant's activated env",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    store_options(p, variant_required=False)
    home_option(p)
    p.set_defaults(func=cmd_run)


def cmd_run(args) -> int:
    from ..store.activation import child_environ
    from ..flags import realise_from_args

    if not args.tail:
        raise Fail.permanent("run: no command; usage: fdlenv run [--libtorch V] -- CMD [ARGS...]")
    from ..store import leases

    st, env = realise_from_args(args)
    environ = child_environ(st.home, env)
    leases.take(env.path)   # inherited through exec: env gc leaves the env while the command runs
    try:
        os.execvpe(args.tail[0], args.tail, environ)
    except FileNotFoundError:
        raise Fail.permanent(f"run: command not found: {args.tail[0]!r} (searched the env's PATH)") from None
    except PermissionError:
        raise Fail.permanent(f"run: not executable: {args.tail[0]!r}") from None
