"""Exclusive file locks that tell you who you are waiting for.

Locks live in `locks/`, never inside what they protect, so deleting an env or
a build never deletes a held lock. The holder writes pid, host and start time
beside the lock (`<name>.holder`); a waiter prints "waiting for pid N on host
H" every few seconds, which answers the commonest question about a stuck
fleet node. filelock (85 ms to import) is loaded only here, and only callers
that found work to do get here.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from pathlib import Path

from .progress import Ticker, say


def _holder(path: Path) -> str:
    try:
        h = json.loads(path.with_name(path.name + ".holder").read_text())
        since = time.strftime("%H:%M:%S", time.localtime(h.get("since", 0)))
        return f"pid {h.get('pid')} on host {h.get('host')} (since {since})"
    except (OSError, ValueError):
        return "another process"


@contextlib.contextmanager
def exclusive(path: Path, what: str, every: float = 3.0):
    """Hold `path` exclusively for the block; `what` names the work in progress lines."""
    from filelock import FileLock, Timeout

    path.parent.mkdir(parents=True, exist_ok=True)
    lock = FileLock(str(path))
    ticker = Ticker(lambda: f"{what}: waiting for {_holder(path)}", every=every)
    waited = False
    while True:
        try:
            lock.acquire(timeout=0.2)
            break
        except Timeout:
            if not waited:
                say(f"{what}: waiting for {_holder(path)}")
                waited = True
            ticker.tick()
    holder = path.with_name(path.name + ".holder")
    try:
        holder.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
        yield
    finally:
        with contextlib.suppress(OSError):
            holder.unlink()
        lock.release()
