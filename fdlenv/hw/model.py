"""The survey's data: devices, typed findings, and the whole Survey.

Immutable typed records (`base.record.Record`: a tuple at run time, since
dataclasses and typing cost more to import than `detect`'s budget on a GPU-less box) so routing
can be table-tested without hardware and the `--json` shape is produced in one place
(`as_json`). A device's `index` is its per-vendor ordinal as the vendor runtime numbers it (NVML
index, HIP order of KFD GPU nodes), so a mixed box can carry nvidia 0 and amd 0.
"""

from __future__ import annotations

from ..base.record import Record

# Declared hardware for tests/CI (hw/spoof.py); read before any probe.
SPOOF_VAR = "FLODL_TESTING_GPU_JSON"

NVIDIA = "nvidia"
AMD = "amd"
VENDORS = (NVIDIA, AMD)

# Finding kinds. All but MASK_APPLIED explain why a device is absent.
HARDWARE_UNUSABLE = "hardware_unusable"
TOOL_FAILED = "tool_failed"
UNPARSABLE = "unparsable"
MASK_APPLIED = "mask_applied"


class Device(Record):
    """vendor: nvidia | amd; index: the per-vendor ordinal the runtime gives it, after the
    visibility masks (`masks`: what `--devices` and the agent's `local_devices` count); arch:
    NVIDIA compute capability "8.6", AMD bare target "gfx90a"; uuid: lets a mask's UUID
    entries select the device (None when unknown); physical: the driver's own index when a
    mask applied (nvidia-smi's, rocm-smi's; None when unmasked: `index` is that too)."""

    vendor: str
    index: int   # type: ignore[assignment]  # the field shadows tuple.index, as it always did
    name: str
    arch: str
    vram_mb: int
    uuid: str | None = None
    physical: int | None = None

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"vendor": self.vendor, "index": self.index, "name": self.name,
                                  "arch": self.arch, "vram_mb": self.vram_mb}
        if self.physical is not None:
            out["physical"] = self.physical
        return out

    @property
    def label(self) -> str:
        detail = self.name if self.arch in self.name else f"{self.name}, {self.arch}"
        if self.physical is not None and self.physical != self.index:
            detail += f"; physical {self.physical}"
        return f"{self.vendor} {self.index} ({detail})"


class Finding(Record):
    kind: str
    message: str

    def as_json(self) -> dict[str, object]:
        return {"kind": self.kind, "message": self.message}


class Survey(Record):
    """devices and findings (tuples); nvidia_driver: display only, e.g. "570.124.06";
    driver_cuda: the highest CUDA the driver runs, "12.8"; host_rocm: /opt/rocm/.info/version,
    "7.1.0"; spoofed: from FLODL_TESTING_GPU_JSON."""

    devices: tuple[Device, ...] = ()
    findings: tuple[Finding, ...] = ()
    nvidia_driver: str | None = None
    driver_cuda: str | None = None
    host_rocm: str | None = None
    spoofed: bool = False

    def of(self, vendor: str) -> tuple[Device, ...]:
        return tuple(d for d in self.devices if d.vendor == vendor)

    def driver_json(self) -> dict[str, str | None]:
        return {"nvidia": self.nvidia_driver, "cuda": self.driver_cuda, "rocm": self.host_rocm}
