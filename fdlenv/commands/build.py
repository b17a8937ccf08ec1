"""`fdlenv build`: prepare's source step on its own — fetch, realise, content-keyed build.

Order (cheap first): parse the spec (a typo fails before anything moves),
claim the tree, fetch + digest, read the run manifest and check its digest,
realise the variant's env, then build by content key. A re-dial with nothing
changed runs rsync (or `git ls-remote`), stats the tree and finds
`builds/<key>/`: no recipe, no lock, no YAML.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

from ..flags import home_option
from ..home import Home
from ..progress import say

EPILOG = """examples:
  fdlenv build --libtorch cpu --source file:///srv/mnist --source-bin target/release/mnist
  fdlenv build --libtorch cu128 --source git+https://git.example/me/train#v1.2 --json
  fdlenv build --libtorch auto --source rsync://flodl@ctrl:2222:/srv/train \\
      --identity ~/.ssh/flodl --source-cwd app --source-build 'cargo build --release --features "$FDL_GPU_FEATURE"'

  The recipe runs with `sh -c` in <tree>/<cwd>, inside the variant's env
  (LIBTORCH_PATH, FDL_GPU_FEATURE, LD_LIBRARY_PATH set). A run manifest
  (.fdl-run.yml) in the tree wins over --source-cwd/-build/-bin, field by field.
  Exit codes: 0 ok, 1 transient (retrying may help), 2 permanent.
"""


def add_parser(sub) -> None:
    p = sub.add_parser(
        "build", help="fetch a training source and build it in a variant's env (content-keyed)",
        description="Fetch --source into ~/.flodl/source/<spec-hash>/, realise the --libtorch env and "
                    "build the artifact once per (tree digest, env, recipe, cwd, bin) into "
                    "~/.flodl/builds/<key>/; an unchanged re-dial reuses it without running the recipe.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--libtorch", required=True, metavar="VARIANT",
                   help="auto, cpu, cu126, cu128, rocm7.0, rocm7.1")
    p.add_argument("--lock", metavar="FILE",
                   help="conda-lock file (default: fdl.yml's fdlenv.lock, else conda-lock.yml beside fdl.yml, "
                        "at the tree's root, or shipped with fdlenv)")
    p.add_argument("--mirror", action="append", metavar="NAME=URL", help="map a channel or wheel index (pypi, pytorch) to a mirror")
    p.add_argument("--source", required=True, metavar="SPEC",
                   help="file:///abs, rsync://[user@]host[:port]:/abs, git+https|ssh|file://…#<ref>")
    p.add_argument("--source-cwd", metavar="DIR", help="project dir inside the tree (default: its root)")
    p.add_argument("--source-build", metavar="CMD", help="build recipe, a shell line (default: cargo build --release)")
    p.add_argument("--source-bin", metavar="PATH", help="the built artifact, relative to the project dir")
    p.add_argument("--identity", metavar="FILE", help="ssh key for an rsync:// source (ssh -i)")
    p.add_argument("--ssh-option", metavar="KEY=VALUE", action="append", default=[],
                   help="ssh -o option for an rsync:// source (repeatable; BatchMode stays yes)")
    p.add_argument("--json", action="store_true",
                   help='one object on stdout: {"bin", "cwd", "build_key", "built", "run_id", "args", "seconds"}')
    home_option(p)
    p.set_defaults(func=run)


def _environment(home: Home, variant: str, lock: Path, mirrors: dict, fork: bool):
    """The realised env and its complete child environment (the store, imported here)."""
    from ..store.activation import child_environ
    from ..store.realise import realise

    env = realise(home, variant, lock, mirrors, fork=fork)
    return env, child_environ(home, env)


def run(args: argparse.Namespace) -> int:
    from ..source import build, digest, fetch, manifest
    from ..source.spec import parse
    from ..flags import owns_process, settings_of, variant_of

    t0 = time.monotonic()
    st = settings_of(args)
    home = st.home
    spec = parse(args.source)
    variant = variant_of(args.libtorch, home)
    seconds = {}
    with fetch.claimed(home, spec):
        got = fetch.fetch(home, spec, fetch.SshOpts(args.identity, tuple(args.ssh_option)))
        say(got.note)
        m = manifest.read(got.tree, got.state)
        got.state.save()
        if m is not None:
            say(manifest.summary(m))
            if m.digest is not None:
                digest.verify(got.tree, m.digest.sha256, got.scan)
        recipe = build.resolve(m, args.source_cwd, args.source_build, args.source_bin)
        seconds["fetch"] = time.monotonic() - t0
        env, environ = _environment(home, variant, st.lock(got.tree), st.mirrors, owns_process(args))
        seconds["env"] = time.monotonic() - t0 - seconds["fetch"]
        built = build.build(home, got.tree, got.digest.content, env, environ, recipe)
    seconds["build"] = time.monotonic() - t0 - seconds["fetch"] - seconds["env"]
    seconds["total"] = time.monotonic() - t0
    run_args = args.tail if args.tail is not None else (list(m.args) if m else None)
    if args.json:
        print(json.dumps({"bin": str(built.bin), "cwd": str(built.cwd), "build_key": built.key,
                          "built": built.built, "run_id": m.run if m else None, "args": run_args,
                          "seconds": {k: round(v, 4) for k, v in seconds.items()}}))
    else:
        say(f"{'built' if built.built else 'reused'} {built.bin} (run in {built.cwd})")
    return 0
