"""NVIDIA devices through NVML (pynvml, from nvidia-ml-py).

Order matters for cost: survey imports this module only past
`gates.nvidia_driver` (`/dev/nvidiactl` or `/proc/driver/nvidia`), so a box
without the driver neither imports pynvml nor loads a library. Every NVML
error becomes a finding, never an exception: NVMLError_LibraryNotFound means "no usable
driver here" (0 GPUs, explained), not a failure of fdlenv. A device whose
query fails is dropped with a finding, not silently.
"""

from __future__ import annotations

from ..base.record import Record
from .model import HARDWARE_UNUSABLE, NVIDIA, TOOL_FAILED, UNPARSABLE, Device, Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # pynvml has no stubs: the module, or a test's stand-in for it, is taken as it comes.
    Nvml = Any

MIB = 1024 * 1024


class NvidiaProbe(Record):
    """driver: e.g. "570.124.06"; driver_cuda: e.g. "12.8". A `Record` (a tuple at run
    time): dataclasses would cost detect more to import than NVML's probe."""

    devices: tuple[Device, ...] = ()
    findings: tuple[Finding, ...] = ()
    driver: str | None = None
    driver_cuda: str | None = None


def _text(value: object) -> str:
    return value.decode(errors="replace") if isinstance(value, bytes) else str(value)


def _cuda_version(code: int) -> str:
    """NVML's 12080 -> "12.8"."""
    return f"{code // 1000}.{code % 1000 // 10}"


def _init_failure(nvml: Nvml, err: BaseException) -> Finding:
    value = getattr(err, "value", None)
    if value == nvml.NVML_ERROR_LIBRARY_NOT_FOUND:
        return Finding(HARDWARE_UNUSABLE, "NVIDIA driver nodes exist but libnvidia-ml.so.1 cannot be loaded "
                                          "(in a container, run it with the NVIDIA runtime: --gpus all)")
    if value == nvml.NVML_ERROR_DRIVER_NOT_LOADED:
        return Finding(HARDWARE_UNUSABLE, "the NVIDIA kernel driver is not loaded (nvidia-smi should say the same)")
    if value == nvml.NVML_ERROR_NO_PERMISSION:
        return Finding(HARDWARE_UNUSABLE, "no permission to open the NVIDIA devices (/dev/nvidia*)")
    if value == nvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH:
        return Finding(HARDWARE_UNUSABLE, "NVIDIA driver/library version mismatch (a driver update without a reboot?)")
    return Finding(TOOL_FAILED, f"NVML init failed: {err}")


def _device(nvml: Nvml, i: int) -> Device:
    h = nvml.nvmlDeviceGetHandleByIndex(i)
    major, minor = nvml.nvmlDeviceGetCudaComputeCapability(h)
    vram = nvml.nvmlDeviceGetMemoryInfo(h).total // MIB
    return Device(NVIDIA, i, _text(nvml.nvmlDeviceGetName(h)), f"{major}.{minor}", int(vram),
                  _text(nvml.nvmlDeviceGetUUID(h)))


def probe(nvml: Nvml | None = None) -> NvidiaProbe:
    """NVML's view of this box; `nvml` is injectable (a module-like object) for tests."""
    if nvml is None:
        try:
            import pynvml
        except ImportError:
            return NvidiaProbe(findings=(Finding(HARDWARE_UNUSABLE, "NVIDIA driver present but pynvml "
                                                                    "(nvidia-ml-py) is not installed"),))
        nvml = pynvml
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as e:
        return NvidiaProbe(findings=(_init_failure(nvml, e),))
    try:
        return _query(nvml)
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError:
            pass  # the answers are in hand; a failed shutdown changes none of them


def _query(nvml: Nvml) -> NvidiaProbe:
    findings: list[Finding] = []
    driver: str | None = None
    cuda: str | None = None
    try:
        driver = _text(nvml.nvmlSystemGetDriverVersion())
        cuda = _cuda_version(int(nvml.nvmlSystemGetCudaDriverVersion()))
    except nvml.NVMLError as e:
        findings.append(Finding(TOOL_FAILED, f"NVML could not read the driver version: {e}"))
    try:
        count = nvml.nvmlDeviceGetCount()
    except nvml.NVMLError as e:
        return NvidiaProbe(findings=tuple(findings) + (Finding(TOOL_FAILED, f"NVML device count failed: {e}"),),
                           driver=driver, driver_cuda=cuda)
    devices: list[Device] = []
    for i in range(count):
        try:
            d = _device(nvml, i)
        except nvml.NVMLError as e:
            kind = HARDWARE_UNUSABLE if getattr(e, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST else TOOL_FAILED
            findings.append(Finding(kind, f"nvidia {i}: NVML query failed: {e}"))
            continue
        if d.arch.startswith("0."):
            findings.append(Finding(UNPARSABLE, f"nvidia {i}: NVML reported compute capability {d.arch}"))
            continue
        devices.append(d)
    return NvidiaProbe(tuple(devices), tuple(findings), driver, cuda)
