"""`auto`: from a Survey to one variant and the human reason for it. Pure.

flodl's own routing rules as the floor, in this order:
1. NVIDIA wins when it has a card of compute capability 5 or newer (older
   ones are below every CUDA variant); one build serves one vendor, and on
   mixed boxes the AMD part is usually an APU iGPU.
   Lowest compute-capability major >= 7 -> cu128; a set spanning < 7 and
   >= 10 -> cu126 plus build advice; else cu126.
2. Beyond the reference, the driver gates it: a driver below CUDA 12.8 turns
   cu128 into cu126, or into no variant at all (variant None, the reason says
   what to update) when a card needs cu128; below CUDA 12 nothing CUDA runs.
3. AMD only: a covered gfx target -> the bundle matching the host ROCm
   (7.1.x -> rocm7.1, else rocm7.0: the host ROCm loads ahead of the bundle
   and the ABI only grows within a major, so 7.0 runs on every 7.x host).
4. Otherwise cpu, quoting the findings that explain the absence.
5. What the box has wins: `route(s, realised)` also lists the candidates, the
   variants this box can run by the rules above, routing's first choice first:
   the same vendor only (NVIDIA's CUDA variants on an NVIDIA or mixed box,
   the ROCm bundles on an AMD box), each serving every card the first choice
   serves, within the driver gate (cu130 needs a CUDA 13.0 driver, cu128 a
   CUDA 12.8 one, cu126 a CUDA 12 one, an unknown driver gates nothing), and a ROCm bundle X.Y only
   on a host whose ROCm is unknown (the wheels carry their HIP runtime in
   torch/lib) or 7.Z with Z >= Y. cpu is a candidate only where routing picks
   it. When the first choice is not in `realised` (the variants realised in
   the home, gathered by the caller: `libtorch.auto_route`) and another
   candidate is, that one wins, and the reason says so: `realised; routing
   would pick rocm7.0: host ROCm unknown`. docs/ROUTING.md has the table.
6. Where routing picks cpu, every GPU build runs too (on the CPU), so each is a
   candidate after cpu where it sees no GPU of its vendor (a Kepler card or an
   uncovered gfx target would be tried, and fail) and within the same gates:
   a realised cu128 serves a GPU-less box whose cpu env is not realised, and
   cpu is locked or fetched only when no build is. Among several, the fixed
   order NVIDIA's then AMD's, flodl's own cu128 first, then newest first
   (`_FAMILIES`: cu128, cu130, cu126, rocm7.1, rocm7.0): one answer for one
   set of envs, whatever was used last, and no env's size read on a re-dial.
7. A realised variant that is no candidate is named in the reason with why it
   was passed over (`passed`: the driver, the host ROCm, the arch, the vendor).
"""

from __future__ import annotations

from ..base.errors import Fail
from ..base.record import Record
from .coverage import ARCHS, leading_version, parse_cc, variant_covers
from .model import AMD, NVIDIA, Device, Survey

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

CU128_DRIVER = (12, 8)
CU130_DRIVER = (13, 0)


class Route(Record):
    """variant: None when no variant can run here until the reason's fix is done;
    candidates: the variants this box can run, routing's first choice first (empty when
    variant is None); brief: the first choice's reason in a few words; routed: routing's own
    Route when a realised candidate won over it, else None; realised: the candidates realised;
    passed: the realised variants that cannot run here, each with why (rule 7)."""

    variant: str | None
    reason: str
    candidates: tuple[str, ...] = ()
    brief: str = ""
    routed: Route | None = None
    realised: frozenset[str] = frozenset()
    passed: tuple[tuple[str, str], ...] = ()   # (variant, why): realised, but no candidate here

    def as_json(self) -> dict[str, object]:
        out: dict[str, object] = {"variant": self.variant, "reason": self.reason,
                                  "candidates": list(self.candidates),
                                  "realised": [v for v in self.candidates if v in self.realised]}
        if self.routed is not None:
            out["routing"] = {"variant": self.routed.variant, "reason": self.routed.reason}
        if self.passed:
            out["passed_over"] = [{"variant": v, "why": why} for v, why in self.passed]
        return out

    def line(self) -> str:
        """The one line `detect`, `prepare` and `join` print."""
        if self.routed is not None:
            return f"auto: {self.variant} ({self.reason})"
        return f"auto: {self.variant or 'none'}: {self.reason}"


def _version(text: str | None) -> tuple[int, int] | None:
    return leading_version(text or "")


def _labels(devices: Iterable[Device]) -> str:
    return ", ".join(d.label for d in devices)


def _sentences(*parts: str) -> str:
    return " ".join(p for p in parts if p)


def rocm_for_host(host_rocm: str | None) -> tuple[str, str]:
    """(variant, why) for an AMD box, from the host ROCm version."""
    v = _version(host_rocm)
    if v is None:
        return "rocm7.0", "Host ROCm version unknown, so rocm7.0, the oldest bundle, which runs on every ROCm 7.x host."
    if v == (7, 1):
        return "rocm7.1", f"Host ROCm {host_rocm} matches rocm7.1."
    if v[0] != 7:
        return "rocm7.0", (f"Host ROCm {host_rocm} is not 7.x; the bundles need a ROCm 7 host, so install ROCm 7.0 "
                           "or 7.1 (rocm7.0 chosen, it may fail to load here).")
    return "rocm7.0", f"Host ROCm {host_rocm}, so rocm7.0, the oldest bundle, which runs on every ROCm 7.x host."


