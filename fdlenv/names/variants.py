"""The libtorch variants fdlenv knows, and how their names are spelled.

One table, so that the CLI tokens (`12.8`, `rocm71`), flodl's on-disk names
(`precompiled/rocm71`), the cargo feature and the declared CUDA version can
never disagree between the store, routing and join.
"""

from __future__ import annotations

from ..base.errors import Fail
from ..base.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

# A vendor's cargo feature, as flodl's `FDL_GPU_FEATURE` carries it.
FEATURE = {"nvidia": "cuda", "amd": "rocm", "cpu": ""}


class Variant(Record):
    """One variant:
    name       canonical token, also the lock category: cpu cu126 cu128 cu130 rocm7.0 rocm7.1
    flodl_dir  flodl's precompiled/<dir> name (x86_64; `flodl_name` is this machine's)
    vendor     cpu | nvidia | amd
    cuda       declared CUDA version (the __cuda virtual package), None off NVIDIA
    rocm       ROCm major.minor, None off AMD

    A `Record` (a tuple at run time), like every record on the re-dial path: neither
    `dataclasses` nor `typing` is imported there (see docs/ARCHITECTURE.md)."""

    name: str
    flodl_dir: str
    vendor: str
    cuda: str | None
    rocm: str | None

    @property
    def flodl_name(self) -> str:
        """flodl's directory name for this variant on this machine: `flodl_dir`, except the CPU
        build on aarch64, which flodl names `cpu-aarch64`."""
        if self.vendor == "cpu":
            import os
            if os.uname().machine in ("aarch64", "arm64"):
                return f"{self.flodl_dir}-aarch64"
        return self.flodl_dir

    @property
    def flodl_label(self) -> str:
        """flodl's variant id, as `.active` and the agent spec carry it."""
        return f"precompiled/{self.flodl_name}"

    def how_to_lock(self) -> str:
        """What a user runs to add this variant to a lock (for errors about a missing variant)."""
        return (f"without --frozen any command locks it on demand; or add it to this lock with "
                f"`fdlenv lock --libtorch {self.name}` (beside fdl.yml, or give --out); air-gapped: "
                f"`fdlenv pack libtorch --libtorch {self.name} --from <PyTorch's zip>` (docs/LOCK.md)")

    @property
    def package(self) -> str:
        """The conda package `fdlenv pack` makes for this variant."""
        return f"libtorch-{self.name.replace('.', '')}"


VARIANTS: dict[str, Variant] = {
    v.name: v
    for v in (
        Variant("cpu", "cpu", "cpu", None, None),
        Variant("cu126", "cu126", "nvidia", "12.6", None),
        Variant("cu128", "cu128", "nvidia", "12.8", None),
        Variant("cu130", "cu130", "nvidia", "13.0", None),
        Variant("rocm7.0", "rocm70", "amd", None, "7.0"),
        Variant("rocm7.1", "rocm71", "amd", None, "7.1"),
    )
}

_ALIASES = {
    "12.6": "cu126",
    "12.8": "cu128",
    "13.0": "cu130",
    "rocm70": "rocm7.0",
    "7.0": "rocm7.0",
    "rocm71": "rocm7.1",
    "7.1": "rocm7.1",
}

ACCEPTED = "auto, cpu, cu126 (12.6), cu128 (12.8), cu130 (13.0), rocm7.0 (rocm70, 7.0), rocm7.1 (rocm71, 7.1)"


def parse_token(token: str, *, allow_auto: bool = True) -> str:
    """Canonical variant name for a user token; `auto` passes through when allowed."""
    t = token.strip().lower()
    if t == "auto" and allow_auto:
        return "auto"
    t = _ALIASES.get(t, t)
    if t in VARIANTS:
        return t
    accepted = ACCEPTED if allow_auto else ACCEPTED.replace("auto, ", "")
    raise Fail.permanent(f"--libtorch: unknown variant {token!r}; accepted: {accepted}")


class Libtorch(Record):
    """A `--libtorch` (or `join.libtorch`) token, parsed once (`parse`): the
    canonical variant name (cpu, cu126, cu128, cu130, rocm7.0, rocm7.1), or `auto` (route on this box's
    GPUs). Everything past the front takes this, never the token as written."""
    name: str

    @property
    def auto(self) -> bool:
        return self.name == "auto"


def parse(token: str, *, where: str = "--libtorch", allow_auto: bool = True) -> Libtorch:
    """The one parse of a `--libtorch` token (`parse_token`): what everything past the front
    takes. `where` names the field a bad token is blamed on (`join.libtorch` for fdl.yml's)."""
    try:
        return Libtorch(parse_token(token, allow_auto=allow_auto))
    except Fail as e:
        if where == "--libtorch":
            raise
        raise Fail.permanent(e.message.replace("--libtorch", where, 1)) from None


def get(name: str) -> Variant:
    """The variant's row: a canonical name (what a manifest or a parsed token holds) is looked
    up, anything else parsed as a user's token (one `error:` line when it names none)."""
    row = VARIANTS.get(name)
    return row if row is not None else VARIANTS[parse_token(name, allow_auto=False)]


