"""NVIDIA through a fake NVML module (pynvml cannot run here): gate, errors, devices.

The fake reuses pynvml's own error classes and codes, so `except nvml.NVMLError`
and the code comparisons are exercised exactly as against the real library.
"""

import types

import pynvml
import pytest

from fdlenv.hw.model import HARDWARE_UNUSABLE, NVIDIA, TOOL_FAILED, UNPARSABLE
from fdlenv.hw.nvidia import probe
from fdlenv.hw.routing import route
from fdlenv.hw.survey import survey

GIB = 1024 ** 3
H200 = {"name": "NVIDIA H200", "cc": (9, 0), "total": 141 * GIB, "uuid": "GPU-1111"}
RTX = {"name": b"NVIDIA GeForce RTX 5090", "cc": (12, 0), "total": 32 * GIB, "uuid": b"GPU-2222"}


def fake_nvml(cards=(H200,), init_error=None, cuda=12080, device_error=None, calls=None):
    """A module-like NVML: `device_error` = (index, code) makes that card's queries fail."""
    calls = [] if calls is None else calls
    m = types.SimpleNamespace(**{k: getattr(pynvml, k) for k in dir(pynvml) if k.startswith(("NVMLError", "NVML_ERROR"))})

    def init():
        calls.append("init")
        if init_error is not None:
            raise pynvml.NVMLError(init_error)

    def handle(i):
        if device_error and device_error[0] == i:
            raise pynvml.NVMLError(device_error[1])
        return cards[i]

    m.nvmlInit = init
    m.nvmlShutdown = lambda: calls.append("shutdown")
    m.nvmlSystemGetDriverVersion = lambda: "570.124.06"
    m.nvmlSystemGetCudaDriverVersion = lambda: cuda
    m.nvmlDeviceGetCount = lambda: len(cards)
    m.nvmlDeviceGetHandleByIndex = handle
    m.nvmlDeviceGetName = lambda h: h["name"]
    m.nvmlDeviceGetCudaComputeCapability = lambda h: h["cc"]
    m.nvmlDeviceGetMemoryInfo = lambda h: types.SimpleNamespace(total=h["total"], free=0, used=0)
    m.nvmlDeviceGetUUID = lambda h: h["uuid"]
    return m


@pytest.fixture
def gated(tmp_path):
    """A dev root whose nvidiactl node opens the gate; proc root empty."""
    dev, proc = tmp_path / "dev", tmp_path / "proc"
    dev.mkdir()
    proc.mkdir()
    (dev / "nvidiactl").touch()
    return dev, proc


def test_devices_driver_and_cuda_version():
    calls = []
    p = probe(nvml=fake_nvml((H200, RTX), calls=calls))
    assert [(d.vendor, d.index, d.name, d.arch, d.vram_mb, d.uuid) for d in p.devices] == [
        (NVIDIA, 0, "NVIDIA H200", "9.0", 141 * 1024, "GPU-1111"),
        (NVIDIA, 1, "NVIDIA GeForce RTX 5090", "12.0", 32 * 1024, "GPU-2222"),
    ]
    assert (p.driver, p.driver_cuda, p.findings) == ("570.124.06", "12.8", ())
    assert calls == ["init", "shutdown"]


def gated_survey(dev, proc, nvml):
    return survey(dev.parent / "sys", dev.parent / "rocm", {}, dev_root=dev, proc_root=proc, nvml=nvml)


def test_the_gate_opens_on_nvidiactl_or_proc_driver_nvidia(gated):
    dev, proc = gated
    assert len(gated_survey(dev, proc, fake_nvml()).devices) == 1
    (dev / "nvidiactl").unlink()
    (proc / "driver" / "nvidia").mkdir(parents=True)
    assert len(gated_survey(dev, proc, fake_nvml()).devices) == 1


def test_a_closed_gate_never_touches_nvml(tmp_path):
    calls = []
    s = gated_survey(tmp_path / "dev", tmp_path / "proc", fake_nvml(calls=calls))
    assert (s.devices, s.findings, calls) == ((), (), [])


@pytest.mark.parametrize("code,kind,words", [
    (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, HARDWARE_UNUSABLE, "libnvidia-ml"),
    (pynvml.NVML_ERROR_DRIVER_NOT_LOADED, HARDWARE_UNUSABLE, "not loaded"),
    (pynvml.NVML_ERROR_NO_PERMISSION, HARDWARE_UNUSABLE, "permission"),
    (pynvml.NVML_ERROR_LIB_RM_VERSION_MISMATCH, HARDWARE_UNUSABLE, "mismatch"),
    (pynvml.NVML_ERROR_UNKNOWN, TOOL_FAILED, "NVML init failed"),
    (pynvml.NVML_ERROR_TIMEOUT, TOOL_FAILED, "NVML init failed"),
])
def test_an_init_error_is_a_finding_and_zero_devices(code, kind, words):
    p = probe(nvml=fake_nvml(init_error=code))
    assert p.devices == ()
    assert [f.kind for f in p.findings] == [kind] and words in p.findings[0].message


def test_library_not_found_is_zero_gpus_and_routes_to_cpu(gated):
    s = gated_survey(*gated, fake_nvml(init_error=pynvml.NVML_ERROR_LIBRARY_NOT_FOUND))
    r = route(s)
    assert s.devices == () and r.variant == "cpu" and "libnvidia-ml" in r.reason


@pytest.mark.parametrize("code,kind", [(pynvml.NVML_ERROR_GPU_IS_LOST, HARDWARE_UNUSABLE),
                                       (pynvml.NVML_ERROR_UNKNOWN, TOOL_FAILED)])
def test_a_failing_card_is_dropped_with_a_finding(code, kind):
    p = probe(nvml=fake_nvml((H200, RTX), device_error=(0, code)))
    assert [d.index for d in p.devices] == [1]
    assert [f.kind for f in p.findings] == [kind] and "nvidia 0" in p.findings[0].message


def test_an_impossible_compute_capability_is_unparsable():
    p = probe(nvml=fake_nvml(({**H200, "cc": (0, 0)},)))
    assert p.devices == () and [f.kind for f in p.findings] == [UNPARSABLE]


def test_a_driver_version_failure_keeps_the_devices():
    m = fake_nvml()
    m.nvmlSystemGetCudaDriverVersion = lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_NOT_SUPPORTED))
    p = probe(nvml=m)
    assert len(p.devices) == 1 and p.driver_cuda is None and p.findings[0].kind == TOOL_FAILED


def test_a_failing_shutdown_does_not_lose_the_answer():
    m = fake_nvml()
    m.nvmlShutdown = lambda: (_ for _ in ()).throw(pynvml.NVMLError(pynvml.NVML_ERROR_UNINITIALIZED))
    assert len(probe(nvml=m).devices) == 1


@pytest.mark.parametrize("cuda,variant", [(12080, "cu128"), (12090, "cu128"), (12060, None), (13000, "cu128")])
def test_the_driver_gate_through_the_survey(gated, cuda, variant):
    s = gated_survey(*gated, fake_nvml((RTX,), cuda=cuda))
    assert route(s).variant == variant
    assert s.driver_json()["cuda"] == f"{cuda // 1000}.{cuda % 1000 // 10}"