# Cards older than every CUDA variant (Kepler) do not steer routing; newer
# majors do (the reference routes them), and the reason says what is uncovered.
def _major(arch: str) -> int:
    """The compute capability's major number; -1 for an arch that is not one."""
    cc = parse_cc(arch)
    return cc[0] if cc else -1


_OLDEST_CUDA_MAJOR = min(_major(t) for v in ("cu126", "cu128") for t in ARCHS[v])


def _cuda_usable(d: Device) -> bool:
    return _major(d.arch) >= _OLDEST_CUDA_MAJOR


def _nvidia(s: Survey, usable: tuple[Device, ...], cards: tuple[Device, ...]) -> Route:
    majors = [_major(d.arch) for d in usable]
    lo, hi = min(majors), max(majors)
    brief = f"lowest NVIDIA compute capability {lo}.x"
    if lo >= 7:
        want, why = "cu128", f"Lowest NVIDIA compute capability is {lo}.x (>= 7), so cu128."
    elif hi >= 10:
        want, why = "cu126", (f"NVIDIA cards span compute capability {lo}.x to {hi}.x and no prebuilt variant covers "
                              "both; cu126 serves the older ones; for all of them build libtorch from source.")
        brief = f"NVIDIA cards span compute capability {lo}.x to {hi}.x"
    else:
        want, why = "cu126", f"Lowest NVIDIA compute capability is {lo}.x (< 7), which only cu126 ships."
    driver = _version(s.driver_cuda)
    if driver is None:
        why += " The driver's CUDA version is unknown, so it was not checked."
    elif driver < (12, 0):
        return Route(None, f"{why} The NVIDIA driver supports CUDA {s.driver_cuda}; every CUDA variant needs a "
                           "CUDA 12 driver: update the NVIDIA driver (R570 or newer runs both cu126 and cu128).")
    elif want == "cu128" and driver < CU128_DRIVER:
        needy = [d for d in usable if not variant_covers("cu126", d)]
        if needy:
            verb = "needs" if len(needy) == 1 else "need"
            return Route(None, f"{_labels(needy)} {verb} cu128, but the NVIDIA driver supports only CUDA "
                               f"{s.driver_cuda} (< 12.8): update the NVIDIA driver to R570 or newer.")
        want, why = "cu126", why + f" The driver supports CUDA {s.driver_cuda} (< 12.8), so cu126 instead."
        brief = f"the NVIDIA driver supports CUDA {s.driver_cuda} (< 12.8)"
    missed = [d for d in cards if not variant_covers(want, d)]
    return Route(want, _sentences(why, f"Not covered by {want}, unusable: {_labels(missed)}." if missed else ""),
                 brief=brief)


def _amd(s: Survey, cards: tuple[Device, ...]) -> Route:
    covered = [d for d in cards if variant_covers("rocm7.0", d)]
    if not covered:
        return Route("cpu", f"No ROCm variant covers {_labels(cards)} (covered targets: "
                            f"{' '.join(ARCHS['rocm7.0'])}), so cpu.", brief="no ROCm variant covers the AMD cards")
    want, why = rocm_for_host(s.host_rocm)
    missed = [d for d in cards if d not in covered]
    return Route(want, _sentences(f"A ROCm variant covers {_labels(covered)};", why,
                                  f"Not covered by {want}, unusable: {_labels(missed)}." if missed else ""),
                 brief=f"host ROCm {s.host_rocm}" if s.host_rocm else "host ROCm unknown")


def _routed(s: Survey) -> Route:
    """Rules 1-4 of the module's docstring: routing's first choice, without candidates."""
    nv, am = s.of(NVIDIA), s.of(AMD)
    usable = tuple(d for d in nv if _cuda_usable(d))
    if usable:
        r = _nvidia(s, usable, nv)
        if am:
            other, _ = rocm_for_host(s.host_rocm)
            mixed = (f"Mixed box: one libtorch build serves one vendor and NVIDIA wins; for {_labels(am)} "
                     f"use --libtorch {other}.")
            r = r._replace(reason=_sentences(r.reason, mixed))
        return r
    nocuda = f"No CUDA variant covers {_labels(nv)}." if nv else ""
    if am:
        r = _amd(s, am)
        return r._replace(reason=_sentences(nocuda, r.reason))
    if nv:
        return Route("cpu", _sentences(nocuda, "Nothing else to use, so cpu."), brief="no CUDA variant covers the cards")
    quiet = "FLODL_TESTING_GPU_JSON declares none" if s.spoofed else "no NVIDIA driver, no AMD GPU in the KFD topology"
    why = "; ".join(f.message for f in s.findings) or quiet
    return Route("cpu", f"No usable GPU ({why}), so cpu.", brief="no usable GPU")


