"""auto routing and arch coverage, table-tested on hand-built surveys (no hardware)."""

import pytest

from fdlenv.base.errors import Fail
from fdlenv.hw.coverage import ARCHS, covers, parse_cc, parse_gfx, variant_covers
from fdlenv.hw.model import AMD, NVIDIA, Device, Finding, Survey
from fdlenv.hw.routing import variant_or_fail, route


def nv(arch, i=0):
    return Device(NVIDIA, i, f"card {i}", arch, 1024)


def amd(arch, i=0):
    return Device(AMD, i, f"AMD GPU {arch}", arch, 1024)


def box(*devices, cuda=None, rocm=None, findings=()):
    return Survey(tuple(devices), tuple(findings), None, cuda, rocm)


# --- the reference's routing tests (anchor-libtorch-source §7, download.rs) ---

def test_no_gpu_routes_to_cpu():
    assert route(box()).variant == "cpu"


@pytest.mark.parametrize("gfx", ["gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1151", "gfx1201"])
def test_a_covered_amd_gpu_routes_to_rocm(gfx):
    assert route(box(amd(gfx))).variant == "rocm7.0"


@pytest.mark.parametrize("gfx", ["gfx900", "gfx906"])
def test_a_perf_db_only_target_is_not_covered(gfx):
    r = route(box(amd(gfx)))
    assert r.variant == "cpu"
    assert gfx in r.reason


@pytest.mark.parametrize("host", [None, "7.0.2", "6.4.1", "7.2.0"])
def test_auto_picks_the_newer_rocm_bundle_only_for_a_7_1_host(host):
    assert route(box(amd("gfx942"), rocm=host)).variant == "rocm7.0"


def test_an_uncovered_amd_gpu_routes_to_cpu():
    r = route(box(amd("gfx803")))
    assert r.variant == "cpu"
    assert "gfx1201" in r.reason  # names the covered targets


def test_a_partly_covered_amd_set_still_routes_to_rocm():
    r = route(box(amd("gfx1100", 0), amd("gfx1036", 1)))
    assert r.variant == "rocm7.0"
    assert "amd 1" in r.reason and "unusable" in r.reason


def test_a_mixed_vendor_box_routes_to_cuda():
    r = route(box(nv("12.0"), amd("gfx1100")))
    assert r.variant == "cu128"
    assert "NVIDIA wins" in r.reason and "--libtorch rocm7.0" in r.reason


def test_rocm_covered_selects_only_supported_amd_devices():
    cards = [amd("gfx90a", 0), amd("gfx906", 1), amd("gfx1151", 2)]
    assert [d.index for d in cards if variant_covers("rocm7.0", d)] == [0, 2]


def test_nvidia_routing_is_unchanged():
    assert route(box(nv("12.0"))).variant == "cu128"
    assert route(box(nv("6.1"))).variant == "cu126"


# --- beyond the reference ---

ROUTES = [
    # devices, driver CUDA, host ROCm, expected variant
    ((nv("8.6"),), "12.8", None, "cu128"),
    ((nv("8.6"),), "12.9", None, "cu128"),
    ((nv("8.6"),), "12.4", None, "cu126"),      # driver gate, nothing needs cu128
    ((nv("12.0"),), "12.6", None, None),        # driver gate, the card needs cu128
    ((nv("12.0"),), "12.8", None, "cu128"),
    ((nv("8.6"),), "11.8", None, None),         # no CUDA 12 driver: nothing runs
    ((nv("6.1"), nv("8.9", 1)), "12.8", None, "cu126"),
    ((nv("6.1"), nv("12.0", 1)), "12.8", None, "cu126"),   # span: cu126 plus advice
    ((nv("3.7"),), "12.8", None, "cpu"),        # Kepler: below every CUDA variant
    ((nv("3.7"), amd("gfx90a")), "12.8", "7.1.0", "rocm7.1"),
    ((amd("gfx90a"),), None, "7.1.0", "rocm7.1"),
    ((amd("gfx90a"),), None, "7.1.1-54", "rocm7.1"),
    ((amd("gfx90a"),), None, "7.0.2", "rocm7.0"),
    ((amd("gfx90a"), nv("9.0")), "12.4", "7.1.0", "cu126"),
]


