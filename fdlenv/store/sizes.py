"""What envs and the package cache hold, in bytes: each inode once, at a cost per env.

Why: envs hard-link the package cache, so summing `du` per env (or per env and
per cache entry) counts a 6 GB torch once per link: twenty cu128 envs "kept"
121 GB. And walking every kept file on each `env gc` or `env list` costs per
file (12,000 per torch). So the bytes are measured once, at build time:
- `measure(home, stage, records)`: the bytes only the env holds (files with
  one link: prefix-rewritten copies, fdlenv's own files, whatever could not be
  hard-linked) and the cache entries it links, kept in its manifest as `size`;
- `entry_size(home, name)`: one walk per cache entry ever, remembered in
  `cache/sizes/<name>`.
Everything later adds those numbers: an env's size is its own bytes plus its
entries', a set of envs counts each entry once, and what gc frees is the dead
envs' own bytes plus the entries no kept env names.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base import atomic
from ..names.home import Home, Living, Sweeper, listing
from ..lock.file import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

    from .env import Manifest, Sizes


def entry_name(r: Record) -> str:
    """The package-cache directory a record's files are linked from."""
    if r.manager == "pip":
        return f"whl-{r.sha256}"
    return r.filename.removesuffix(".conda").removesuffix(".tar.bz2")


def _stats(root: Path, skip: tuple[Path, ...] = ()) -> Iterator[os.stat_result]:
    """lstat of every file under `root` (or of `root` itself when it is not a directory),
    the directories in `skip` left out; a file gone meanwhile is passed over."""
    if not os.path.isdir(root) or os.path.islink(root):
        try:
            yield os.lstat(root)
        except OSError:
            pass
        return
    pruned = {str(p) for p in skip}
    for dirpath, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if os.path.join(dirpath, d) not in pruned]
        for name in files:
            try:
                yield os.lstat(os.path.join(dirpath, name))
            except OSError:
                continue


def _walk_bytes(root: Path, only_single: bool = False, skip: tuple[Path, ...] = ()) -> int:
    return sum(st.st_size for st in _stats(root, skip) if not only_single or st.st_nlink == 1)


def of_tree(root: Path) -> int:
    """Bytes of the distinct inodes under `root` (hard links shared with the cache count once):
    what removing a tree no size was kept for frees at most."""
    seen, total = set(), 0
    for st in _stats(root):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def entry_size(home: Home, name: str) -> int:
    """Bytes of cache entry `name` (walked once, then read from cache/sizes/)."""
    memo = home.sizes(name)
    try:
        return int(memo.read_text())
    except (OSError, ValueError):
        pass
    entry = home.pkgs / name
    if not entry.is_dir():
        return 0
    size = _walk_bytes(entry)
    atomic.cache_text(memo, str(size))
    return size


def measure(home: Home, stage: Path, records: list[Record]) -> Sizes:
    """The manifest's `size` of a freshly built env (one walk of it, at build time). In an env
    of wheels only, site-packages holds nothing but hard links into the cache (`linktree.link`
    links every file, no package writes there): it holds no bytes of its own and is not walked."""
    names = sorted({entry_name(r) for r in records})
    for name in names:
        entry_size(home, name)
    linked = tuple(stage.glob("lib/python*/site-packages")) if all(r.manager == "pip" for r in records) else ()
    return {"own": _walk_bytes(stage, only_single=True, skip=linked), "entries": names}


def of_env(home: Home, manifest: Manifest, env_dir: Path) -> tuple[int, list[str]]:
    """(own bytes, cache entry names) of an env; an env built before sizes were kept is walked once."""
    size = manifest.get("size")
    if isinstance(size, dict) and isinstance(size.get("own"), int) and isinstance(size.get("entries"), list):
        return size["own"], [str(n) for n in size["entries"]]
    return _walk_bytes(env_dir, only_single=True), sorted({entry_name(Record.from_json(r))
                                                           for r in manifest.get("records", [])})


def total(home: Home, envs: list[tuple[int, list[str]]]) -> int:
    """Bytes a set of envs holds: each one's own bytes, and each cache entry once."""
    entries = {name for _, names in envs for name in names}
    return sum(own for own, _ in envs) + sum(entry_size(home, n) for n in entries)


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of the sizes kept: one whose cache entry goes or is gone."""
    for p in listing(home.sizes()):
        if p.name in living.gone_entries or not (home.pkgs / p.name).is_dir():
            yield p, "size of a cache entry that is gone"


SWEEPER = Sweeper(("sizes",), sweep)
