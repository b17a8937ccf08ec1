"""File locks that tell you who you are waiting for: the one lock module.

Locks live in `locks/`, never inside what they protect, so deleting an env or
a build never deletes a held lock. An exclusive holder writes pid, host and
start time beside the lock (`<name>.holder`); a waiter prints "waiting for
pid N on host H" every few seconds, which answers the commonest question
about a stuck fleet node.

Four ways to hold a lock:
- `exclusive(path, what)`: one holder (a realise of one key, a build, a source tree);
  it yields the descriptor, which a child may inherit to keep the lock past its parent;
- `shared(path, what, first=None)`: many holders, kept out only by an exclusive
  one (installs sharing the package cache); `first` runs only when the lock could
  be had exclusively without waiting (cleanup that must see nobody else), then
  the hold becomes shared;
- `held(path)`: whether anybody holds it now (gc leaves what is in use);
- a lease (`leasefile.take_lease`, through `store.leases.take`): a shared hold as a
  bare file descriptor the caller may pass to a child (exec keeps it, fork
  shares it): held until the last process that has it exits, however it exits.

Every wait has a deadline, FDLENV_LOCK_TIMEOUT (`deadlines`, default an hour):
past it the waiter gives up with one transient failure naming the lock and its
holder (exit 1: a persist box re-dials later), never waits for ever.

Each is a plain `fcntl.flock`: released by the kernel when its holder dies,
even by kill -9, and free to import. The `filelock` package does the same on
Linux but pulls in asyncio (~80 ms) on the path that starts an install, so
fdlenv does not depend on it.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import time
from pathlib import Path

from .errors import Fail
from .progress import Ticker, say

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterator
    from typing import TextIO


def holder_file(path: Path) -> Path:
    """Where an exclusive holder of `path` writes who it is (a killed one leaves it)."""
    return path.with_name(path.name + ".holder")


def holder(path: Path) -> str:
    """Who holds `path` exclusively, as a waiter names it."""
    try:
        h = json.loads(holder_file(path).read_text())
        since = time.strftime("%H:%M:%S", time.localtime(h.get("since", 0)))
        return f"pid {h.get('pid')} on host {h.get('host')} (since {since})"
    except (OSError, ValueError, AttributeError):
        return "another process"


def _wait(f: TextIO, mode: int, path: Path, what: str, every: float, poll: float) -> None:
    """Take `mode` on the open file `f`, naming the holder while waiting, for FDLENV_LOCK_TIMEOUT
    seconds at most (then a transient `Fail`)."""
    ticker, end, limit = None, 0.0, 0.0
    while True:
        try:
            fcntl.flock(f, mode | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            if ticker is None:
                from .deadlines import LOCK_VAR, lock_timeout
                limit = lock_timeout()
                end = time.monotonic() + limit
                say(f"{what}: waiting for {holder(path)}")
                ticker = Ticker(lambda: f"{what}: waiting for {holder(path)}", every=every)
            elif time.monotonic() >= end:
                raise Fail.retry(f"{what}: {path} is still held by {holder(path)} after {limit:g} s "
                                 f"({LOCK_VAR}); retry later") from None
            ticker.tick()
            time.sleep(poll)


def _open(path: Path) -> TextIO:
    """The lock file, made when missing; read-only when it exists in a home this process may not
    write (a baked image, a read-only mount): flock needs no write, so a command that changes
    nothing still takes the lock there."""
    import errno

    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        return open(path, "a")
    except OSError as e:
        if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM) or not path.is_file():
            raise
        return open(path)


@contextlib.contextmanager
def exclusive(path: Path, what: str, every: float = 3.0, poll: float = 0.1) -> Iterator[int]:
    """Hold `path` alone for the block; `what` names the work in the waiting lines."""
    with _open(path) as f:
        _wait(f, fcntl.LOCK_EX, path, what, every, poll)
        note = holder_file(path)
        try:
            note.write_text(json.dumps({"pid": os.getpid(), "host": os.uname().nodename, "since": time.time()}))
            yield f.fileno()   # a child given this descriptor keeps the lock held until it exits
        finally:
            with contextlib.suppress(OSError):
                note.unlink()
            # No LOCK_UN: it would release the lock for a child sharing the descriptor too;
            # closing lets go once the last process holding it has.


@contextlib.contextmanager
def shared(path: Path, what: str, first: Callable[[], object] | None = None, every: float = 3.0,
           poll: float = 0.1) -> Iterator[None]:
    """Hold `path` beside other sharers; `first()` runs when nobody else holds it at all."""
    with _open(path) as f:
        try:
            if first is not None:
                try:
                    fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                except BlockingIOError:
                    pass
                else:
                    first()
            _wait(f, fcntl.LOCK_SH, path, what, every, poll)
            yield
        finally:
            fcntl.flock(f, fcntl.LOCK_UN)


def held(path: Path) -> bool:
    """Whether some process holds `path` now, shared or exclusively."""
    if not path.exists():
        return False
    with open(path) as f:     # read-only: a read-only home is asked too
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
