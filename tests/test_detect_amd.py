"""AMD through fake KFD sysfs trees: node parsing, gfx decoding, the usability gate."""

import subprocess
import sys
import types

import pytest

from fdlenv.hw.amd import Identity, gfx_name, probe, rw_allowed
from fdlenv.hw.model import AMD, HARDWARE_UNUSABLE, UNPARSABLE
from fdlenv.hw.routing import route
from fdlenv.hw.survey import survey

ROOT = Identity(0, 0, frozenset())
MIB = 1024 * 1024

CPU_NODE = {"cpu_cores_count": 64, "simd_count": 0, "vendor_id": 0, "gfx_target_version": 0}


def gpu_node(target, vram_mb=16384, unique_id=0, **extra):
    return {"cpu_cores_count": 0, "simd_count": 256, "simd_arrays_per_engine": 1, "vendor_id": 4098,
            "gfx_target_version": target, "unique_id": unique_id, "_banks": [vram_mb, 0], **extra}


class Box:
    """A fake host: sys/, dev/, proc/ and an opt/rocm that may hold a runtime."""

    def __init__(self, root):
        self.root = root
        self.sys, self.dev, self.rocm = root / "sys", root / "dev", root / "opt" / "rocm"
        self.dev.mkdir(parents=True)
        (root / "proc").mkdir()
        self.nodes = self.sys / "class" / "kfd" / "kfd" / "topology" / "nodes"

    def node(self, n, props):
        d = self.nodes / str(n)
        for b, size in enumerate(props.get("_banks", [])):
            bank = d / "mem_banks" / str(b)
            bank.mkdir(parents=True)
            (bank / "properties").write_text(f"heap_type 1\nsize_in_bytes {size * MIB}\nwidth 2048\n")
        d.mkdir(parents=True, exist_ok=True)
        (d / "properties").write_text("".join(f"{k} {v}\n" for k, v in props.items() if not k.startswith("_")))
        return self

    def kfd(self, mode=0o666):
        (self.dev / "kfd").touch()
        (self.dev / "kfd").chmod(mode)
        return self

    def runtime(self, version="7.1.0-38", lib="lib", at=None):
        root = at or self.rocm
        (root / lib).mkdir(parents=True, exist_ok=True)
        (root / lib / "libhsa-runtime64.so.1").touch()
        (root / ".info").mkdir(exist_ok=True)
        (root / ".info" / "version").write_text(version + "\n")
        return self

    def pci(self, slot, vendor, cls):
        d = self.sys / "bus" / "pci" / "devices" / slot
        d.mkdir(parents=True)
        (d / "vendor").write_text(vendor + "\n")
        (d / "class").write_text(cls + "\n")
        return self

    def probe(self, environ=None, who=ROOT, smi=None):
        return probe(self.sys, self.dev, self.rocm, environ or {}, who, smi or broken_smi())

    def survey(self, environ=None):
        return survey(self.sys, self.rocm, environ or {}, dev_root=self.dev, proc_root=self.root / "proc",
                      who=ROOT, smi=broken_smi())


def broken_smi():
    """amdsmi as it behaves without libamd_smi.so: every call raises."""
    def boom(*a):
        raise KeyError("libamd_smi.so")
    return types.SimpleNamespace(amdsmi_init=boom, amdsmi_shut_down=boom)


@pytest.fixture
def box(tmp_path):
    return Box(tmp_path)


@pytest.mark.parametrize("version,gfx", [(90010, "gfx90a"), (100306, "gfx1036"), (110000, "gfx1100"),
                                         (90402, "gfx942"), (120001, "gfx1201"), (90008, "gfx908"),
                                         (110501, "gfx1151")])
def test_gfx_decoding_uses_a_hex_stepping(version, gfx):
    assert gfx_name(version) == gfx


def test_a_usable_gpu_beside_the_cpu_node(box):
    box.node(0, CPU_NODE).node(1, gpu_node(90010, vram_mb=65520, unique_id=0xABCDEF)).kfd().runtime()
    p = box.probe()
    assert [(d.vendor, d.index, d.name, d.arch, d.vram_mb, d.uuid) for d in p.devices] == [
        (AMD, 0, "AMD GPU gfx90a", "gfx90a", 65520, "GPU-0000000000abcdef")]
    assert p.findings == () and p.host_rocm == "7.1.0"


