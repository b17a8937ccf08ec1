"""Whole or not at all: small files, links, deleted trees and swapped trees.

A reader sees the old content or the new, never half of it, and a failed
write (a full disk, a kill between write and rename aside) leaves no temp
name behind. Temp names are `.<name>.<pid>` beside the target, so the rename
stays on one filesystem.

Trees follow the same rule (the hardening issue: a kill -9 must leave the old
state or the new): `discard` renames a tree out of its name before deleting
it, so a killed delete leaves a hidden `.trash-*` name that later runs sweep,
never a half tree under the real name; `exchange` swaps two trees in one
rename (Linux renameat2 RENAME_EXCHANGE), so a repaired env replaces the old
one with no moment where neither is there.
"""

from __future__ import annotations

import os
from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

TRASH = ".trash-"


def write_text(path: Path, text: str, *, durable: bool = True,
               publish_if: Callable[[os.stat_result], bool] | None = None, mode: int | None = None) -> None:
    """Replace `path` with `text` atomically (its directory is made when missing; UTF-8, with
    what os.environ holds undecodable written back as it came). `durable`: fsynced first, so a
    power loss leaves the old content or the new, never an empty file (a cache can do without).
    `publish_if(st)`: given the written file's stat, False leaves `path` as it was. `mode`:
    the file's mode whatever the umask (else the umask's)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(tmp, "w", encoding="utf-8", errors="surrogateescape") as f:
            if mode is not None:
                os.fchmod(f.fileno(), mode)
            f.write(text)
            f.flush()
            if durable:
                os.fsync(f.fileno())
            if publish_if is not None and not publish_if(os.fstat(f.fileno())):
                return
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def cache_text(path: Path, text: str) -> bool:
    """`write_text` for a cache (what is recomputed when missing: the fast path's entries, an
    activation, a size): False, nothing written, where the home cannot be written (a baked
    image, a read-only mount), so a command whose answer is settled still gives it."""
    import errno

    try:
        write_text(path, text, durable=False)
        return True
    except OSError as e:
        if e.errno in (errno.EROFS, errno.EACCES, errno.EPERM):
            return False
        raise


def symlink(link: Path, target: str | os.PathLike[str]) -> None:
    """Point `link` at `target` atomically (a rename over the old link)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    try:
        os.symlink(target, tmp)
        os.replace(tmp, link)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def discard(path: Path, trash_dir: Path | None = None) -> None:
    """Delete the tree (or file) at `path`: first renamed to `<trash_dir or its dir>/.trash-<name>.<pid>`
    (one atomic step: the name is gone), then deleted out of sight."""
    import shutil   # not at module level: the re-dial path writes pointers through this module

    trash = (trash_dir or path.parent) / f"{TRASH}{path.name}.{os.getpid()}"
    try:
        os.rename(path, trash)
    except FileNotFoundError:
        return
    if trash.is_dir() and not trash.is_symlink():
        shutil.rmtree(trash, ignore_errors=True)
    else:
        trash.unlink(missing_ok=True)


def exchange(a: Path, b: Path) -> bool:
    """Swap the trees at `a` and `b` in one step; False where the kernel or filesystem cannot
    (the caller then falls back to two renames)."""
    import ctypes
    import errno

    try:
        fn = ctypes.CDLL(None, use_errno=True).renameat2
    except (OSError, AttributeError):
        return False
    at_fdcwd, rename_exchange = -100, 2
    if fn(at_fdcwd, os.fsencode(a), at_fdcwd, os.fsencode(b), rename_exchange) == 0:
        return True
    err = ctypes.get_errno()
    if err in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
        return False
    raise OSError(err, os.strerror(err), str(a))
