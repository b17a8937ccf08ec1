"""`fdlenv build`: prepare's source steps on their own — fetch, realise, content-keyed build.

The same functions as `fdlenv prepare` and `fdlenv join` (fdlenv.app.prepare with
`build_only`), the same flags with the same meaning (`--ssh`/`--identity`
name the hop and its key, which an rsync:// source uses), the same fdl.yml
`join:` block: parse the spec (a typo fails before anything moves), claim
the tree, fetch + digest, read the run manifest and check its digest,
realise the variant's env, then build by content key. A re-dial with nothing
changed stats the tree and the toolchain and finds `builds/<key>/`: no
recipe, no lock, no YAML.
"""

from __future__ import annotations

from ...base.output import emit

import argparse

from ..options import add_source_flags, join_flags, owns_process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv build --libtorch cpu --source file:///srv/mnist --source-bin target/release/mnist
  fdlenv build --libtorch cu128 --source git+https://git.example/me/train#v1.2 --json
  fdlenv build --libtorch auto --source rsync://flodl@ctrl:2222:/srv/train \\
      --ssh flodl@ctrl:2222 --identity ~/.ssh/flodl --source-cwd app \\
      --source-build 'cargo build --release --features "$FDL_GPU_FEATURE"'

  The recipe runs with `sh -c` in <tree>/<cwd>, inside the variant's env
  (LIBTORCH_PATH, FDL_GPU_FEATURE, LD_LIBRARY_PATH set), in its own process
  group that ends with fdlenv. A run manifest (.fdl-run.yml) in the tree wins
  over --source-cwd/-build/-bin, field by field. The build key covers what the
  source delivered (a git checkout's tracked files), the env and the compilers
  on the env's PATH. Exit codes: 0 ok, 1 transient (retrying may help), 2 permanent.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "build", help="fetch a training source and build it in a variant's env (content-keyed)",
        description="Fetch --source into ~/.flodl/source/<spec-hash>/, realise the --libtorch env and "
                    "build the artifact once per (source content, env, toolchain, recipe, cwd, bin) into "
                    "~/.flodl/builds/<key>/; an unchanged re-dial reuses it without running the recipe.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_source_flags(p)
    p.add_argument("--json", action="store_true",
                   help='one object on stdout: {"bin", "cwd", "build_key", "built", "run_id", "args", "seconds"}')
    p.set_defaults(func=run)


def run(args: Args) -> int:
    from ...config.load import load_project
    from ...app.joinsettings import resolve_prepare
    from ...base.errors import Fail
    from ...app.prepare import prepare_saying, request_from_settings
    from ...base.progress import say

    settings = resolve_prepare(join_flags(args)._replace(tail=None), load_project())
    if settings.source is None:
        raise Fail.permanent("--source: nothing to build; give --source SPEC (or a join.source block)")
    req = request_from_settings(settings, gpu_gate=False)._replace(build_only=True)
    out = prepare_saying(req, settings.home, say, fork=owns_process(args))
    run_args = args.tail if args.tail is not None else out.args
    if args.json:
        emit({"bin": out.bin, "cwd": out.cwd, "build_key": out.build_key, "built": out.built,
                          "run_id": out.run_id, "args": run_args,
                          "seconds": {k: round(v, 4) for k, v in out.seconds.items()}})
    else:
        print(f"{'built' if out.built else 'reused'} {out.bin} (run in {out.cwd})")
    return 0