def test_nodes_are_ordered_numerically_and_nvidia_kfd_nodes_are_ignored(box):
    box.node(0, CPU_NODE).node(2, gpu_node(110000)).node(10, gpu_node(90402)).node(3, gpu_node(90000, vendor_id=4318))
    box.node(1, gpu_node(120001)).kfd().runtime()
    assert [(d.index, d.arch) for d in box.probe().devices] == [(0, "gfx1201"), (1, "gfx1100"), (2, "gfx942")]


def test_keys_match_as_whole_words(box):
    # simd_count absent, only a longer key containing it: not a GPU.
    box.node(1, {"vendor_id": 4098, "simd_count_per_cu": 4, "gfx_target_version": 90010}).kfd().runtime()
    p = box.probe()
    assert p.devices == () and p.findings == ()


def test_a_gpu_node_without_a_target_is_unparsable(box):
    box.node(1, gpu_node(0)).node(2, gpu_node(110000)).kfd().runtime()
    p = box.probe()
    assert [d.arch for d in p.devices] == ["gfx1100"]
    assert [f.kind for f in p.findings] == [UNPARSABLE] and "node 1" in p.findings[0].message


def test_missing_dev_kfd_is_hardware_unusable(box):
    box.node(1, gpu_node(90010)).runtime()
    p = box.probe()
    assert p.devices == () and p.findings[0].kind == HARDWARE_UNUSABLE and "--device=/dev/kfd" in p.findings[0].message


def test_no_rocm_runtime_is_hardware_unusable(box):
    box.node(1, gpu_node(90010)).kfd()
    p = box.probe()
    assert p.devices == () and "no ROCm runtime" in p.findings[0].message and p.host_rocm is None


def test_an_env_rocm_root_comes_before_the_default(box, tmp_path):
    box.node(1, gpu_node(90010)).kfd().runtime("7.0.2")
    box.runtime("7.1.1", lib="lib64", at=tmp_path / "rocm-7.1")
    assert box.probe().host_rocm == "7.0.2"
    assert box.probe({"ROCM_PATH": str(tmp_path / "rocm-7.1")}).host_rocm == "7.1.1"
    assert box.probe({"HIP_PATH": str(tmp_path / "nothing-here")}).host_rocm == "7.0.2"


def test_an_unreadable_kfd_says_which_groups(box):
    box.node(1, gpu_node(90010)).kfd(0o660).runtime()
    owner = (box.dev / "kfd").stat()
    stranger = Identity(owner.st_uid + 4242, owner.st_gid + 4242, frozenset())
    p = box.probe(who=stranger)
    assert p.devices == () and "render and video" in p.findings[0].message
    member = Identity(owner.st_uid + 4242, owner.st_gid + 4242, frozenset({owner.st_gid}))
    assert len(box.probe(who=member).devices) == 1


@pytest.mark.parametrize("mode,owner,group,who,ok", [
    (0o000, 5, 5, Identity(0, 0, frozenset()), True),            # root bypass
    (0o600, 5, 6, Identity(5, 9, frozenset()), True),            # owner bits
    (0o060, 5, 6, Identity(5, 6, frozenset()), False),           # owner bits win even if the group could
    (0o660, 5, 6, Identity(7, 8, frozenset({6})), True),         # supplementary group
    (0o640, 5, 6, Identity(7, 6, frozenset()), False),           # group read only
    (0o606, 5, 6, Identity(7, 8, frozenset()), True),            # other bits
    (0o660, 5, 6, Identity(7, 8, frozenset({9})), False),
])
def test_permission_math(mode, owner, group, who, ok):
    assert rw_allowed(mode, owner, group, who) is ok


def test_a_pci_amd_display_without_kfd_gives_the_hint(box):
    box.pci("0000:03:00.0", "0x10de", "0x030000").pci("0000:0c:00.0", "0x1002", "0x030000")
    p = box.probe()
    assert p.devices == () and "load the amdgpu driver" in p.findings[0].message


def test_an_amd_non_display_pci_device_is_no_hint(box):
    box.pci("0000:00:14.0", "0x1002", "0x0c0500")
    assert box.probe().findings == ()


