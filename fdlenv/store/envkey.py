"""An environment's identity: a hash of exactly what is installed in it.

Key = sha256 over canonical JSON of the sorted (manager, name, version,
build, sha256) of the variant's records + the platform + STORE_SCHEMA. URLs
and mirrors are left out on purpose (the same bytes from another mirror are
the same env); categories and timestamps too. Bump STORE_SCHEMA when the
layout of a realised env changes, so old envs are never mistaken for new ones.
"""

from __future__ import annotations

import json

from ..base import hashing

TYPE_CHECKING = False   # `typing` and the lock's reader (`lock.file`) stay off the re-dial path
if TYPE_CHECKING:
    from ..lock.file import Record

STORE_SCHEMA = 3  # 2: wheels hard-linked from the package cache; 3: NVIDIA envs carry cuda/ (CUDA_HOME)


def env_key(records: list[Record], platform: str) -> str:
    items = sorted((r.manager, r.name, r.version, r.build, r.sha256) for r in records)
    blob = json.dumps({"schema": STORE_SCHEMA, "platform": platform, "records": items},
                      separators=(",", ":"), sort_keys=True)
    return hashing.of_text(blob)


def env_dirname(variant: str, key: str) -> str:
    return f"{variant}-{key[:16]}"
