"""Visibility masks and the FLODL_TESTING_GPU_JSON spoof, through survey()."""

import json

import pytest

from fdlenv.base.errors import Fail
from fdlenv.hw.masks import apply, mask_var
from fdlenv.hw.model import AMD, MASK_APPLIED, NVIDIA, Device, SPOOF_VAR as VAR
from fdlenv.hw.routing import route
from fdlenv.hw.survey import survey

MIXED = [
    {"vendor": "nvidia", "arch": "8.6", "vram_mb": 24576, "name": "RTX 3090", "uuid": "GPU-aaaa1111-0000"},
    {"vendor": "nvidia", "arch": "sm_89", "vram_mb": 24564, "name": "RTX 4090", "uuid": "GPU-bbbb2222-0000"},
    {"vendor": "amd", "arch": "gfx90a", "vram_mb": 65520, "name": "MI210"},
    {"vendor": "amd", "arch": "gfx1100", "vram_mb": 24560, "name": "RX 7900 XTX"},
]


def spoofed(devices=MIXED, **env):
    return survey(environ={VAR: json.dumps(devices), **env}, sysfs_root="/nonexistent",
                  dev_root="/nonexistent", proc_root="/nonexistent")


def keys(s):
    return [(d.vendor, d.index) for d in s.devices]


def test_the_spoof_gives_per_vendor_ordinals_and_canonical_archs():
    s = spoofed()
    assert keys(s) == [(NVIDIA, 0), (NVIDIA, 1), (AMD, 0), (AMD, 1)]
    assert [d.arch for d in s.devices] == ["8.6", "8.9", "gfx90a", "gfx1100"]
    assert s.spoofed and s.findings == ()


def test_the_envelope_carries_driver_and_host_rocm():
    s = survey(environ={VAR: json.dumps({"devices": MIXED[2:], "driver_cuda": "12.4", "host_rocm": "7.1.0"})})
    assert (s.driver_cuda, s.host_rocm, len(s.devices)) == ("12.4", "7.1.0", 2)
    assert route(s).variant == "rocm7.1"


def test_a_blank_spoof_is_ignored():
    s = survey(environ={VAR: "  "}, sysfs_root="/nonexistent", dev_root="/nonexistent", proc_root="/nonexistent")
    assert not s.spoofed and s.devices == ()


@pytest.mark.parametrize("value", [
    "not json", '{"devices": 3}', '[{"vendor": "intel", "arch": "8.6"}]', '[{"vendor": "nvidia"}]',
    '[{"vendor": "nvidia", "arch": "gfx90a"}]', '[{"vendor": "amd", "arch": "8.6"}]',
    '[{"vendor": "nvidia", "arch": "8.6", "vram_mb": "big"}]', '[{"vendor": "nvidia", "arch": "8.6", "colour": 1}]',
    '{"devices": [], "driver_cuda": "twelve"}', '{"devices": [], "gpus": []}', '[3]', '"8.6"',
])
def test_a_malformed_spoof_is_permanent_and_names_the_forms(value):
    with pytest.raises(Fail) as e:
        survey(environ={VAR: value})
    assert not e.value.transient
    assert VAR in e.value.message and '"driver_cuda"' in e.value.message and '"vendor"' in e.value.message


def physical(s):
    return [(d.vendor, d.index, d.physical) for d in s.devices]


def test_cuda_mask_hides_nvidia_only_when_hip_is_set():
    s = spoofed(CUDA_VISIBLE_DEVICES="1", HIP_VISIBLE_DEVICES="0,1")
    assert physical(s) == [(NVIDIA, 0, 1), (AMD, 0, 0), (AMD, 1, 1)]
    assert [f.kind for f in s.findings] == [MASK_APPLIED]
    assert "nvidia 0" in s.findings[0].message


def test_amd_falls_back_to_cuda_visible_devices():
    assert keys(spoofed(CUDA_VISIBLE_DEVICES="0")) == [(NVIDIA, 0), (AMD, 0)]


def test_hip_picks_among_what_rocr_left_by_rocrs_ordinals_and_an_empty_hip_means_none():
    """ROCm's two layers: ROCR_VISIBLE_DEVICES=1,0 leaves the RX 7900 as ordinal 0 and the MI210
    as 1; HIP_VISIBLE_DEVICES=1 then picks the MI210, the runtime's device 0."""
    s = spoofed(HIP_VISIBLE_DEVICES="1", ROCR_VISIBLE_DEVICES="1,0")
    assert physical(s)[2:] == [(AMD, 0, 0)] and s.of(AMD)[0].name == "MI210"
    assert ("HIP_VISIBLE_DEVICES='1' hides amd 0 (RX 7900 XTX, gfx1100; physical 1); the devices left are numbered "
            "from 0 in its order") in [f.message for f in s.findings]
    assert physical(spoofed(ROCR_VISIBLE_DEVICES="1"))[2:] == [(AMD, 0, 1)]
    # HIP's index counts what ROCr left: 1 names nothing when ROCr left one device
    assert spoofed(HIP_VISIBLE_DEVICES="1", ROCR_VISIBLE_DEVICES="0").of(AMD) == ()
    s = spoofed(HIP_VISIBLE_DEVICES="", ROCR_VISIBLE_DEVICES="0,1")
    assert s.of(AMD) == () and any("hides all 2 amd" in f.message for f in s.findings)


