"""Which lock, which home, which mirrors: the store's settings from flags and fdl.yml.

Lock discovery, first hit wins: `--lock` > `fdlenv: lock:` in fdl.yml >
`conda-lock.yml` beside fdl.yml > `conda-lock.yml` at the fetched source
tree's root > the lock shipped with fdlenv. Home: `--home` > `$FLODL_HOME` >
`fdlenv: home:` > `~/.flodl`. Mirrors: fdl.yml's `fdlenv: mirrors:`, then
each `--mirror` over it.
"""

from __future__ import annotations

import os
from typing import NamedTuple
from pathlib import Path

from .. import mirrors as _mirrors
from ..errors import Fail
from ..home import Home
from ..lockpath import has_splits

LOCK_NAME = "conda-lock.yml"


def shipped_lock() -> Path | None:
    pkg = Path(__file__).resolve().parent.parent
    for cand in (pkg / "data" / LOCK_NAME, pkg.parent / LOCK_NAME):
        if cand.is_file():
            return cand
    return None


def find_lock(given: str | None, project_root: Path | None = None,
              source_root: Path | None = None) -> Path:
    """`given` is `--lock`, else fdl.yml's `fdlenv: lock:` (already anchored at the project)."""
    if given:
        return Path(given).expanduser().absolute()
    candidates = []
    if project_root is not None:
        candidates.append(project_root / LOCK_NAME)
    if source_root is not None:
        candidates.append(source_root / LOCK_NAME)
    for c in candidates:
        if c.is_file() or has_splits(c):
            return c
    shipped = shipped_lock()
    if shipped:
        return shipped
    raise Fail.permanent("--lock: no lock file found; give --lock FILE, set `fdlenv: lock:` in fdl.yml, "
                         f"or put {LOCK_NAME} beside fdl.yml (make one with `fdlenv lock`)")


class StoreSettings(NamedTuple):
    """Home, mirrors and the loaded project (a NamedTuple: on the re-dial path, see variants)."""

    home: Home
    mirrors: dict[str, str]
    project: object | None    # fdlenv.config.model.Project, loaded once

    def lock(self, flag: str | None, source_root: Path | None = None) -> Path:
        """The lock for a command: --lock, else what fdl.yml and the source tree offer."""
        p = self.project
        return find_lock(flag or (p.fdlenv.lock if p else None), p.root if p else None, source_root)


def settings(home_flag: str | None, mirror_flags: list[str] | None) -> StoreSettings:
    from ..fdlfile import find_config

    project = None
    if find_config() is not None:  # the config module's load is paid only with a project
        from ..config.load import load_project
        project = load_project()
    raw = home_flag or os.environ.get("FLODL_HOME") or (project.fdlenv.home if project else None)
    home = Home.resolve(raw)
    base = dict(project.fdlenv.mirrors) if project else {}
    return StoreSettings(home, _mirrors.parse(mirror_flags, base), project)
