"""The view of every lock a command sees: which lock holds a variant.

Locks compose (`LockView`): a variant comes from the first of these that
holds it for this platform, in this order:
1. the given lock (`--lock`, else fdl.yml's `fdlenv: lock:`);
2. `conda-lock.yml` beside fdl.yml;
3. `conda-lock.yml` at the fetched source tree's root;
4. the home's `lockfiles/conda-lock.yml`, where a variant no lock names is
   written when it is first asked for (`lock.ondemand`): the home is the one
   place every later call on this box sees, whatever its directory;
5. the lock shipped with fdlenv.
Each candidate is its base file and its `--split` siblings; within one, the
base file goes first. So a project lock naming only rocm7.1 does not hide the
shipped cu128. 1-3 are "near" (the project's own word on its variants), 4-5 "far".

"Holds" is read from the YAML, but the answer is remembered by the file's
digest (`store.fastpath`), so a re-dial that walks past a lock lacking the
variant parses nothing.
"""

from __future__ import annotations

from pathlib import Path

from ..base.errors import Fail
from ..lock.paths import LOCK_NAME, has_splits, home_lock, shipped_lock, split_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..names.home import Home


class LockView:
    """Every lock a command sees, in order (see the module's docstring)."""

    def __init__(self, home: Home, given: str | None = None, project_root: Path | None = None,
                 source_root: Path | None = None) -> None:
        self.home = home
        self.given = Path(given).expanduser().absolute() if given else None
        self.near = [c for c in (self.given, *(Path(r) / LOCK_NAME for r in (project_root, source_root)
                                               if r is not None)) if c is not None]
        shipped = shipped_lock()
        self.far = [home_lock(home)] + ([shipped] if shipped else [])

    def holder(self, variant: str, platform: str, *, near_only: bool = False) -> Path | None:
        """The first lock file that holds `variant` for `platform` (None: none does)."""
        from ..store import fastpath

        if self.given is not None and not (self.given.is_file() or has_splits(self.given)):
            raise Fail.permanent(f"--lock: {self.given} does not exist; give a conda-lock v1 file "
                                 "(see `fdlenv lock --help`)")
        for base in self.near if near_only else self.near + self.far:
            for f in (base, split_path(base, variant)):
                if not f.is_file():
                    continue
                digest = fastpath.lock_digest(f)
                known = fastpath.holds(self.home, digest, variant, platform)
                if known is None:
                    from ..lock.file import holds   # YAML: only for a lock not seen before
                    known = holds(f, variant, platform)
                    fastpath.remember_holds(self.home, digest, variant, platform, known)
                if known:
                    return f
        return None

    def describe(self) -> str:
        """The candidates that exist, for a message."""
        found = [str(b) for b in self.near + self.far if b.is_file() or has_splits(b)]
        return ", ".join(found) or "none"
