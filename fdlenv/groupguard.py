"""Children die with fdlenv, even when fdlenv is killed with -9.

fdlenv starts long-lived process groups: join's agent (and the rank children
it spawns), the probe, a build recipe. Each runs in its own session, so a
Ctrl-C or systemd's stop reaches fdlenv, which forwards it. A SIGKILL of
fdlenv runs no code, though: without more, the group would keep running,
holding GPUs and writing into a tree the next run reuses.

`guard(pgid)` starts a small watcher process beside the group. The kernel
tells the watcher when fdlenv dies (Linux's parent-death signal, set by the
watcher itself; if fdlenv is already gone by then it notices that instead),
and the watcher kills the whole group. `Guard.release()`, called once the
group has been waited for, stops the watcher without touching the group.
Elsewhere than Linux the watcher only covers what it can see: it checks its
parent every second.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

_WATCHER = r"""
import os, signal, sys, time
pgid, parent = int(sys.argv[1]), int(sys.argv[2])
def end(*_):
    try:
        os.killpg(pgid, signal.SIGKILL)
    except OSError:
        pass
    os._exit(0)
signal.signal(signal.SIGTERM, end)
try:
    import ctypes
    ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)   # PR_SET_PDEATHSIG
except Exception:
    pass
while True:   # the parent may have died before prctl: then nothing signals, so look
    if os.getppid() != parent:
        end()
    time.sleep(1.0)
"""


class Guard:
    """A watcher that kills process group `pgid` if this process dies first."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(pgid), str(os.getpid())],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                                      start_new_session=True)

    def release(self) -> None:
        """The group was waited for: stop the watcher, leave the group alone."""
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGKILL)
            except OSError:
                pass
        self._proc.wait()


def guard(pgid: int) -> Guard:
    return Guard(pgid)
