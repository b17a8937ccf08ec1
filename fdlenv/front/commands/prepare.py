"""`fdlenv prepare`: join's preparation without the dial, for image baking and checks.

Same flags as join minus the dial (controller, token, persist, probe), the
same fdl.yml `join:` block and precedence. The GPU gate runs only with
`--gpu-gate` (a baking host usually has no GPU); naming neither `--bin` nor
`--source` prepares the dirs and the env only. Notes print as
`fdlenv prepare: <note>`, also before the error when a step fails.
"""

from __future__ import annotations

from ...base.output import emit

import argparse

from ...base.errors import Fail
from ...base.progress import note
from ..options import add_join_flags, join_flags, owns_process

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  # bake a ROCm 7.1 image on a CPU-only builder: realise the env, build the binary
  fdlenv prepare --libtorch rocm7.1 --source git+https://git.example/me/train#v3 --json

  # check a GPU box before enabling the join unit (everything else from fdl.yml's join:)
  fdlenv prepare --gpu-gate

  # only the env and the node-local dirs
  fdlenv prepare --libtorch cu128 --lock conda-lock.yml

--json prints one object on stdout:
  {"variant", "libtorch" (flodl's variant id), "env": {"key", "path", "libtorch_root"}, "bin",
   "cwd", "data_path",
   "args", "run_id", "notes", "auto" (with --libtorch auto: {"variant", "reason", "candidates",
   "realised", "routing"}, else null), "seconds"}
exit codes: 0 prepared, 1 transient (retrying may help), 2 permanent.
"""


def add_parser(sub: Subparsers) -> None:
    p = sub.add_parser(
        "prepare", help="prepare this box like join does, without dialing (image baking)",
        description="Run join's preparation steps in order: GPU gate (with --gpu-gate), dataset "
                    "root, node-local dirs, source fetch, locked libtorch env (+ arch gate), build.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_join_flags(p)
    p.add_argument("--gpu-gate", action="store_true",
                   help="require at least one usable GPU (join always does; off for baking hosts)")
    p.add_argument("--json", action="store_true", help="print Prepared as one JSON object on stdout")
    p.set_defaults(func=run)


def _note(message: str) -> None:
    note("prepare", message)


def run(args: Args) -> int:
    from ...config.load import load_project
    from ...app.joinsettings import check_given_bin, resolve_prepare
    from ...app.prepare import prepare_saying, request_from_settings

    if args.tail is not None:
        raise Fail.permanent("fdlenv prepare takes no arguments after `--` (they are the "
                             "training binary's, given to fdlenv join)")
    settings = check_given_bin(resolve_prepare(join_flags(args), load_project()))
    out = prepare_saying(request_from_settings(settings, gpu_gate=args.gpu_gate), settings.home, _note,
                         fork=owns_process(args))
    if args.json:
        emit(out.to_json())
    else:
        env = f" ({out.env.path})" if out.env else ""
        _note(f"prepared: libtorch {out.variant or 'none'}{env}"
              + (f", bin {out.bin}" if out.bin else "")
              + (f", data {out.data_path}" if out.data_path else "")
              + f" in {out.seconds['total']:.2f} s")
    return 0
