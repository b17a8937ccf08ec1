"""`fdlenv detect`: the GPU survey and what `--libtorch auto` would choose, and why.

Exit 0 even when no variant can run (that verdict is data, in `auto`);
only a malformed FLODL_TESTING_GPU_JSON fails (exit 2). Human text goes to
stderr, `--json` prints exactly one object on stdout.

`auto` is the choice `join`/`prepare --libtorch auto` make on this box with
this home: the variants the box can run (`auto.candidates`), and among them
one already realised in the home (`auto.realised`) wins over routing's first
choice (`auto.routing`, present only then); on a box where routing picks cpu, a realised
GPU build wins over an unrealised cpu (it runs on the CPU), and a realised variant this box
cannot run is named in the reason with why (`auto.passed_over`). A home holding no pointer
is seen with os calls only (`names.roots.has_pointers`).
"""

from __future__ import annotations

from ...names import variants
from ...base.output import emit

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers
    from ...hw.model import Survey
    from ...hw.routing import Route
    from ...names.home import Home


EPILOG = """examples:
  fdlenv detect
  fdlenv detect --json | jq -r .auto.variant
  fdlenv detect --home /opt/flodl      # what auto picks with the envs baked into that home
  FLODL_TESTING_GPU_JSON='[{"vendor": "nvidia", "arch": "8.6", "vram_mb": 24576, "name": "RTX 3090"}]' fdlenv detect
  CUDA_VISIBLE_DEVICES=1 fdlenv detect --json
"""


def add_parser(sub: Subparsers) -> None:
    import argparse

    from ..options import add_shape

    p = sub.add_parser(
        "detect", help="list this box's GPUs and the variant `auto` picks",
        description="Survey the GPUs (NVML for NVIDIA, KFD sysfs for AMD), apply the visibility masks "
                    "(CUDA_VISIBLE_DEVICES, HIP_VISIBLE_DEVICES, ROCR_VISIBLE_DEVICES) and say which "
                    "libtorch variant `auto` chooses, with the reason.",
        epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape(p, ("detect",), json='one object on stdout: {"devices", "findings", "driver", "auto": {"variant", '
                                   '"reason", "candidates", "realised", "routing" (when a realised variant won), '
                                   '"passed_over" (realised, cannot run here)}}')
    p.set_defaults(func=run)


def run(args: Args) -> int:
    from ...hw.survey import survey
    from ...app.libtorch import auto_route

    s = survey()
    r = auto_route(s, _home(getattr(args, "home", None)))
    if args.json:
        emit({"devices": [d.as_json() for d in s.devices],
                          "findings": [f.as_json() for f in s.findings],
                          "driver": s.driver_json(), "auto": r.as_json()})
        return 0
    for line in report(s, r):
        print(line)
    return 0


def _home(given: str | None) -> Home | None:
    """The home `auto_route` reads realised variants from (`settings.resolve`); None when,
    with no fdl.yml above to move it, the home holds no pointer at all (os only: a GPU-less box
    with an empty home pays no pathlib for it)."""
    import os

    from ...names.roots import has_pointers, home_root, project_above

    if not project_above(os.getcwd()) and not has_pointers(home_root(given, os.environ)):
        return None
    from ...app.settings import resolve

    return resolve(given).home


def report(s: Survey, r: Route) -> list[str]:
    """The human table: devices (by the index `--devices` counts; the driver's own beside it
    where a mask renumbered one), findings, driver, choice."""
    lines = ["devices" + (" (from FLODL_TESTING_GPU_JSON)" if s.spoofed else "") + ":"]
    rows = [("vendor", "index", "arch", "vram", "name")] + [
        (d.vendor, str(d.index), d.arch, f"{d.vram_mb} MiB",
         d.name + (f" (physical {d.physical})" if d.physical not in (None, d.index) else "")) for d in s.devices]
    widths = [max(len(row[i]) for row in rows) for i in range(4)]
    if s.devices:
        lines += ["  " + "  ".join(c.ljust(w) for c, w in zip(row[:4], widths, strict=True)) + "  " + row[4] for row in rows]
    else:
        lines.append("  (none)")
    lines += [f"finding [{f.kind}]: {f.message}" for f in s.findings]
    lines.append(f"driver: nvidia {s.nvidia_driver or '-'}, CUDA {s.driver_cuda or '-'}; "
                 f"host ROCm {s.host_rocm or '-'}")
    lines.append(r.line())
    if r.routed is not None:
        lines.append(f"  routing: {r.routed.variant}: {r.routed.reason}")
    if len(r.candidates) > 1:
        lines.append(f"  runnable here: {', '.join(r.candidates)}; realised in the home: "
                     f"{', '.join(v for v in r.candidates if v in r.realised) or 'none'}")
    import os   # on any box: an image baked here may hold a cu126/cu128 env

    from ...source.nvcc import cmake_toolkit_note, host_nvcc
    found = host_nvcc(dict(os.environ))
    lines.append("host CUDA toolkit: " + (f"{found[0]} (CUDA {found[1] or 'unknown'})" if found else "none")
                 + "; cu126/cu128 envs carry their own CUDA_HOME for cargo builds, cu130 envs a whole CUDA 13 toolkit")
    cuda = variants.VARIANTS[r.variant].cuda if r.variant in variants.VARIANTS else None
    if r.variant != "cu130" and (note := cmake_toolkit_note(cuda or "12", dict(os.environ))):   # cu130: its own nvcc
        lines.append(f"note: {note}")
    return lines

