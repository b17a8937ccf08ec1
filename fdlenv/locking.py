"""Exclusive file locks that tell you who you are waiting for.

Locks live in `locks/`, never inside what they protect, so deleting an env or
a build never deletes a held lock. The holder writes pid, host and start time
beside the lock (`<name>.holder`); a waiter prints "waiting for pid N on host
H" every few seconds, which answers the commonest question about a stuck
fleet node. The lock is a plain `fcntl.flock` (what filelock does on Linux
too): released by the kernel when its holder dies, even by kill -9, and free
to import (filelock 3.32 pulls in asyncio, ~80 ms, on the path that starts
an install).
"""

from __future__ import annotations

import contextlib
import fcntl
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
def exclusive(path: Path, what: str, every: float = 3.0, poll: float = 0.1):
    """Hold `path` exclusively for the block; `what` names the work in progress lines."""
    path.parent.mkdir(parents=True, exist_ok=True)
    ticker = Ticker(lambda: f"{what}: waiting for {_holder(path)}", every=every)
    with open(path, "a") as f:
        waited = False
        while True:
            try:
                fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if not waited:
                    say(f"{what}: waiting for {_holder(path)}")
                    waited = True
                ticker.tick()
                time.sleep(poll)
        holder = path.with_name(path.name + ".holder")
        try:
            holder.write_text(json.dumps({"pid": os.getpid(), "host": socket.gethostname(), "since": time.time()}))
            yield
        finally:
            with contextlib.suppress(OSError):
                holder.unlink()
            fcntl.flock(f, fcntl.LOCK_UN)


def is_held(path: Path) -> bool:
    """Whether some process holds `path` now (gc leaves what a running realise uses)."""
    if not path.exists():
        return False
    with open(path, "a") as f:
        try:
            fcntl.flock(f, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            return True
        fcntl.flock(f, fcntl.LOCK_UN)
        return False
