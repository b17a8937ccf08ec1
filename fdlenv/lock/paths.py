"""Where locks live: the shipped lock, the home's on-demand locks, and a variant's `--split` sibling.

The view of every lock a command sees is `fdlenv.app.lockview`; this module
holds the names it is built from:
- `shipped_lock()`: the lock shipped with fdlenv (`shipped_candidates()`: where it may be);
- `home_lock(home)`: the base name of the locks written on demand in a home;
- the split rule.

One split rule, used by `fdlenv lock` (writing), `--check`, discovery and the
store (reading): the split file of `conda-lock.yml` for `cu126` is
`cu126.conda-lock.yml`. The name keeps conda-lock's `-lock.yml` ending,
which micromamba and other conda tools recognise as a lock file.
"""

from __future__ import annotations

from pathlib import Path

from .. import PACKAGE_DIR

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..names.home import Home

LOCK_NAME = "conda-lock.yml"


def shipped_candidates() -> tuple[Path, Path]:
    """Where the shipped lock may be, first first: the installed package's (`fdlenv/data`),
    a source checkout's root (the re-dial memo signs both: `hot.memo`)."""
    pkg = Path(PACKAGE_DIR)
    return pkg / "data" / LOCK_NAME, pkg.parent / LOCK_NAME


def shipped_lock() -> Path | None:
    """The lock in the installed package (`fdlenv/data`), else a source checkout's root."""
    return next((c for c in shipped_candidates() if c.is_file()), None)


def home_lock(home: Home) -> Path:
    """The base name of the locks written on demand in `home` (only split files exist)."""
    lock: Path = home.lockfiles / LOCK_NAME
    return lock


def split_path(lock: Path, variant: str) -> Path:
    """`conda-lock.yml` + `cu128` -> `cu128.conda-lock.yml`."""
    return lock.with_name(f"{variant}.{lock.name}")


def split_sibling(lock: Path, variant: str) -> Path | None:
    p = split_path(lock, variant)
    return p if p.is_file() else None


def has_splits(lock: Path) -> bool:
    """Does any `<variant>.<name>` sit beside `lock`?"""
    from ..names.variants import VARIANTS

    return any(split_path(lock, v).is_file() for v in VARIANTS)