@pytest.mark.parametrize("value", ["", "-1", " -1 "])
def test_a_mask_hiding_all_nvidia_routes_to_the_amd_cards(value):
    s = spoofed(CUDA_VISIBLE_DEVICES=value, HIP_VISIBLE_DEVICES="0")
    assert keys(s) == [(AMD, 0)]
    r = route(s)
    assert r.variant == "rocm7.0" and "NVIDIA" not in r.reason


def test_masks_hiding_everything_route_to_cpu_and_say_why():
    s = spoofed(CUDA_VISIBLE_DEVICES="-1")
    assert s.devices == ()
    r = route(s)
    assert r.variant == "cpu" and "CUDA_VISIBLE_DEVICES" in r.reason


def test_mask_order_is_kept_and_the_runtime_numbers_it_from_0_the_physical_index_kept_beside():
    s = spoofed(CUDA_VISIBLE_DEVICES="1,0", HIP_VISIBLE_DEVICES="")
    assert physical(s) == [(NVIDIA, 0, 1), (NVIDIA, 1, 0)]
    assert [d.name for d in s.devices] == ["RTX 4090", "RTX 3090"]
    assert s.devices[0].label == "nvidia 0 (RTX 4090, 8.9; physical 1)"
    assert s.devices[0].as_json()["physical"] == 1 and "physical" not in spoofed().devices[0].as_json()
    assert spoofed(CUDA_VISIBLE_DEVICES="1", HIP_VISIBLE_DEVICES="").findings[0].message == (
        "CUDA_VISIBLE_DEVICES='1' hides nvidia 0 (RTX 3090, 8.6); the devices left are numbered from 0 in its order")


def test_uuid_entries_select_by_full_or_prefix():
    assert physical(spoofed(CUDA_VISIBLE_DEVICES="GPU-bbbb2222-0000", HIP_VISIBLE_DEVICES="")) == [(NVIDIA, 0, 1)]
    assert physical(spoofed(CUDA_VISIBLE_DEVICES="GPU-aaaa,1", HIP_VISIBLE_DEVICES="")) == [(NVIDIA, 0, 0),
                                                                                         (NVIDIA, 1, 1)]


def test_an_unknown_uuid_stops_the_list_with_a_finding():
    s = spoofed(CUDA_VISIBLE_DEVICES="0,MIG-1234,1", HIP_VISIBLE_DEVICES="")
    assert s.of(NVIDIA) == (s.devices[0],) and s.devices[0].index == 0
    msgs = [f.message for f in s.findings]
    assert any("'MIG-1234' names no nvidia device" in m for m in msgs)
    assert any("hides nvidia 1" in m for m in msgs)


def test_an_out_of_range_index_is_noted():
    s = spoofed(CUDA_VISIBLE_DEVICES="5", HIP_VISIBLE_DEVICES="")
    assert s.of(NVIDIA) == () and any("'5' names no nvidia device" in f.message for f in s.findings)


def test_an_ambiguous_uuid_prefix_selects_nothing():
    cards = (Device(NVIDIA, 0, "a", "8.6", 1, "GPU-ab01"), Device(NVIDIA, 1, "b", "8.6", 1, "GPU-ab02"))
    kept, notes = apply(cards, {"CUDA_VISIBLE_DEVICES": "GPU-ab"})
    assert kept == () and "ambiguous" in notes[0].message


def test_no_mask_no_finding_and_a_mask_with_no_devices_of_its_vendor_says_nothing():
    assert spoofed().findings == ()
    only_amd = spoofed(MIXED[2:], CUDA_VISIBLE_DEVICES="-1", HIP_VISIBLE_DEVICES="0,1")
    assert only_amd.findings == () and len(only_amd.devices) == 2


def test_mask_var_precedence():
    env = {"ROCR_VISIBLE_DEVICES": "0", "CUDA_VISIBLE_DEVICES": "1"}
    assert mask_var(AMD, env) == "ROCR_VISIBLE_DEVICES"
    assert mask_var(NVIDIA, env) == "CUDA_VISIBLE_DEVICES"
    assert mask_var(NVIDIA, {"HIP_VISIBLE_DEVICES": "0"}) is None
