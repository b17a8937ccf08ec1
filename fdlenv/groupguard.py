"""Children die with fdlenv, even when fdlenv is killed with -9.

fdlenv starts long-lived process groups: join's agent (and the rank children
it spawns), a build recipe. Each runs in its own session, so fdlenv decides
what reaches it (it forwards SIGTERM and Ctrl-C). A SIGKILL of fdlenv runs no
code, though: without more, the group would keep running, holding GPUs and
writing into a tree the next run reuses.

`spawn(argv, ...)` starts the command behind a gate and a watcher:
1. the command's session starts as `sh` blocked on a pipe (the gate);
2. the watcher starts beside it, sets the kernel's parent-death signal on
   itself (Linux; it also looks at its parent every second, which covers the
   instant before that and other systems) and says it is ready;
3. only then does fdlenv open the gate and `sh` execs the command (same pid,
   same group). If fdlenv dies before that, the gate reads end-of-file and
   the command never runs.
When fdlenv dies, the watcher kills the whole group. `Guard.release()`, once
the group has been waited for, stops the watcher without touching the group.
"""

from __future__ import annotations

import os
import shutil
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
if os.getppid() != parent:
    end()
sys.stdout.write("ready\n")
sys.stdout.flush()
while True:
    if os.getppid() != parent:
        end()
    time.sleep(1.0)
"""

# Reads one line from the gate pipe; runs the command only on "go" (end-of-file: fdlenv died).
_GATE = 'IFS= read -r go && [ "$go" = go ] && exec "$@"'


class Guard:
    """A watcher that kills process group `pgid` if this process dies first."""

    def __init__(self, pgid: int):
        self.pgid = pgid
        self._proc = subprocess.Popen([sys.executable, "-I", "-S", "-c", _WATCHER, str(pgid), str(os.getpid())],
                                      stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                      start_new_session=True)
        out = self._proc.stdout
        assert out is not None
        self._out = out
        out.readline()   # "ready": it is told if we die from here on

    def release(self) -> None:
        """The group was waited for: stop the watcher, leave the group alone."""
        if self._proc.poll() is None:
            try:
                self._proc.send_signal(signal.SIGKILL)
            except OSError:
                pass
        self._proc.wait()
        self._out.close()


def _check_runnable(argv: list[str], cwd, env) -> None:
    """What exec would refuse, as the OSError Popen would raise (the gate's sh hides it)."""
    prog = argv[0]
    if "/" in prog:
        path = prog if os.path.isabs(prog) or cwd is None else os.path.join(cwd, prog)
        if not os.path.exists(path):
            raise FileNotFoundError(2, "No such file or directory", prog)
        if os.path.isdir(path) or not os.access(path, os.X_OK):
            raise PermissionError(13, "Permission denied", prog)
    elif shutil.which(prog, path=(env or os.environ).get("PATH")) is None:
        raise FileNotFoundError(2, "No such file or directory", prog)


class Guarded(subprocess.Popen):
    """A child started by `spawn`: `guard` kills its group if fdlenv dies first."""

    guard: Guard


def spawn(argv: list[str], *, cwd=None, env=None, **popen) -> Guarded:
    """Start `argv` in a session of its own, guarded; `proc.guard` is its Guard."""
    _check_runnable(argv, cwd, env)
    proc = Guarded(["sh", "-c", _GATE, "sh", *argv], cwd=cwd, env=env, stdin=subprocess.PIPE,
                   start_new_session=True, **popen)
    try:
        proc.guard = Guard(proc.pid)
        gate = proc.stdin
        assert gate is not None
        gate.write(b"go\n")
        gate.close()
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    return proc
