"""`auto` prefers what the box has: routing's candidates, and a realised one winning, on
hand-built surveys (pure: no hardware, no home; docs/ROUTING.md's table)."""

import pytest

from fdlenv.base.errors import Fail
from fdlenv.hw.model import AMD, NVIDIA, Device, Survey
from fdlenv.hw.routing import variant_or_fail, route
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
    ((amd("gfx803"),), None, None, ("cpu", "cu128", "cu130", "cu126")),   # uncovered: cpu, or a CUDA build on the CPU
    ((nv("8.6"),), "12.8", None, ("cu128", "cu126")),
    ((nv("8.6"),), None, None, ("cu128", "cu130", "cu126")),     # an unknown driver gates nothing
    ((nv("12.0"),), "12.8", None, ("cu128",)),                   # cu126 ships no sm_120 kernel
    ((nv("8.6"),), "12.4", None, ("cu126",)),                    # the driver gate keeps cu128 out
    ((nv("6.1"),), "12.8", None, ("cu126",)),
    ((nv("6.1"), nv("12.0", 1)), "12.8", None, ("cu126",)),      # cu128 would lose the 6.1 card
    ((nv("12.0"),), "12.6", None, ()),                           # nothing runs until the driver moves
    ((nv("8.6"), amd("gfx942")), "12.8", None, ("cu128", "cu126")),   # NVIDIA wins: its variants only
    ((), None, None, ("cpu", "cu128", "cu130", "cu126", "rocm7.1", "rocm7.0")),   # every build runs on the CPU
    ((), "12.4", "7.0.2", ("cpu", "cu126", "rocm7.0")),          # within the same gates
    ((nv("3.7"),), None, None, ("cpu", "rocm7.1", "rocm7.0")),   # a CUDA build would try the Kepler card
]


@pytest.mark.parametrize("devices,cuda,rocm,expected", CANDIDATES)
def test_the_candidates_are_what_routing_says_this_box_can_run(devices, cuda, rocm, expected):
    assert route(box(*devices, cuda=cuda, rocm=rocm)).candidates == expected


def test_a_realised_rocm71_wins_on_an_amd_box_whose_host_rocm_is_unknown_and_says_why():
    r = route(box(amd("gfx942")), frozenset({"rocm7.1"}))
    assert r.variant == "rocm7.1"
    assert r.line() == "auto: rocm7.1 (realised; routing would pick rocm7.0: host ROCm unknown)"
    assert r.routed.variant == "rocm7.0" and "Host ROCm version unknown" in r.routed.reason
    assert variant_or_fail(box(amd("gfx942")), {"rocm7.1"}) == "rocm7.1"


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
        variant_or_fail(s, {"cu126"})
    assert e.value.exit_code == 2 and "update the NVIDIA driver" in e.value.message


def test_the_json_names_the_candidates_the_realised_ones_and_routings_own_choice():
    doc = route(box(amd("gfx942")), {"rocm7.1"}).as_json()
    assert doc["variant"] == "rocm7.1" and doc["candidates"] == ["rocm7.0", "rocm7.1"]
    assert doc["realised"] == ["rocm7.1"] and doc["routing"]["variant"] == "rocm7.0"
    plain = route(box(amd("gfx942"))).as_json()
    assert "routing" not in plain and plain["realised"] == [] and plain["reason"].startswith("A ROCm variant")


def test_a_gpu_less_box_asks_the_home_and_only_a_home_with_nothing_is_not_read_further(tmp_path):
    """A GPU-less box may have a GPU build realised (it wins there), so the home is asked; a home
    that holds no pointer at all is seen with os calls only (`detect` pays no pathlib for it)."""
    import json

    from fdlenv.names.home import Home
    from fdlenv.names.roots import has_pointers

    realised = tmp_path / "realised"
    env = realised / "envs" / f"cu126-{'e' * 16}"
    (env / "libtorch" / "lib").mkdir(parents=True)
    (env / ".fdlenv").mkdir()
    (env / ".fdlenv" / "manifest.json").write_text(json.dumps(   # a realised env's manifest, by hand
        {"variant": "cu126", "key": "e" * 64, "platform": "linux-64", "records": [],
         "lock": {"path": "conda-lock.yml", "sha256": "f" * 64}, "libtorch_root": str(env / "libtorch"),
         "created": "2026-01-01T00:00:00Z"}))
    (realised / "libtorch" / "precompiled").mkdir(parents=True)
    (realised / "libtorch" / "precompiled" / "cu126").symlink_to(env / "libtorch")
    assert auto_route(box(), Home(realised)).variant == "cu126"      # the home was asked: its cu126 won
    assert auto_route(box()).variant == auto_route(box(), Home(tmp_path / "empty")).variant == "cpu"
    assert not has_pointers(str(tmp_path))
    pre = tmp_path / "libtorch" / "precompiled"
    pre.mkdir(parents=True)
    (pre / "cpu").mkdir()                    # flodl's own download: a real directory, no pointer
    assert not has_pointers(str(tmp_path))
    (pre / "cu126").symlink_to(tmp_path)
    assert has_pointers(str(tmp_path))


