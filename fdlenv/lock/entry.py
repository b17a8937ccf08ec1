"""One locked package of one platform: what a conda-lock entry holds.

Both solvers make them (rattler for conda packages in `solve`, the index walk
for wheels in `closure`), the writer and the checker read them; it lives apart
so neither solver imports the other's module to get it.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Entry:
    """One locked package of one platform: what a conda-lock entry holds."""

    manager: str                           # conda | pip
    name: str
    version: str
    build: str | None
    platform: str
    url: str
    md5: str
    sha256: str
    depends: tuple[tuple[str, str], ...]   # (name, version constraint or ""), sorted
    size: int | None = None                # bytes, where the index states or answers it (wheels)

    @property
    def key(self) -> tuple[str, str, str]:
        """conda-lock's identity of an entry: one build per key per lock file."""
        return (self.manager, self.name, self.platform)

    @property
    def label(self) -> str:
        return f"{self.name}-{self.version}-{self.build}" if self.build else f"{self.name}-{self.version}"
