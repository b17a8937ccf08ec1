"""`Env`: what the store hands back, and the manifest every realised env carries.

An env directory is immutable once published and always has
`.fdlenv/manifest.json`; everything that later needs to know what an env is
(list, verify, repair, gc, activation) reads that file instead of the lock.
"""

from __future__ import annotations

import json
from collections import namedtuple
from pathlib import Path

MANIFEST = ".fdlenv/manifest.json"


class Env(namedtuple("Env", "variant key path libtorch_root created", defaults=(False,))):
    """A realised env: variant, key, path and libtorch_root (Paths), created (this call made it).
    A namedtuple: it is on the re-dial path."""

    __slots__ = ()

    def to_json(self) -> dict:
        return {"variant": self.variant, "key": self.key, "path": str(self.path),
                "libtorch_root": str(self.libtorch_root), "created": self.created}


def libtorch_root(prefix: Path) -> Path:
    """`fdlenv pack` puts PyTorch's tree under <prefix>/libtorch; a wheel env has it at
    <prefix>/lib/pythonX.Y/site-packages/torch; else the prefix itself."""
    inner = prefix / "libtorch"
    if (inner / "lib").is_dir():
        return inner
    wheel = next(iter(sorted(prefix.glob("lib/python*/site-packages/torch/lib"))), None)
    return wheel.parent if wheel else prefix


def read_manifest(env_dir: Path) -> dict:
    return json.loads((env_dir / MANIFEST).read_text())


def moved_from(env_dir: Path, m: dict) -> Path | None:
    """Where the env was when its manifest was written, when that is not `env_dir` (a moved
    home); None when it has not moved."""
    recorded = Path(m["libtorch_root"])
    parts = recorded.parts
    if env_dir.name not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index(env_dir.name)
    old = Path(*parts[:i + 1])
    return None if old == Path(env_dir).absolute() else old


def from_dir(env_dir: Path) -> Env:
    """The env at `env_dir`, wherever its home is now: the manifest's libtorch root is taken
    relative to the env (an image bake or `mv` of the home keeps every env usable)."""
    m = read_manifest(env_dir)
    return Env(m["variant"], m["key"], env_dir, rebase(env_dir, m["libtorch_root"]))


def rebase(env_dir: Path, recorded: str) -> Path:
    """A path recorded inside an env (its libtorch root), taken relative to where the env is now."""
    parts = Path(recorded).parts
    if env_dir.name not in parts:
        return Path(recorded)
    i = len(parts) - 1 - parts[::-1].index(env_dir.name)
    return Path(env_dir).joinpath(*parts[i + 1:])