# Each vendor's variants, newest first: the order in which alternatives follow the first choice.
# cu130 is never routing's first choice (flodl's is cu128): a candidate where it runs and serves
# every card cu128 does (sm_75 and newer), chosen when realised or asked for by name.
_FAMILIES = {NVIDIA: ("cu128", "cu130", "cu126"), AMD: ("rocm7.1", "rocm7.0")}
_FLOOR = {"cu130": CU130_DRIVER, "cu128": CU128_DRIVER, "cu126": (12, 0)}   # the driver gate, per CUDA variant


def _gate(s: Survey, variant: str) -> str:
    """Rule 5's gates, the driver for CUDA and the host ROCm for a ROCm bundle: why `variant`
    cannot run here ("" when it can)."""
    if variant in _FLOOR:
        driver = _version(s.driver_cuda)
        floor = _FLOOR[variant]
        if driver is None or driver >= floor:
            return ""
        return f"the NVIDIA driver supports CUDA {s.driver_cuda} (< {floor[0]}.{floor[1]})"
    host = _version(s.host_rocm)
    want = _version(variant.removeprefix("rocm"))
    if host is None or (want is not None and host[0] == want[0] and host[1] >= want[1]):
        return ""
    if want is not None and host[0] == want[0]:
        return f"host ROCm {s.host_rocm} loads ahead of its ROCm {want[0]}.{want[1]} runtime"
    return f"host ROCm {s.host_rocm} is not {want[0] if want else 7}.x"


def _runs_here(s: Survey, variant: str) -> bool:
    return not _gate(s, variant)


def _vendor_of(variant: str) -> str | None:
    return next((v for v, family in _FAMILIES.items() if variant in family), None)


def candidates(s: Survey, first: Route) -> tuple[str, ...]:
    """Rules 5 and 6: the variants this box can run, `first`'s variant first (see the docstring)."""
    pick = first.variant
    if pick is None:
        return ()
    if pick == "cpu":   # rule 6: a GPU build runs on the CPU where it sees no GPU of its vendor
        return (pick, *(v for vendor, family in _FAMILIES.items() if not s.of(vendor)
                        for v in family if _runs_here(s, v)))
    vendor = _vendor_of(pick)
    if vendor is None:
        return (pick,)
    served = [d for d in s.of(vendor) if variant_covers(pick, d)]
    return (pick, *(v for v in _FAMILIES[vendor] if v != pick and _runs_here(s, v)
                    and all(variant_covers(v, d) for d in served)))


_NAMES = {NVIDIA: "NVIDIA", AMD: "AMD"}


def passed_over(s: Survey, first: Route, variant: str) -> str:
    """Rule 7: why `variant`, realised but no candidate, does not serve this box as `auto`."""
    vendor = _vendor_of(variant)
    if vendor is None:
        return "this box's GPUs need a GPU build" if variant == "cpu" else \
            f"routing does not pick {variant}; name it (--libtorch {variant}) to use it"
    mine = s.of(vendor)
    pick = _vendor_of(first.variant or "")
    if not mine and pick is not None and pick != vendor:
        return f"an {_NAMES[vendor]} build, and this box's GPUs are {_NAMES[pick]}"
    uncovered = [d for d in mine if not variant_covers(variant, d)]
    if uncovered:
        return f"no kernel for {_labels(uncovered)}"
    if (why := _gate(s, variant)):
        return why
    if pick is not None and pick != vendor:
        return f"an {_NAMES[vendor]} build, and {_NAMES[pick]} wins on a mixed box"
    return f"does not serve every card {first.variant} serves"


def route(s: Survey, realised: frozenset[str] | set[str] = frozenset()) -> Route:
    """auto's choice on `s`: routing's first choice, unless only another candidate is in
    `realised` (the variants realised in the home); `.candidates` lists them all, `.passed`
    the realised ones that cannot run here, and why (rule 7)."""
    first = _routed(s)
    cands = candidates(s, first)
    passed = tuple((v, passed_over(s, first, v)) for v in sorted(realised) if v not in cands)
    told = "; ".join(f"{v}: {why}" for v, why in passed)
    first = first._replace(candidates=cands, realised=frozenset(v for v in cands if v in realised), passed=passed)
    won = None if not cands or cands[0] in realised else next((v for v in cands[1:] if v in realised), None)
    if won is None:
        return first._replace(reason=_sentences(first.reason, f"Realised, passed over: {told}." if told else ""))
    on_cpu = ", runs on the CPU" if first.variant == "cpu" else ""
    return first._replace(variant=won, reason=f"realised{on_cpu}; routing would pick {first.variant}: {first.brief}"
                                              + (f"; passed over: {told}" if told else ""), routed=first)


def variant_or_fail(s: Survey, realised: frozenset[str] | set[str] = frozenset()) -> str:
    """The variant `auto` resolves to; Fail.permanent when none can run (prepare's path)."""
    r = route(s, realised)
    if r.variant is None:
        raise Fail.permanent(f"--libtorch auto: {r.reason}")
    return r.variant