# A variant is what it says (checked at lock, `lock.closure`, and at realise, `store.wheels`):
# what tells a torch build apart, read from its version's local label, its requirements and,
# when the wheel was read, its member list. PyPI's plain `torch` 2.10.0 for Linux x86_64 is the
# CUDA 12.8 build: no label, `nvidia-*-cu12` requirements pinned at 12.8 (the shipped cu128 lock);
# its 2.11.0 is the CUDA 13.0 build: `cuda-toolkit[cublas,cudart,...]==13.0.2`, and CUDA 13's
# wheels drop the suffix (`nvidia-cublas`, `nvidia-cuda-runtime`) or say `-cu13` (`nvidia-cudnn-cu13`).
_RUNTIME_PINS = ("nvidia-cuda-runtime-cu12", "nvidia-cuda-runtime-cu13", "nvidia-cuda-runtime", "cuda-toolkit")


def _cuda_of(requires: dict[str, str]) -> str | None:
    """major.minor of the CUDA runtime a torch pins (`==12.8.90`), None when it pins none."""
    for name in _RUNTIME_PINS:
        spec = (requires.get(name) or "").strip()
        if spec.startswith("=="):
            parts = spec[2:].strip().split(".")
            if len(parts) >= 2 and parts[0].isdigit() and parts[1].isdigit():
                return f"{parts[0]}.{parts[1]}"
    return None


def _cuda_major_of(names: Iterable[str]) -> str | None:
    """The CUDA major a torch's requirement names say when it pins no runtime: `-cu12` wheels are
    CUDA 12's; `-cu13` ones, `cuda-toolkit` and unsuffixed `nvidia-*` (CUDA 13 dropped the suffix)
    CUDA 13's; None when there are none."""
    names = list(names)
    if any(n.endswith("-cu12") for n in names):
        return "12"
    if any(n.endswith("-cu13") or n == "cuda-toolkit" or n.startswith("nvidia-") for n in names):
        return "13"
    return None


def build_mismatch(variant: str, version: str, requires: dict[str, str],
                   listing: Iterable[object] | None = None) -> str | None:
    """Why torch `version` (its local label: `2.10.0+cu128`), requiring `requires` (normalised
    project name -> specifier, as applies on the target) and shipping `listing` (its members, when
    the wheel was read; None otherwise), is not a `variant` build; None when it is one."""
    v = VARIANTS.get(variant)
    if v is None:
        return None                      # an env file's own variant name: nothing to hold it to
    label = version.partition("+")[2].lower()
    cuda_reqs = sorted(n for n in requires if n.startswith("nvidia-") or n == "cuda-toolkit")
    names = {str(m).rsplit("/", 1)[-1] for m in listing or ()}
    has_cuda, has_hip = "libtorch_cuda.so" in names, "libtorch_hip.so" in names
    built = (f"torch {version}" + (f", requiring {', '.join(cuda_reqs[:3])}{', ...' if len(cuda_reqs) > 3 else ''}"
                                   if cuda_reqs else "") + (", shipping libtorch_cuda.so" if has_cuda else "")
             + (", shipping libtorch_hip.so" if has_hip else ""))
    if v.vendor == "cpu":
        if label.startswith(("cu", "rocm")) or cuda_reqs or has_cuda or has_hip:
            kind = "ROCm" if label.startswith("rocm") or has_hip else "CUDA"
            return f"a {kind} build ({built}), not a CPU one"
        return None
    if v.vendor == "nvidia":
        tag = "cu" + (v.cuda or "").replace(".", "")
        if label:
            return None if label == tag else f"not the CUDA {v.cuda} build ({built}; its label is not +{tag})"
        if has_hip:
            return f"a ROCm build ({built}), not a CUDA one"
        if not (cuda_reqs or has_cuda):
            return f"a CPU build ({built}: no CUDA label, no nvidia-* requirements)"
        pinned = _cuda_of(requires)
        if pinned is not None and pinned != v.cuda:
            return f"the CUDA {pinned} build ({built}), not CUDA {v.cuda}"
        major = _cuda_major_of(cuda_reqs) if pinned is None else None
        if major is not None and major != (v.cuda or "").split(".")[0]:
            return f"a CUDA {major} build ({built}), not CUDA {v.cuda}"
        return None
    tag = f"rocm{v.rocm}"
    if label == tag and not (cuda_reqs or has_cuda):
        return None
    if label.startswith("rocm") and label != tag:
        return f"the ROCm {label[4:]} build ({built}), not ROCm {v.rocm}"
    return f"not the ROCm {v.rocm} build ({built}; its label is not +{tag})"


def build_refusal(variant: str, why: str, served_by: str, nothing: str) -> Fail:
    """The one error for a torch that is not its variant's build (exit 2: no retry changes what an
    index serves); `served_by` names the mapping (`--mirror pytorch/cpu=URL`), `nothing` what
    was not done."""
    return Fail.permanent(
        f"--libtorch {variant}: the torch that {served_by} serves is {why}; a {variant} env holds the "
        f"{variant} build: point that mapping at an index of {variant} wheels (PyTorch's: "
        f"https://download.pytorch.org/whl/{variant}); {nothing}")