def test_amdsmi_renames_by_kfd_node(box):
    box.node(0, CPU_NODE).node(1, gpu_node(90010)).node(2, gpu_node(110000)).kfd().runtime()
    smi = types.SimpleNamespace(
        amdsmi_init=lambda: None, amdsmi_shut_down=lambda: None,
        amdsmi_get_processor_handles=lambda: ["h2", "h1"],
        amdsmi_get_gpu_kfd_info=lambda h: {"node_id": int(h[1]), "kfd_id": 1},
        amdsmi_get_gpu_asic_info=lambda h: {"market_name": {"h1": "AMD Instinct MI210", "h2": "N/A"}[h]})
    assert [d.name for d in box.probe(smi=smi).devices] == ["AMD Instinct MI210", "AMD GPU gfx1100"]


def test_the_real_amdsmi_import_leaves_stdout_clean(box):
    """Without libamd_smi.so the import prints to stdout and raises KeyError; neither may escape."""
    box.node(1, gpu_node(90010)).kfd().runtime()
    code = ("import sys; from pathlib import Path; from fdlenv.hw.amd import Identity, probe; "
            f"p = probe(Path({str(box.sys)!r}), Path({str(box.dev)!r}), Path({str(box.rocm)!r}), {{}}, "
            "Identity(0, 0, frozenset())); "
            "sys.stderr.write(repr([d.name for d in p.devices]) + repr('amdsmi' in sys.modules))")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    assert r.stdout == "" and r.stderr == "['AMD GPU gfx90a']False"


def test_the_survey_routes_by_host_rocm(box):
    box.node(0, CPU_NODE).node(1, gpu_node(90010)).kfd().runtime("7.1.0")
    assert route(box.survey()).variant == "rocm7.1"


def test_the_survey_applies_amd_masks(box):
    box.node(1, gpu_node(90010)).node(2, gpu_node(110000)).kfd().runtime("7.0.0")
    s = box.survey({"ROCR_VISIBLE_DEVICES": "1"})
    assert [d.arch for d in s.devices] == ["gfx1100"] and s.findings[0].kind == "mask_applied"
    r = route(box.survey({"HIP_VISIBLE_DEVICES": "-1"}))
    assert r.variant == "cpu" and "HIP_VISIBLE_DEVICES" in r.reason



def test_the_pci_hint_reaches_the_survey_and_the_reason(box):
    box.pci("0000:0c:00.0", "0x1002", "0x038000")
    r = route(box.survey())
    assert r.variant == "cpu" and "load the amdgpu driver" in r.reason


def test_a_mixed_box_through_nvml_and_kfd(box):
    import pynvml
    card = {"cc": (8, 9)}
    nvml = types.SimpleNamespace(
        NVMLError=pynvml.NVMLError, nvmlInit=lambda: None, nvmlShutdown=lambda: None,
        nvmlSystemGetDriverVersion=lambda: "575.51.03", nvmlSystemGetCudaDriverVersion=lambda: 12090,
        nvmlDeviceGetCount=lambda: 1, nvmlDeviceGetHandleByIndex=lambda i: card,
        nvmlDeviceGetName=lambda h: "NVIDIA L4", nvmlDeviceGetCudaComputeCapability=lambda h: h["cc"],
        nvmlDeviceGetMemoryInfo=lambda h: types.SimpleNamespace(total=23034 * MIB),
        nvmlDeviceGetUUID=lambda h: "GPU-9999")
    (box.dev / "nvidiactl").touch()
    box.node(0, CPU_NODE).node(1, gpu_node(110501)).kfd().runtime("7.1.0")
    s = survey(box.sys, box.rocm, {}, dev_root=box.dev, proc_root=box.root / "proc", nvml=nvml, who=ROOT,
               smi=broken_smi())
    assert [(d.vendor, d.index, d.arch) for d in s.devices] == [("nvidia", 0, "8.9"), (AMD, 0, "gfx1151")]
    assert s.driver_json() == {"nvidia": "575.51.03", "cuda": "12.9", "rocm": "7.1.0"}
    r = route(s)
    assert r.variant == "cu128" and "--libtorch rocm7.1" in r.reason
    hidden = route(survey(box.sys, box.rocm, {"CUDA_VISIBLE_DEVICES": "-1", "HIP_VISIBLE_DEVICES": "0"},
                          dev_root=box.dev, proc_root=box.root / "proc", nvml=nvml, who=ROOT, smi=broken_smi()))
    assert hidden.variant == "rocm7.1"
