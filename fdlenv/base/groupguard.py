"""Children die with fdlenv, even when fdlenv is killed with -9.

fdlenv starts long-lived process groups: join's agent (and the rank children
it spawns), a build recipe. Each runs in its own session, so fdlenv decides
what reaches it (it forwards SIGTERM and Ctrl-C). A SIGKILL of fdlenv runs no
code, though: without more, the group would keep running, holding GPUs and
writing into a tree the next run reuses.

`spawn(argv, ...)` starts the command behind a gate and a watcher:
1. the command's session starts as a small Python gate blocked on a pipe;
2. the watcher starts beside it, sets the kernel's parent-death signal on
   itself (Linux; it also looks at its parent every second, which covers the
   instant before that and other systems) and says it is ready;
3. only then does fdlenv open the gate and the gate execs the command (same
   pid, same group). If fdlenv dies before that, the gate reads end-of-file
   and the command never runs. An exec that fails comes back as its own errno
   (through a close-on-exec pipe, as subprocess does it): `spawn` raises that
   OSError, never a shell's 126/127 that would read as the command's exit code.
When fdlenv dies, the watcher kills the whole group. `Guard.release()`, once
the group has been waited for, stops the watcher without touching the group.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

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

# Reads "go" from the gate pipe (end-of-file: fdlenv died, the command never runs), then execs
# the command; a failed exec writes its errno to the report pipe, closed by a successful one.
# Python's start-up coerces a C locale into LC_CTYPE=C.UTF-8 (PEP 538): the command gets the
# LC_CTYPE it was given ("-": none), not the gate's.
_GATE = r"""
import os, sys
report, lc = int(sys.argv[1]), sys.argv[2]
if lc == "-":
    os.environ.pop("LC_CTYPE", None)
else:
    os.environ["LC_CTYPE"] = lc[1:]
if os.read(0, 3) != b"go\n":
    os._exit(1)
os.set_inheritable(report, False)
try:
    os.execvp(sys.argv[3], sys.argv[3:])
except OSError as e:
    os.write(report, str(e.errno).encode())
os._exit(127)
"""


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


class Guarded(subprocess.Popen[bytes]):
    """A child started by `spawn`: `guard` kills its group if fdlenv dies first."""

    guard: Guard


def spawn(argv: list[str], *, cwd: str | os.PathLike[str] | None = None, env: Mapping[str, str] | None = None,
          **popen: Any) -> Guarded:
    """Start `argv` in a session of its own, guarded; `proc.guard` is its Guard."""
    given = os.environ if env is None else env
    lc = "=" + given["LC_CTYPE"] if "LC_CTYPE" in given else "-"
    report, w = os.pipe()
    try:
        proc = Guarded([sys.executable, "-I", "-S", "-c", _GATE, str(w), lc, *argv], cwd=cwd, env=env,
                       stdin=subprocess.PIPE, start_new_session=True,
                       pass_fds=(*popen.pop("pass_fds", ()), w), **popen)
    except BaseException:
        os.close(report)
        raise
    finally:
        os.close(w)
    try:
        with os.fdopen(report, "rb") as f:
            proc.guard = Guard(proc.pid)
            gate = proc.stdin
            assert gate is not None
            gate.write(b"go\n")
            gate.close()
            failed = f.read()   # end-of-file: the exec happened
    except BaseException:
        proc.kill()
        proc.wait()
        raise
    if failed:
        proc.wait()
        proc.guard.release()
        code = int(failed)
        raise OSError(code, os.strerror(code), argv[0])
    return proc