@pytest.mark.parametrize("devices,cuda,rocm,realised,expected,line", [
    ((), None, None, {"cu128"}, "cu128",
     "auto: cu128 (realised, runs on the CPU; routing would pick cpu: no usable GPU)"),
    ((), None, None, {"rocm7.0", "cu126", "rocm7.1"}, "cu126",     # NVIDIA's, then AMD's, newest first
     "auto: cu126 (realised, runs on the CPU; routing would pick cpu: no usable GPU)"),
    ((), None, None, {"rocm7.0", "rocm7.1"}, "rocm7.1",
     "auto: rocm7.1 (realised, runs on the CPU; routing would pick cpu: no usable GPU)"),
    ((amd("gfx803"),), None, None, {"cu126"}, "cu126",
     "auto: cu126 (realised, runs on the CPU; routing would pick cpu: no ROCm variant covers the AMD cards)"),
])
def test_a_gpu_less_box_uses_a_realised_gpu_build_when_its_cpu_env_is_not_realised(devices, cuda, rocm, realised,
                                                                                   expected, line):
    r = route(box(*devices, cuda=cuda, rocm=rocm), frozenset(realised))
    assert (r.variant, r.routed.variant, r.line()) == (expected, "cpu", line)


def test_a_gpu_less_box_whose_cpu_env_is_realised_uses_it_and_one_with_nothing_realised_locks_cpu():
    assert route(box(), {"cpu", "cu128"}).variant == "cpu"
    assert (route(box()).variant, route(box()).routed) == ("cpu", None)


@pytest.mark.parametrize("devices,cuda,rocm,realised,expected,why", [
    ((nv("8.6"),), "12.4", None, {"cu128"}, "cu126", "cu128: the NVIDIA driver supports CUDA 12.4 (< 12.8)"),
    ((amd("gfx942"),), None, "7.0.2", {"rocm7.1"}, "rocm7.0",
     "rocm7.1: host ROCm 7.0.2 loads ahead of its ROCm 7.1 runtime"),
    ((amd("gfx942"),), None, "6.4.1", {"rocm7.1"}, "rocm7.0", "rocm7.1: host ROCm 6.4.1 is not 7.x"),
    ((nv("12.0"),), "12.8", None, {"cu126"}, "cu128", "cu126: no kernel for nvidia 0 (card 0, 12.0)"),
    ((nv("8.6"), amd("gfx942")), "12.8", None, {"rocm7.1"}, "cu128",
     "rocm7.1: an AMD build, and NVIDIA wins on a mixed box"),
    ((amd("gfx942"),), None, None, {"cu128"}, "rocm7.0", "cu128: an NVIDIA build, and this box's GPUs are AMD"),
    ((nv("8.6"),), "12.8", None, {"cpu"}, "cu128", "cpu: this box's GPUs need a GPU build"),
    ((), "12.4", None, {"cu128"}, "cpu", "cu128: the NVIDIA driver supports CUDA 12.4 (< 12.8)"),
    ((nv("3.7"),), None, None, {"cu126"}, "cpu", "cu126: no kernel for nvidia 0 (card 0, 3.7)"),
])
def test_the_reason_names_a_realised_variant_it_passed_over_and_why(devices, cuda, rocm, realised, expected, why):
    r = route(box(*devices, cuda=cuda, rocm=rocm), frozenset(realised))
    assert r.variant == expected and r.routed is None
    assert r.line().endswith(f" Realised, passed over: {why}.")
    assert r.as_json()["passed_over"] == [{"variant": why.split(":")[0], "why": why.split(": ", 1)[1]}]


def test_a_realised_variant_passed_over_is_named_beside_the_one_that_won():
    r = route(box(nv("8.6"), cuda="12.4"), {"cu126", "cpu"})
    assert r.line() == "auto: cu126: Lowest NVIDIA compute capability is 8.x (>= 7), so cu128. The driver " \
        "supports CUDA 12.4 (< 12.8), so cu126 instead. Realised, passed over: cpu: this box's GPUs need a GPU build."
    won = route(box(amd("gfx942"), rocm="7.2.0"), {"rocm7.1", "cu128"})
    assert won.line() == ("auto: rocm7.1 (realised; routing would pick rocm7.0: host ROCm 7.2.0; passed over: "
                          "cu128: an NVIDIA build, and this box's GPUs are AMD)")
