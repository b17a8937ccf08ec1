"""`Env`: what the store hands back, and the manifest every realised env carries.

An env directory is immutable once published and always has
`.fdlenv/manifest.json`; everything that later needs to know what an env is
(list, verify, repair, gc, activation) reads that file instead of the lock.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..base.record import Record

MANIFEST = ".fdlenv/manifest.json"
TYPE_CHECKING = False   # `typing` stays off the re-dial path: the manifest's shape is for the checker
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from ..names.variants import Variant

    class LockRef(TypedDict):
        path: str      # the lock file the env was realised from, absolute
        sha256: str    # its bytes' digest

    class Sizes(TypedDict):
        own: int               # bytes only the env holds (files with one link)
        entries: list[str]     # the package-cache entries it links

    class LinkReport(TypedDict):
        hardlinked: int        # packages whose sample file is a hard link into the cache
        copied: list[str]      # packages rattler copied instead (another filesystem?)

    class _Written(TypedDict):
        key: str
        variant: str
        platform: str
        records: list[dict[str, Any]]   # each lock entry's `Record.to_json()`
        lock: LockRef
        libtorch_root: str              # where it was when written (`rebase` reads it from here)
        created: str                    # ISO 8601, UTC
        tool_version: str
        links: LinkReport

    class Manifest(_Written, total=False):
        """`.fdlenv/manifest.json`, as `store.install` writes it (JSON, read back unchecked)."""
        size: Sizes            # absent from envs built before sizes were kept: `sizes.of_env` walks them


class Env(Record):
    """A realised env: its variant's canonical name, key, directory and libtorch root;
    `created`: this call made it. A Record (a tuple at run time): it is on the re-dial path."""

    variant: str
    key: str
    path: Path
    libtorch_root: Path
    created: bool = False

    @property
    def spec(self) -> Variant:
        """The variant's row (`names.variants`)."""
        from ..names import variants

        return variants.get(self.variant)

    def to_json(self) -> dict[str, Any]:
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


def read_manifest(env_dir: Path) -> Manifest:
    m: Manifest = json.loads((env_dir / MANIFEST).read_text())
    return m


def moved_from(env_dir: Path, m: Manifest) -> Path | None:
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
