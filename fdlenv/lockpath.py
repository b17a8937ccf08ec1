"""Where a variant's lock lives: the base file or its `--split` sibling.

One rule, used by `fdlenv lock` (writing), `--check`, lock discovery and the
store (reading): the split file of `conda-lock.yml` for `cu126` is
`cu126.conda-lock.yml`. The name keeps conda-lock's `-lock.yml` ending,
which micromamba and other conda tools recognise as a lock file.
"""

from __future__ import annotations

from pathlib import Path


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
