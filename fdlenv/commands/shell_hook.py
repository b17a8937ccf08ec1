"""`fdlenv shell-hook`: the same activation map `run` uses, for shells and IDEs.

`eval "$(fdlenv shell-hook --libtorch cu128)"` in bash; `--json` gives the
variables that differ from the current environment as one object.
"""

from __future__ import annotations

import argparse
import json
import os
import shlex

EPILOG = """examples:
  eval "$(fdlenv shell-hook --libtorch cu128)"
  fdlenv shell-hook --libtorch cpu --json
"""


def add_parser(sub) -> None:
    from ..flags import home_option, store_options

    p = sub.add_parser("shell-hook", help="print the activation of a variant's env for a shell",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    store_options(p, variant_required=False)
    p.add_argument("--json", action="store_true", help="print {variant, key, path, env: {VAR: value}, unset: [...]}")
    home_option(p)
    p.set_defaults(func=cmd_shell_hook)


def cmd_shell_hook(args) -> int:
    from ..store.activation import child_environ
    from ..flags import realise_from_args

    st, env = realise_from_args(args)
    base = dict(os.environ)
    full = child_environ(st.home, env, base)
    changed = {k: v for k, v in sorted(full.items()) if base.get(k) != v}
    unset = sorted(k for k in base if k not in full)
    if args.json:
        print(json.dumps({"variant": env.variant, "key": env.key, "path": str(env.path),
                          "env": changed, "unset": unset}))
    else:
        for k in unset:
            print(f"unset {k}")
        for k, v in changed.items():
            print(f"export {k}={shlex.quote(v)}")
    return 0
