"""Hard-link a wheel's package-cache entry into an env: what a second env sharing every wheel
costs, so this runs at the speed of the kernel's link calls, and never through a symlink.

Order, per wheel (in the lock's order: a file two wheels ship is the last one's):
1. Refuse an entry that ships `etc/conda/` (activation scripts come only from the lock's
   conda packages).
2. Per part (`site/` -> `lib/python<X.Y>/site-packages`, `data/` -> the prefix,
   `include/` -> `include/`), open the target with O_NOFOLLOW at every level, making what
   is missing; a symlink or a file where a directory goes is refused.
3. Link the part's tree: each directory's files, then its subdirectories. With more than
   one thread (`threads()`), the directories are shared out from one stack.

Why a stack of directories and not of files: a link into a directory holds that directory's
lock in the kernel, so two threads in one directory wait for each other, while two in
different directories each keep a core busy (two `cp -al` of torch side by side take the time
of one here). A stack takes the deepest directories first, so the large leaves (torch's
`include/ATen/ops`, half of its 13,800 files) start early and the rest goes beside them.
Everything is resolved against open directory descriptors, never from the root; a worker
holds at most `_OPEN_BUDGET` waiting directories open and links what lies beyond depth first.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path

from ..base import confine


class LinkRefused(Exception):
    """A wheel's file would land on or go through a symlink in the env (or is an activation
    script, which only the lock's conda packages may ship)."""


def threads() -> int:
    """Threads for `link`: the cores, at most 4 (the directories a tree offers side by side).
    On 2 cores, the second cu128 env (13,809 links, ~1,000 directories) by a regular install,
    6 rounds interleaved with `cp -al` under load: 1 thread median 0.43 s (0.31-0.54), 2 threads
    0.33 s (0.29-0.52), 4 threads 0.38 s (0.35-0.68), `cp -al` 0.43 s (0.27-0.49). The kernel's
    link and mkdir calls are the cost (~10 us and 0.1-0.3 ms each); each thread's Python per
    file is a scandir entry and one `os.link` on directory descriptors."""
    return max(1, min(4, os.cpu_count() or 1))


def link(entry: Path, prefix: Path, pyver: str, nthreads: int = 1) -> int:
    """Hard-link a cache entry into the env at `prefix`; returns the files linked."""
    if (entry / "data" / "etc" / "conda").exists():
        raise LinkRefused("it ships etc/conda/ (activation scripts come only from the lock's conda packages)")
    targets = {"site": ("lib", f"python{pyver}", "site-packages"), "data": (), "include": ("include",)}
    count = 0
    for part, target in targets.items():
        if (entry / part).is_dir():
            src, dst, where = os.open(entry / part, _DIR), _open_under(prefix, target), "/".join(target) or "."
            count += _link_tree(src, dst, where) if nthreads < 2 else _link_shared(nthreads, src, dst, where)
    return count


_DIR = os.O_RDONLY | os.O_DIRECTORY
_NOFOLLOW = _DIR | os.O_NOFOLLOW
# Directories waiting for a thread (two descriptors each) before a worker goes depth first itself.
_OPEN_BUDGET = 256


def _open_dir(name: str, parent: int, where: str) -> int:
    """`name` under directory fd `parent`, made when missing; a symlink or file there is refused."""
    try:
        return confine.open_dir(parent, [name])
    except confine.Refused:
        raise LinkRefused(f"{where}/{name} in the env is a symlink or a file, not a directory") from None


def _open_under(prefix: Path, parts: tuple[str, ...]) -> int:
    try:
        return confine.open_dir(prefix, parts)
    except confine.Refused as e:
        raise LinkRefused(f"{'/'.join(parts)} in the env: {e.strerror}") from None


def _link_tree(src: int, dst: int, where: str) -> int:
    """Every file under directory fd `src` linked into directory fd `dst` (both closed here),
    depth first, in this thread."""
    count, below = _link_dir(src, dst, where, 0)
    for s, d, w in below:
        count += _link_tree(s, d, w)
    return count


def _link_shared(nthreads: int, src: int, dst: int, where: str) -> int:
    """`_link_tree` with `nthreads` threads (this one among them) taking directories from one
    stack. The first failure stops them all; every descriptor is closed before it is raised."""
    stack = [(src, dst, where)]
    cond = threading.Condition()
    state = {"busy": 0, "count": 0}
    errors: list[BaseException] = []

    def work() -> None:
        while True:
            with cond:
                while not stack and state["busy"] and not errors:
                    cond.wait()
                if errors or not stack:
                    cond.notify_all()
                    return
                item = stack.pop()
                state["busy"] += 1
                keep = max(0, _OPEN_BUDGET - len(stack))
            try:
                count, kids = _link_dir(*item, keep)
            except BaseException as e:   # noqa: BLE001 - raised by the caller once all are stopped
                with cond:
                    errors.append(e)
                    state["busy"] -= 1
                    cond.notify_all()
                return
            with cond:
                stack.extend(kids)
                state["count"] += count
                state["busy"] -= 1
                cond.notify_all()

    helpers = [threading.Thread(target=work, name="fdlenv-link", daemon=True) for _ in range(nthreads - 1)]
    try:
        for t in helpers:
            t.start()
        work()
    except BaseException as e:   # noqa: BLE001 - Ctrl-C in this thread: the helpers stop too
        with cond:
            errors.append(e)
            cond.notify_all()
    for t in helpers:
        if t.ident is not None:
            t.join()
    for s, d, _ in stack:
        os.close(s)
        os.close(d)
    if errors:
        raise errors[0]
    return state["count"]


def _link_dir(src: int, dst: int, where: str, keep: int) -> tuple[int, list[tuple[int, int, str]]]:
    """Link the files of directory fd `src` into `dst` and make its subdirectories there;
    returns the count and up to `keep` subdirectories as open (src, dst, where) for the
    caller (the others are linked here, depth first). `src` and `dst` are closed here."""
    count, subdirs = 0, []
    kept: list[tuple[int, int, str]] = []
    try:
        with os.scandir(src) as it:
            for e in it:
                if e.is_dir(follow_symlinks=False):
                    subdirs.append(e.name)
                    continue
                try:
                    os.link(e.name, e.name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
                except FileExistsError:   # the same file from two wheels (namespace __init__): last wins;
                    os.unlink(e.name, dir_fd=dst)   # a symlink there is replaced, never written through
                    os.link(e.name, e.name, src_dir_fd=src, dst_dir_fd=dst, follow_symlinks=False)
                count += 1
        for name in subdirs:
            below = _open_dir(name, dst, where)
            try:
                kid = (os.open(name, _NOFOLLOW, dir_fd=src), below, f"{where}/{name}")
            except BaseException:
                os.close(below)
                raise
            if len(kept) < keep:
                kept.append(kid)
            else:
                count += _link_tree(*kid)
    except BaseException:
        for s, d, _ in kept:
            os.close(s)
            os.close(d)
        raise
    finally:
        os.close(src)
        os.close(dst)
    return count, kept
