"""What a realised env was, file by file, and whether it still is: the quick check every attempt runs.

Why: envs are hard links into the package cache, so a truncated, deleted or replaced file in
one (a bad disk, a stray `rm`, `> file`) is the same damage in the cache and in every env
sharing it, and nothing else notices it before the agent loads it. Re-hashing (`verify
--full`) costs seconds per GB; comparing each file's stat with what the realise saw costs a
few milliseconds per thousand files. In order:
1. At realise (`record`, before the manifest is written): `.fdlenv/files`, a header
   `fdlenv-files 1 <inode of the env dir>` and one line per file of the env (fdlenv's own
   `.fdlenv/` left out): `<size> <inode> <mtime_ns> <path>` (`\\` and a newline in a name
   escaped). Written as fdlenv's own file (`confine.write_own`: never through a link).
2. At check (`check_files`): every line's path lstat'ed; missing, another size, another
   inode (a replaced file) or another mtime (an edit in place) is damage. Where the env dir
   is no longer the inode the realise made (the home was copied: an image bake, rsync),
   inodes and mtimes say nothing: sizes only, and the table is written again (`record`)
   once they all match. A table that is missing or does not parse answers None: the caller
   checks by what the manifest has (sizes from the packages' own records) and records again.
What it cannot see: an edit in place that keeps size and mtime (a bit flip on disk, a
`touch -d` back): that is `verify --full`'s job, which re-hashes every file.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base import confine
from ..base.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..lock.file import Record as Locked

FILES = ".fdlenv/files"
HEADER = "fdlenv-files 1"


class Problem(Record):
    """What a check found wrong: a path in the env, what is wrong, and whose it is."""

    path: str
    what: str
    package: str       # a package's name, or `(env)`, `(libtorch)`, `(pointer)`


class Damage(Record):
    """A file whose stat is not what the realise recorded (`check_files`)."""

    path: str          # relative to the env
    what: str
    size: int          # as recorded
    inode: int         # as recorded


def _escape(rel: str) -> str:
    return rel.replace("\\", "\\\\").replace("\n", "\\n")


def _unescape(rel: str) -> str:
    return rel.replace("\\n", "\n").replace("\\\\", "\\") if "\\" in rel else rel


def table(env_dir: Path) -> bytes:
    """`.fdlenv/files`' bytes for the tree at `env_dir` as it is now (one lstat per file)."""
    root = str(env_dir)
    lines = [f"{HEADER} {os.lstat(root).st_ino}"]
    stack = [""]
    while stack:
        rel_dir = stack.pop()
        with os.scandir(os.path.join(root, rel_dir) if rel_dir else root) as it:
            for e in it:
                rel = f"{rel_dir}/{e.name}" if rel_dir else e.name
                if e.is_dir(follow_symlinks=False):
                    if rel != ".fdlenv":
                        stack.append(rel)
                    continue
                st = e.stat(follow_symlinks=False)
                lines.append(f"{st.st_size} {st.st_ino} {st.st_mtime_ns} {_escape(rel)}")
    return ("\n".join(lines) + "\n").encode("utf-8", "surrogateescape")


def record(env_dir: Path) -> None:
    """Write the env's table (step 1 of the module docstring)."""
    confine.write_own(env_dir, FILES, table(env_dir))


def rerecord(env_dir: Path) -> None:
    """`record`, where the home can be written (a read-only one is checked by size each time)."""
    try:
        record(env_dir)
    except OSError:
        pass


def whole(env_dir: Path) -> bool:
    """The re-dial's question, at the cost of the manifest's read and one lstat per file: is the
    env what its realise recorded? False also for what only `store.heal.check` can tell (no
    table yet, a damaged manifest): the caller asks it then."""
    from .env import Damaged, read_manifest

    try:
        read_manifest(env_dir)
    except Damaged:
        return False
    return check_files(env_dir) == []


def check_files(env_dir: Path) -> list[Damage] | None:
    """Step 2: the damaged files, or None when the env has no table that parses."""
    path = os.path.join(env_dir, FILES)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
        try:
            with os.fdopen(fd, "rb", closefd=False) as f:
                text = f.read().decode("utf-8", "surrogateescape")
        finally:
            os.close(fd)
        lines = text.split("\n")
        head = lines[0].rsplit(" ", 1)
        if head[0] != HEADER or lines[-1] != "":
            return None
        same = int(head[1]) == os.lstat(env_dir).st_ino
    except (OSError, ValueError, IndexError):
        return None
    out: list[Damage] = []
    pre = f"{env_dir}/"
    lstat = os.lstat
    try:
        for line in lines[1:-1]:
            size_, ino_, mtime_, rel = line.split(" ", 3)
            size, ino, mtime = int(size_), int(ino_), int(mtime_)
            try:
                st = lstat(pre + rel if "\\" not in rel else pre + _unescape(rel))
            except OSError:
                out.append(Damage(_unescape(rel), "missing", size, ino))
                continue
            if st.st_size != size:
                out.append(Damage(_unescape(rel), f"{st.st_size} bytes, {size} when realised", size, ino))
            elif same and st.st_ino != ino:
                out.append(Damage(_unescape(rel), "replaced (another file than the realise linked)", size, ino))
            elif same and st.st_mtime_ns != mtime:
                out.append(Damage(_unescape(rel), "modified in place (its mtime moved)", size, ino))
    except ValueError:
        return None   # a line that does not parse: the table is no record
    if not same and not out:
        rerecord(env_dir)   # a copied home: identities recorded again, sizes having matched
    return out


def cache_path(pkgs: Path, entry: str, manager: str, rel: str) -> Path | None:
    """Where a package's cache entry holds the file an env holds at `rel` (None: nowhere): a
    wheel's `site/` is the env's site-packages, its `include/` and `data/` the prefix's; a
    conda package's entry mirrors the prefix."""
    if manager != "pip":
        return pkgs / entry / rel
    parts = rel.split("/")
    if len(parts) > 3 and parts[0] == "lib" and parts[1].startswith("python") and parts[2] == "site-packages":
        return pkgs / entry / "site" / "/".join(parts[3:])
    if parts[0] == "include" and (pkgs / entry / "include" / "/".join(parts[1:])).exists():
        return pkgs / entry / "include" / "/".join(parts[1:])
    return pkgs / entry / "data" / rel


def owner(pkgs: Path, records: list[Locked], d: Damage) -> tuple[Locked | None, bool]:
    """(the package whose cache entry holds the damaged file, whether that entry still holds
    it whole); (None, True) for a file no package ships (fdlenv's own: a rebuild writes it)."""
    from .sizes import entry_name

    for r in reversed(records):   # a file two wheels ship is the last one's
        cached = cache_path(pkgs, entry_name(r), r.manager, d.path)
        try:
            st = os.lstat(cached) if cached is not None else None
        except OSError:
            continue
        if st is None:
            continue
        # The same inode as the env's file had: whatever hit the env's file hit the entry's.
        whole = st.st_size == d.size and (st.st_ino != d.inode or d.what == "missing"
                                          or d.what.startswith("replaced"))
        return r, whole
    return None, True
