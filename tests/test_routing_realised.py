"""`auto` prefers what the box has: routing's candidates, and a realised one winning, on
hand-built surveys (pure: no hardware, no home; docs/ROUTING.md's table)."""

import pytest

from fdlenv.base.errors import Fail
from fdlenv.hw.model import AMD, NVIDIA, Device, Survey
from fdlenv.hw.routing import choose, route
from fdlenv.app.libtorch import auto_route


def nv(arch, i=0):
    return Device(NVIDIA, i, f"card {i}", arch, 1024)


def amd(arch, i=0):
    return Device(AMD, i, f"AMD GPU {arch}", arch, 1024)


def box(*devices, cuda=None, rocm=None):
    return Survey(tuple(devices), (), None, cuda, rocm)


CANDIDATES = [
    # devices, driver CUDA, host ROCm, runnable variants (routing's first choice first)
    ((amd("gfx942"),), None, None, ("rocm7.0", "rocm7.1")),      # HIP runtime in torch/lib: both run
    ((amd("gfx942"),), None, "7.1.0", ("rocm7.1", "rocm7.0")),   # 7.0 runs on every 7.x host
    ((amd("gfx942"),), None, "7.2.0", ("rocm7.0", "rocm7.1")),
    ((amd("gfx942"),), None, "7.0.2", ("rocm7.0",)),             # a 7.0 host loads ahead of a 7.1 bundle
    ((amd("gfx942"),), None, "6.4.1", ("rocm7.0",)),             # off major 7: only routing's (advised) pick
    ((amd("gfx803"),), None, None, ("cpu",)),                    # uncovered: cpu, as routing says
    ((nv("8.6"),), "12.8", None, ("cu128", "cu126")),
    ((nv("8.6"),), None, None, ("cu128", "cu130", "cu126")),     # an unknown driver gates nothing
    ((nv("12.0"),), "12.8", None, ("cu128",)),                   # cu126 ships no sm_120 kernel
    ((nv("8.6"),), "12.4", None, ("cu126",)),                    # the driver gate keeps cu128 out
    ((nv("6.1"),), "12.8", None, ("cu126",)),
    ((nv("6.1"), nv("12.0", 1)), "12.8", None, ("cu126",)),      # cu128 would lose the 6.1 card
    ((nv("12.0"),), "12.6", None, ()),                           # nothing runs until the driver moves
    ((nv("8.6"), amd("gfx942")), "12.8", None, ("cu128", "cu126")),   # NVIDIA wins: its variants only
    ((), None, None, ("cpu",)),
]


@pytest.mark.parametrize("devices,cuda,rocm,expected", CANDIDATES)
def test_the_candidates_are_what_routing_says_this_box_can_run(devices, cuda, rocm, expected):
    assert route(box(*devices, cuda=cuda, rocm=rocm)).candidates == expected


def test_a_realised_rocm71_wins_on_an_amd_box_whose_host_rocm_is_unknown_and_says_why():
    r = route(box(amd("gfx942")), frozenset({"rocm7.1"}))
    assert r.variant == "rocm7.1"
    assert r.line() == "auto: rocm7.1 (realised; routing would pick rocm7.0: host ROCm unknown)"
    assert r.routed.variant == "rocm7.0" and "Host ROCm version unknown" in r.routed.reason
    assert choose(box(amd("gfx942")), {"rocm7.1"}) == "rocm7.1"


def test_a_realised_cu126_wins_on_a_cu128_box_it_fully_serves():
    r = route(box(nv("8.6"), cuda="12.8"), {"cu126"})
    assert r.line() == "auto: cu126 (realised; routing would pick cu128: lowest NVIDIA compute capability 8.x)"


def test_routings_first_choice_stays_when_it_is_realised_too():
    r = route(box(amd("gfx942")), {"rocm7.0", "rocm7.1"})
    assert (r.variant, r.routed, r.realised) == ("rocm7.0", None, {"rocm7.0", "rocm7.1"})
    assert r.line().startswith("auto: rocm7.0: A ROCm variant covers")


def test_routings_first_choice_is_used_when_nothing_is_realised():
    r = route(box(amd("gfx942"), rocm="7.1.0"))
    assert (r.variant, r.routed) == ("rocm7.1", None)


@pytest.mark.parametrize("devices,cuda,rocm,realised,expected", [
    ((nv("8.6"),), "12.8", None, {"cpu"}, "cu128"),              # a realised cpu never beats a GPU variant
    ((amd("gfx942"),), None, None, {"cpu"}, "rocm7.0"),
    ((nv("12.0"),), "12.8", None, {"cu126"}, "cu128"),           # cu126 cannot serve the card
    ((nv("8.6"),), "12.4", None, {"cu128"}, "cu126"),            # the driver cannot run cu128
    ((amd("gfx942"),), None, "7.0.2", {"rocm7.1"}, "rocm7.0"),   # the host ROCm is older than the bundle
    ((nv("8.6"), amd("gfx942")), "12.8", None, {"rocm7.1"}, "cu128"),   # the other vendor's build
    ((amd("gfx942"),), None, None, {"cu128"}, "rocm7.0"),
    ((amd("gfx803"),), None, None, {"rocm7.1"}, "cpu"),          # no ROCm kernel for the card
])
def test_a_realised_variant_this_box_cannot_run_does_not_win(devices, cuda, rocm, realised, expected):
    r = route(box(*devices, cuda=cuda, rocm=rocm), frozenset(realised))
    assert (r.variant, r.routed) == (expected, None)


def test_a_realised_variant_does_not_rescue_a_box_nothing_runs_on():
    s = box(nv("12.0"), cuda="12.6")
    assert route(s, {"cu126", "cu128"}).variant is None
    with pytest.raises(Fail) as e:
        choose(s, {"cu126"})
    assert e.value.exit_code == 2 and "update the NVIDIA driver" in e.value.message


def test_the_json_names_the_candidates_the_realised_ones_and_routings_own_choice():
    doc = route(box(amd("gfx942")), {"rocm7.1"}).as_json()
    assert doc["variant"] == "rocm7.1" and doc["candidates"] == ["rocm7.0", "rocm7.1"]
    assert doc["realised"] == ["rocm7.1"] and doc["routing"]["variant"] == "rocm7.0"
    plain = route(box(amd("gfx942"))).as_json()
    assert "routing" not in plain and plain["realised"] == [] and plain["reason"].startswith("A ROCm variant")


def test_the_home_is_not_asked_when_only_one_variant_can_run():
    def no_home():
        raise AssertionError("the home was asked")

    assert auto_route(box(), no_home).variant == "cpu"
    assert auto_route(box(nv("12.0"), cuda="12.8"), no_home).variant == "cu128"
    assert auto_route(box(nv("12.0"), cuda="12.6"), no_home).variant is None
