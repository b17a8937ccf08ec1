"""What the attempt loop needs from preparation, until `fdlenv.prepare` lands.

The loop reads these attributes only (duck typing), so the real
`fdlenv.prepare.Prepared` works unchanged as long as it carries them:
`environ` is the complete child environment (the variant's activation map +
LIBTORCH_PATH, FDL_GPU_FEATURE, LD_LIBRARY_PATH); join adds FLODL_HOST_NAME
and FLODL_INTERNAL_AGENT_JSON on top.
"""

from __future__ import annotations

from dataclasses import dataclass, field


@dataclass(frozen=True)
class EnvRef:
    key: str
    path: str
    libtorch_root: str


@dataclass
class Prepared:
    variant: str                     # canonical variant name, e.g. cu128
    env: EnvRef
    bin: str | None = None           # built artifact (source) or the given path
    cwd: str | None = None           # project dir inside the fetched tree; None = inherit
    data_path: str | None = None     # absolute dataset root to ship; None = ship nothing
    args: list[str] | None = None    # manifest args when a manifest existed
    run_id: str | None = None        # manifest `run` nonce
    notes: list[str] = field(default_factory=list)
    environ: dict[str, str] = field(default_factory=dict)
