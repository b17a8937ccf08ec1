"""The model-signature probe: ask the binary which model it builds, before dialing.

Admission can then refuse a box that builds a different model at the door,
costing only this box's dial (as flodl's `fdl join` does). It runs before the tunnel,
because admission starts a window deadline. Every outcome of a binary that ran is
non-fatal: a failed probe joins without a signature, and formation still checks.
A binary that cannot be executed at all is the probe's one fatal fact: its
OSError (the exec's own errno) rides the result, and the attempt raises it as the
permanent spawn failure (`runnable.not_runnable`) before a tunnel is opened.

The binary runs with `FLODL_INTERNAL_MODEL_SIG_PROBE=1` (and without the agent
spec), stdout piped and scanned for `flodl-model-sig: <64 hex>`; the last line
wins. It runs in its own process group so a timeout kills grandchildren too
and the reader never blocks on a pipe they still hold. The outcome, failures
included, is cached per loop keyed by the binary's identity (path, size, mtime)
and the args: a rebuild or a re-publish changes the key.
"""

from __future__ import annotations

import collections
import json
import os
import shlex
import signal
import subprocess
import threading
import time
from dataclasses import dataclass, field
from collections.abc import Callable, Mapping

from ..base import hashing
from ..base.progress import say as _say

ENV_PROBE = "FLODL_INTERNAL_MODEL_SIG_PROBE"
LINE_PREFIX = "flodl-model-sig: "
MODEL_SIG_PROBE_TIMEOUT = 120.0
PROBE_TAIL_LINES = 8
POLL = 0.05

OK, SKIPPED, SPAWN_FAILED, TIMEOUT, NONZERO, NO_SIG = (
    "ok", "skipped", "spawn-failed", "timeout", "nonzero", "no-sig")


@dataclass(frozen=True)
class ProbeResult:
    outcome: str                     # one of the constants above
    sig: str | None = None           # 64 lowercase hex digits when outcome == OK
    code: int | None = None
    tail: tuple[str, ...] = ()       # the last stdout lines, as evidence
    cached: bool = False
    error: OSError | None = None     # why the exec failed, when outcome == SPAWN_FAILED


def is_valid_sig(s: str) -> bool:
    return len(s) == 64 and all(c in "0123456789abcdefABCDEF" for c in s)


def probe_key(bin_path: str, args: list[str] | tuple[str, ...]) -> str | None:
    """Binary identity + args; None when the binary cannot be stat'ed (probe uncached)."""
    try:
        st = os.stat(bin_path)
    except OSError:
        return None
    blob = json.dumps([os.path.abspath(bin_path), st.st_size, st.st_mtime_ns, list(args)])
    return hashing.of_text(blob)


@dataclass
class ProbeCache:
    """One slot, living as long as the attempt loop (as the reference)."""
    key: str | None = None
    result: ProbeResult | None = None

    def get(self, key: str | None) -> ProbeResult | None:
        if key is not None and key == self.key and self.result is not None:
            return self.result
        return None

    def put(self, key: str | None, result: ProbeResult) -> None:
        if key is not None:
            self.key, self.result = key, result


def _kill_group(proc: subprocess.Popen[bytes]) -> None:
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except OSError:
        pass


