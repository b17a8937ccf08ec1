"""The libtorch variants fdlenv knows, and how their names are spelled.

One table, so that the CLI tokens (`12.8`, `rocm71`), flodl's on-disk names
(`precompiled/rocm71`), the cargo feature and the declared CUDA version can
never disagree between the store, routing and join.
"""

from __future__ import annotations

from collections import namedtuple

from .errors import Fail

# A vendor's cargo feature, as flodl's `FDL_GPU_FEATURE` carries it.
FEATURE = {"nvidia": "cuda", "amd": "rocm", "cpu": ""}


class Variant(namedtuple("Variant", "name flodl_dir vendor cuda rocm")):
    """One variant:
    name       canonical token, also the lock category: cpu cu126 cu128 rocm7.0 rocm7.1
    flodl_dir  flodl's precompiled/<dir> name (x86_64; `flodl_name` is this machine's)
    vendor     cpu | nvidia | amd
    cuda       declared CUDA version (the __cuda virtual package), None off NVIDIA
    rocm       ROCm major.minor, None off AMD

    A `collections.namedtuple`, like every record on the re-dial path: neither
    `dataclasses` nor `typing` is imported there (see docs/ARCHITECTURE.md)."""

    __slots__ = ()

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
        Variant("rocm7.0", "rocm70", "amd", None, "7.0"),
        Variant("rocm7.1", "rocm71", "amd", None, "7.1"),
    )
}

_ALIASES = {
    "12.6": "cu126",
    "12.8": "cu128",
    "rocm70": "rocm7.0",
    "7.0": "rocm7.0",
    "rocm71": "rocm7.1",
    "7.1": "rocm7.1",
}

ACCEPTED = "auto, cpu, cu126 (12.6), cu128 (12.8), rocm7.0 (rocm70, 7.0), rocm7.1 (rocm71, 7.1)"


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


def get(name: str) -> Variant:
    return VARIANTS[parse_token(name, allow_auto=False)]
