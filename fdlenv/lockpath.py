"""Where locks live: which lock a command uses, and a variant's `--split` sibling.

Discovery, first hit wins (`find_lock`): the given lock (`--lock`, else
fdl.yml's `fdlenv: lock:`) > `conda-lock.yml` beside fdl.yml >
`conda-lock.yml` at the fetched source tree's root > the lock shipped with
fdlenv. A candidate counts when the file or one of its split siblings exists.

One split rule, used by `fdlenv lock` (writing), `--check`, discovery and the
store (reading): the split file of `conda-lock.yml` for `cu126` is
`cu126.conda-lock.yml`. The name keeps conda-lock's `-lock.yml` ending,
which micromamba and other conda tools recognise as a lock file.
"""

from __future__ import annotations

from pathlib import Path

from .errors import Fail

LOCK_NAME = "conda-lock.yml"


def shipped_lock() -> Path | None:
    """The lock in the installed package (`fdlenv/data`), else a source checkout's root."""
    pkg = Path(__file__).resolve().parent
    for cand in (pkg / "data" / LOCK_NAME, pkg.parent / LOCK_NAME):
        if cand.is_file():
            return cand
    return None


def find_lock(given: str | None, project_root: Path | None = None,
              source_root: Path | None = None, *, shipped: bool = True) -> Path | None:
    """`given` is `--lock`, else fdl.yml's `fdlenv: lock:` (already anchored at the project).
    `shipped=False`: None rather than the lock shipped with fdlenv (run and shell-hook then use
    what is realised)."""
    if given:
        return Path(given).expanduser().absolute()
    for root in (project_root, source_root):
        if root is not None:
            c = Path(root) / LOCK_NAME
            if c.is_file() or has_splits(c):
                return c
    if not shipped:
        return None
    fallback = shipped_lock()
    if fallback:
        return fallback
    raise Fail.permanent(f"--lock: no lock file found; give --lock FILE, set `fdlenv: lock:` in fdl.yml, "
                         f"or put {LOCK_NAME} beside fdl.yml (make one with `fdlenv lock`)")


def split_path(lock: Path, variant: str) -> Path:
    """`conda-lock.yml` + `cu128` -> `cu128.conda-lock.yml`."""
    return lock.with_name(f"{variant}.{lock.name}")


def split_sibling(lock: Path, variant: str) -> Path | None:
    p = split_path(lock, variant)
    return p if p.is_file() else None


def has_splits(lock: Path) -> bool:
    """Does any `<variant>.<name>` sit beside `lock`?"""
    from .variants import VARIANTS

    return any(split_path(lock, v).is_file() for v in VARIANTS)
