"""One survey of this box: spoof or probes, then the visibility masks.

Order: the spoof (`FLODL_TESTING_GPU_JSON`) is read before any probe, so a
spoofed run touches no hardware; otherwise NVIDIA then AMD, each behind its
cheap filesystem gate (`gates`), and a vendor's module (with its library)
is imported only when its gate opens: a box with no GPU stats a few paths
and spawns nothing. Masks apply last, to spoofed and real devices alike.
Every root is a parameter so tests build fake trees; None means the real one.
The host ROCm version is read only when the AMD gate opens (routing needs it
only for AMD cards).
"""

from __future__ import annotations

import os
from collections.abc import Mapping

from . import gates, masks
from .model import SPOOF_VAR, Device, Finding, Survey

TYPE_CHECKING = False
if TYPE_CHECKING:
    from pathlib import Path

    from .amd import Identity, Smi
    from .nvidia import Nvml

DEFAULT_ROCM = "/opt/rocm"


def survey(sysfs_root: str | Path | None = None, rocm_root: str | Path | None = None,
           environ: Mapping[str, str] | None = None, *, dev_root: str | Path | None = None,
           proc_root: str | Path | None = None, nvml: Nvml | None = None, smi: Smi | None = None,
           who: Identity | None = None) -> Survey:
    """The devices a child of this process would see, with the findings that explain any absence.

    `nvml`/`smi` stand in for pynvml/amdsmi and `who` (an `amd.Identity`) for
    this process's identity, in tests. Raises Fail.permanent when the spoof
    variable is malformed.
    """
    env = os.environ if environ is None else environ
    if env.get(SPOOF_VAR, "").strip():
        from . import spoof
        fake = spoof.parse(env[SPOOF_VAR])
        devices, masked = masks.apply(fake.devices, env)
        return Survey(devices, masked, None, fake.driver_cuda, fake.host_rocm, spoofed=True)
    dev, proc, sysfs = dev_root or "/dev", proc_root or "/proc", sysfs_root or "/sys"
    found: tuple[Device, ...] = ()
    notes: tuple[Finding, ...] = ()
    driver = cuda = rocm = None
    if gates.nvidia_driver(dev, proc):
        from . import nvidia
        nv = nvidia.probe(nvml)
        found, notes, driver, cuda = nv.devices, nv.findings, nv.driver, nv.driver_cuda
    if gates.amd_present(sysfs):
        from pathlib import Path

        from . import amd
        am = amd.probe(Path(sysfs), Path(dev), Path(rocm_root or DEFAULT_ROCM), env, who, smi)
        found, notes, rocm = found + am.devices, notes + am.findings, am.host_rocm
    devices, mask_notes = masks.apply(found, env)
    return Survey(devices, notes + mask_notes, driver, cuda, rocm)