@pytest.mark.parametrize("devices,cuda,rocm,expected", ROUTES)
def test_route_table(devices, cuda, rocm, expected):
    r = route(box(*devices, cuda=cuda, rocm=rocm))
    assert r.variant == expected
    assert r.reason


def test_the_span_case_advises_a_source_build():
    assert "build libtorch from source" in route(box(nv("6.1"), nv("12.0", 1))).reason


def test_the_driver_gate_says_what_to_update():
    r = route(box(nv("12.0"), cuda="12.6"))
    assert r.variant is None
    assert "12.6" in r.reason and "update the NVIDIA driver" in r.reason
    with pytest.raises(Fail) as e:
        variant_or_fail(box(nv("12.0"), cuda="12.6"))
    assert not e.value.transient and "update the NVIDIA driver" in e.value.message


def test_the_driver_gate_falls_back_to_cu126_and_says_so():
    r = route(box(nv("9.0"), cuda="12.4"))
    assert (r.variant, "12.4" in r.reason) == ("cu126", True)
    assert variant_or_fail(box(nv("9.0"), cuda="12.4")) == "cu126"


def test_an_unknown_driver_is_not_gated_but_said():
    r = route(box(nv("12.0")))
    assert r.variant == "cu128" and "unknown" in r.reason


def test_a_host_rocm_off_major_7_gets_advice():
    r = route(box(amd("gfx942"), rocm="6.2.4"))
    assert r.variant == "rocm7.0" and "install ROCm 7" in r.reason


def test_no_devices_quotes_the_findings():
    f = Finding("hardware_unusable", "/dev/kfd is missing")
    r = route(box(findings=[f]))
    assert r.variant == "cpu" and "/dev/kfd is missing" in r.reason


# --- coverage ---

@pytest.mark.parametrize("token,cc", [
    ("8.6", (8, 6)), ("sm_86", (8, 6)), ("sm86", (8, 6)), ("sm_120", (12, 0)), ("12.0+PTX", (12, 0)),
    ("sm_90+ptx", (9, 0)), ("cpu", None), ("86", None), ("sm_8", None), ("", None),
])
def test_parse_cc(token, cc):
    assert parse_cc(token) == cc


@pytest.mark.parametrize("token,gfx", [("gfx90a", "gfx90a"), ("GFX1100", "gfx1100"),
                                       ("gfx90a:xnack-", "gfx90a"), ("gfx", None), ("9.0", None)])
def test_parse_gfx(token, gfx):
    assert parse_gfx(token) == gfx


@pytest.mark.parametrize("archs,device,expected", [
    ("8.0;8.6", nv("8.9"), True),            # same major, minor ignored
    ("7.5 9.0", nv("8.6"), False),
    ("7.5", nv("5.0"), False),               # no substring match: "5" is inside "7.5"
    ("sm_120", nv("12.0"), True),
    ("12.0+PTX", nv("12.0"), True),
    ("sm_90,sm_100", nv("10.0"), True),
    ("cpu", nv("8.6"), False),
    ("gfx90a", amd("gfx90a"), True),
    ("gfx90a", amd("gfx908"), False),
    ("gfx1100;gfx1101", amd("gfx110"), False),   # exact, not a prefix
    (["gfx942", "8.6"], amd("gfx942"), True),
    (["8.6"], amd("gfx942"), False),
])
def test_covers(archs, device, expected):
    assert covers(archs, device) is expected


def test_the_variant_tables_follow_the_reference():
    assert ARCHS["rocm7.0"] == ARCHS["rocm7.1"]
    assert "gfx900" not in ARCHS["rocm7.0"] and "gfx906" not in ARCHS["rocm7.0"]
    assert variant_covers("cu128", nv("12.0")) and not variant_covers("cu126", nv("12.0"))
    assert variant_covers("cu126", nv("5.2")) and not variant_covers("cu128", nv("6.1"))
    assert not variant_covers("cpu", nv("8.6"))
