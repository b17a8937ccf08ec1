"""Spawning the agent in its own process group, and what a stop signal does.

The reference installs no handlers: killing `fdl join` alone orphans the agent
and its tunnel (as flodl's `fdl join` does). Here the agent (and the probe) run in
a fresh session, so its rank children share one process group we can signal as
a whole, and a terminal Ctrl-C reaches it exactly once — through us.

`Stopper` owns SIGTERM/SIGINT for the loop's lifetime:
- a child is registered (agent or probe) -> the signal goes to its group; the
  loop notices `stopper.signum` after the child exits and does not re-dial;
- nothing is registered -> `Interrupted` is raised in the main thread, which
  unwinds the attempt (a realise's staging removed, the tunnel closed) — unless a
  spawn is in progress, when it is deferred and delivered to the child as soon as it
  is registered (`spawning`; a spawn that made no child raises it on the way out);
- during the persist backoff -> `sleep()` wakes and reports the stop.
Only the first signal stops: a second one while the attempt unwinds is forwarded to a
registered child, never raised again (it would cut the cleanup short).

`Interrupted` is a KeyboardInterrupt, not an Exception: the steps a stop lands in
(prepare's `except Exception` that names a failure by its step, paramiko's and the
tunnel's handlers that name a library error) must let it through untouched, while the
`except BaseException` cleanups (staging, downloads, the tunnel's hops) still run.
The loop turns it into one `error: stopped by SIGTERM ...` line and exit 130, as
`env realize` does; the waits of the main thread are in slices (`base.deadlines`), so
a signal the kernel hands to another thread is still seen within one slice.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading
import time
from contextlib import contextmanager
from collections.abc import Callable, Iterator, Mapping
from types import FrameType

from ..base.deadlines import SLICE, until_exited
from .runnable import not_runnable

STOP_SIGNALS = (signal.SIGTERM, signal.SIGINT)
# What `signal.signal` hands back, the handler it replaced: a function, SIG_DFL/SIG_IGN, or None
# (one installed outside Python)
_Handler = Callable[[int, FrameType | None], object] | int | signal.Handlers | None


class Interrupted(KeyboardInterrupt):
    """A stop signal (SIGTERM, SIGINT) raised in the main thread; `signum` says which."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = signum


def _cut_requests() -> None:
    """Every index request in flight ends now (`netread.stop_all`), where any was made."""
    netread = sys.modules.get("fdlenv.base.netread")
    if netread is not None:
        netread.stop_all()


def signal_group(pid: int, signum: int) -> bool:
    """Signal the process group led by `pid`; False if it is already gone."""
    try:
        os.killpg(pid, signum)
        return True
    except (ProcessLookupError, PermissionError):
        return False


class Stopper:
    def __init__(self) -> None:
        self.signum: int | None = None
        self._child: subprocess.Popen[bytes] | None = None
        self._defer = False
        self._wake = threading.Event()
        self._old: dict[int, _Handler] = {}

    # -- installation (main thread only; elsewhere it is a no-op)
    def install(self) -> Stopper:
        if threading.current_thread() is threading.main_thread():
            for s in STOP_SIGNALS:
                self._old[s] = signal.signal(s, self._handle)
        return self

    def restore(self) -> None:
        for s, h in self._old.items():
            signal.signal(s, h)
        self._old.clear()

    def __enter__(self) -> Stopper:
        return self.install()

    def __exit__(self, *exc: object) -> None:
        self.restore()

    @property
    def stopped(self) -> bool:
        return self.signum is not None

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        first = self.signum is None
        if first:
            self.signum = signum
        self._wake.set()
        child = self._child
        if child is not None:
            signal_group(child.pid, signum)
            return
        if first and not self._defer:
            _cut_requests()
            raise Interrupted(signum)

    def check(self) -> None:
        """Raise `Interrupted` if a stop came while it could not be raised (a deferred spawn,
        a child that had it forwarded): what the attempt does next must not start."""
        if self.signum is not None:
            raise Interrupted(self.signum)

    # -- children
    def watch(self, proc: subprocess.Popen[bytes] | None) -> None:
        """Register (or with None, forget) the child whose group gets the signals."""
        self._child = proc
        if proc is not None and self.signum is not None:
            signal_group(proc.pid, self.signum)

    @contextmanager
    def spawning(self) -> Iterator[None]:
        """Defer `Interrupted` while a child is being created and registered; a stop that came
        meanwhile with no child left to forward it to is raised on the way out."""
        self._defer = True
        try:
            yield
        finally:
            self._defer = False
        if self.signum is not None and self._child is None:
            raise Interrupted(self.signum)

    def sleep(self, seconds: float) -> None:
        """The persist backoff; a stop signal ends it early (and `stopped` says so). In slices:
        a signal the kernel hands to another thread runs its handler only once the main thread
        runs Python code again (`base.deadlines`)."""
        self._defer = True
        try:
            end = time.monotonic() + seconds
            while self.signum is None and (left := end - time.monotonic()) > 0:
                self._wake.wait(min(SLICE, left))
        finally:
            self._defer = False


def spawn_agent(argv: list[str], *, cwd: str | None, env: Mapping[str, str],
                stopper: Stopper | None = None, keep_fds: tuple[int, ...] = ()) -> subprocess.Popen[bytes]:
    """Start the agent: own session/process group, stdin at end-of-file, output inherited,
    `keep_fds` (the env's lease) passed down; `groupguard.spawn` starts it only once a watcher
    will kill the group if fdlenv dies first (`proc.guard`, released by `wait_agent`)."""
    from ..base.groupguard import spawn

    def start() -> subprocess.Popen[bytes]:
        return spawn(argv, cwd=cwd, env=dict(env), pass_fds=keep_fds)
    try:
        if stopper is None:
            return start()
        with stopper.spawning():
            proc = start()
            stopper.watch(proc)
        return proc
    except OSError as e:   # the exec's own errno (the gate reports it): permanent, named by its cause
        raise not_runnable(argv[0], e, cwd=cwd, path_var=env.get("PATH")) from None


def wait_agent(proc: subprocess.Popen[bytes], stopper: Stopper | None = None) -> int:
    """Wait for the agent; then sweep what is left of its group. Returns the raw code."""
    try:
        while True:
            try:
                until_exited(proc.pid)   # in slices: a stop signal landing on a tunnel thread is still forwarded
                code = proc.wait()
                break
            except Interrupted:  # pragma: no cover - handler forwards instead of raising
                continue
    finally:
        if stopper is not None:
            stopper.watch(None)
    # Rank children the agent left behind would hold GPUs: stop them with it.
    signal_group(proc.pid, signal.SIGTERM)
    guard = getattr(proc, "guard", None)
    if guard is not None:
        guard.release()
    return code


def exit_code(raw: int) -> int:
    """The agent's own code; death by a signal reads as 1 (as flodl's `fdl join` does)."""
    return 1 if raw < 0 else raw