def run_probe(bin_path: str, args: list[str] | tuple[str, ...], *, cwd: str | None,
              env: Mapping[str, str], timeout: float = MODEL_SIG_PROBE_TIMEOUT,
              say: Callable[[str], None] = _say,
              on_spawn: Callable[[subprocess.Popen[bytes] | None], None] | None = None,
              stopped: Callable[[], bool] | None = None) -> ProbeResult:
    """Run the binary once in probe mode and classify what happened; a probe ended by a stop
    (`stopped()`: the signal was forwarded to it) is said by the caller, not warned about here."""
    from .spec import ENV_AGENT_JSON

    penv = dict(env)
    penv.pop(ENV_AGENT_JSON, None)
    penv[ENV_PROBE] = "1"
    argv = [bin_path, *args]
    say("probing the binary for its model signature (--no-sig-probe skips this)")
    try:
        proc = subprocess.Popen(argv, cwd=cwd, env=penv, stdin=subprocess.DEVNULL,
                                stdout=subprocess.PIPE, start_new_session=True)
    except OSError as e:   # the binary cannot be executed: the attempt stops on it (permanent)
        return ProbeResult(SPAWN_FAILED, error=e)
    if on_spawn:
        on_spawn(proc)
    tail: collections.deque[str] = collections.deque(maxlen=PROBE_TAIL_LINES)
    found: list[str] = []

    def reader() -> None:
        assert proc.stdout is not None
        for raw in proc.stdout:
            line = raw.decode("utf-8", "replace").rstrip("\r\n")
            tail.append(line)
            if line.startswith(LINE_PREFIX):
                found.append(line[len(LINE_PREFIX):].strip())

    t = threading.Thread(target=reader, name="sig-probe-reader", daemon=True)
    t.start()
    deadline = time.monotonic() + timeout
    code = None
    try:
        while True:
            code = proc.poll()
            if code is not None or time.monotonic() >= deadline:
                break
            time.sleep(POLL)
    finally:
        if code is None:
            _kill_group(proc)
            proc.wait()
        if on_spawn:
            on_spawn(None)
    t.join(timeout=2.0)
    if t.is_alive() and proc.stdout is not None:  # a grandchild escaped the group and holds the pipe
        proc.stdout.close()
    lines = tuple(tail)
    if stopped is not None and stopped():
        return ProbeResult(NONZERO, code=code, tail=lines)
    if code is None:
        say(f"the signature probe was killed after {timeout:g}s (a binary predating the probe "
            "runs its whole main); joining without a signature. --no-sig-probe or "
            "join.sig_probe: false silences this")
        return ProbeResult(TIMEOUT, tail=lines)
    sig = found[-1] if found else None
    if code != 0:
        say(f"WARNING: the signature probe exited with code {code}: {shlex.join(argv)}. "
            "The ranks re-enter this binary with the same arguments after admission, so "
            "formation will likely fail the same way")
        return ProbeResult(NONZERO, code=code, tail=lines)
    if sig is not None and is_valid_sig(sig):
        return ProbeResult(OK, sig=sig.lower(), code=0, tail=lines)
    shown = "\n".join(f"    {ln}" for ln in lines) or "    (no output)"
    say("the signature probe exited 0 without a valid `flodl-model-sig:` line; joining "
        "without a signature. Either the binary's own pre-run gate exited (let it step aside "
        "when flodl::distributed::launcher::model_sig_probe_requested() is true), or the "
        "binary predates the probe, or it failed before the trainer (e.g. an unwritable "
        f"dir). Last lines of the probe's output:\n{shown}")
    return ProbeResult(NO_SIG, code=0, tail=lines)


@dataclass
class Prober:
    """The probe step of an attempt: enabled check, empty-args skip, cache."""
    enabled: bool = True
    timeout: float = MODEL_SIG_PROBE_TIMEOUT
    cache: ProbeCache = field(default_factory=ProbeCache)
    say: Callable[[str], None] = _say
    runs: int = 0   # how many times the binary really ran (tests read this)

    def __call__(self, bin_path: str, args: list[str] | tuple[str, ...], *, cwd: str | None,
                 env: Mapping[str, str],
                 on_spawn: Callable[[subprocess.Popen[bytes] | None], None] | None = None,
                 stopped: Callable[[], bool] | None = None) -> ProbeResult:
        if not self.enabled:
            return ProbeResult(SKIPPED)
        if not args:
            self.say("no arguments known before the dial (no manifest args, no `--` tail, "
                     "no join.args): the signature probe is skipped; formation still checks")
            return ProbeResult(SKIPPED)
        key = probe_key(bin_path, args)
        hit = self.cache.get(key)
        if hit is not None:
            return ProbeResult(hit.outcome, hit.sig, hit.code, hit.tail, cached=True, error=hit.error)
        self.runs += 1
        res = run_probe(bin_path, args, cwd=cwd, env=env, timeout=self.timeout, say=self.say,
                        on_spawn=on_spawn, stopped=stopped)
        if stopped is None or not stopped():   # a stopped probe says nothing of the binary
            self.cache.put(key, res)
        return res
