"""How long fdlenv waits: the deadlines of a request and of a lock wait, each a setting.

Why one module: a server that trickles its headers, or a holder that never lets go,
must not keep a command (and every lock it holds, so every other caller on the box)
waiting for ever, and each bound is a setting a slow link may need to widen. Both
are read here, the first time they are needed, from the environment:
- FDLENV_REQUEST_TIMEOUT (seconds, default 120): one request's connect, headers and,
  for a page or metadata file, body together (`netread`); a download's body is held
  to the stall rule instead (its time grows with its size);
- FDLENV_LOCK_TIMEOUT (seconds, default 3600): one wait for a lock another process
  holds (`flocks`); a realise of a large env or a build may hold one for long;
- FDLENV_RESOLVE_DEADLINE (seconds, default 300) and FDLENV_RESOLVE_ROUNDS (default 2000):
  one lock's version walk, all of it (`index.conflicts`): a set of requirements that must
  backtrack through many versions ends there, exit 2, naming the variable that widens it.
A value that is not a positive number (a whole one for the rounds) is one `error:` line naming the variable.
Neither costs an import: the re-dial path reads them only when it waits.

And how the main thread waits: in slices (`join`, `until_exited`). A stop signal (SIGTERM
from a service manager, `kill`) is process-directed: the kernel hands it to any thread, and
Python runs the handler only when the main thread next runs Python code. A main thread in
one unbounded `Thread.join` or `waitpid` (a download held by a slow mirror, a long install,
join's agent) would not see it until that wait ended: `systemctl stop` would hang until its
SIGKILL. A slice ends the wait every SLICE seconds, so a handler runs within one slice
wherever the signal landed; an exit is still seen at once (a pidfd, not a poll).
A future's result (`result`) is waited for in slices too: the resolver's main thread waits on
page reads, and a stop handed to a reader thread must not wait for the page.
A pool of reader threads (`threads`) is left, not waited for, when the main thread leaves
it by an exception: a stop (or a failure) must not wait for requests still held by a slow
index; the process's exit ends them (the CLI leaves at once after a stop).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

from .errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    import threading
    from collections.abc import Iterator
    from concurrent.futures import Future, ThreadPoolExecutor
    from typing import TypeVar

    T = TypeVar("T")

REQUEST_VAR, REQUEST_DEFAULT = "FDLENV_REQUEST_TIMEOUT", 120.0
SLICE = 0.25   # seconds: the longest the main thread waits before a stop signal's handler may run
LOCK_VAR, LOCK_DEFAULT = "FDLENV_LOCK_TIMEOUT", 3600.0
RESOLVE_VAR, RESOLVE_DEFAULT = "FDLENV_RESOLVE_DEADLINE", 300.0
ROUNDS_VAR, ROUNDS_DEFAULT, ROUNDS_MOST = "FDLENV_RESOLVE_ROUNDS", 2000, 10**7


def _seconds(var: str, default: float) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise Fail.permanent(f"{var}={raw!r}: accepted: a positive number of seconds (default {default:g})")
    return value


def request_timeout() -> float:
    """Seconds one request may take, connect to last byte of a page (FDLENV_REQUEST_TIMEOUT)."""
    return _seconds(REQUEST_VAR, REQUEST_DEFAULT)


def lock_timeout() -> float:
    """Seconds one lock wait may take (FDLENV_LOCK_TIMEOUT)."""
    return _seconds(LOCK_VAR, LOCK_DEFAULT)


def resolve_deadline() -> float:
    """Seconds one lock's version walk may take (FDLENV_RESOLVE_DEADLINE)."""
    return _seconds(RESOLVE_VAR, RESOLVE_DEFAULT)


def resolve_rounds() -> int:
    """Rounds (each pins one project or backtracks) one lock's version walk may take (FDLENV_RESOLVE_ROUNDS)."""
    raw = os.environ.get(ROUNDS_VAR, "").strip()
    if not raw:
        return ROUNDS_DEFAULT
    if not (raw.isascii() and raw.isdigit() and len(raw) <= 8 and 0 < int(raw) <= ROUNDS_MOST):
        raise Fail.permanent(f"{ROUNDS_VAR}={raw[:40]!r}: accepted: a whole number of rounds from 1 to "
                             f"{ROUNDS_MOST} (default {ROUNDS_DEFAULT})")
    return int(raw)


def join(thread: threading.Thread) -> None:
    """`thread.join()`, in slices (see the module docstring)."""
    while thread.is_alive():
        thread.join(SLICE)


def until_exited(pid: int) -> None:
    """Return once the child `pid` has exited, without reaping it (the caller's `wait` then
    returns at once): in slices, woken by the exit itself through a pidfd. Where there is no
    pidfd (an old kernel, a child reaped already) it returns at once: the caller's blocking
    wait is all there is."""
    import select

    try:
        fd = os.pidfd_open(pid)
    except (AttributeError, OSError):
        return
    try:
        while not select.select([fd], [], [], SLICE)[0]:
            pass
    finally:
        os.close(fd)


@contextmanager
def threads(workers: int, name: str) -> Iterator[ThreadPoolExecutor]:
    """`ThreadPoolExecutor(workers)` as a context: waited for when the block ends normally, left
    (queued work cancelled, running work not waited for) when it ends by an exception, where
    the executor's own `with` would join every thread first (see the module docstring)."""
    from concurrent.futures import ThreadPoolExecutor

    pool = ThreadPoolExecutor(workers, thread_name_prefix=name)
    try:
        yield pool
    except BaseException:
        pool.shutdown(wait=False, cancel_futures=True)
        raise
    pool.shutdown(wait=True)


def result(fut: Future[T]) -> T:
    """`fut.result()`, waited for in slices (see the module docstring). Not `result(SLICE)` in a
    loop: the future's own exception may be a TimeoutError (a socket's)."""
    from concurrent.futures import wait

    while not fut.done():
        wait((fut,), SLICE)
    return fut.result()
