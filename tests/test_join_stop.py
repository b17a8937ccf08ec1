"""A stop (SIGTERM, SIGINT) to `fdlenv join` at any moment: 130, one `error: stopped by ...` line.

systemd stops a unit with SIGTERM, a person with Ctrl-C. Whatever join is doing, the stop
must end it at once (the unit's stop timeout is 90 s), its children with it, nothing
half-written left, and exit 130 (neither transient nor permanent: the unit reads it as a
stop). Each moment is reached with a barrier, never a sleep: a wheel's body or an index page
held by the loopback PyTorch-shaped index until the test has sent the signal, an ssh server
that accepts and never answers, fdlenv's own "re-dialing" line, the marker files the
stand-in agent writes. The real CLI runs as a child process; each test prints the time from
the signal to join's exit (`pytest -s` shows them).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from test_join_loop import _gone

pytestmark = pytest.mark.slow

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
GPU = json.dumps([{"vendor": "nvidia", "arch": "9.0", "vram_mb": 81559, "name": "NVIDIA H100 80GB HBM3"}])
SIGNALS = [signal.SIGTERM, signal.SIGINT]
ONCE_AND_PERSIST = pytest.mark.parametrize("persist", [False, True], ids=["once", "persist"])
WITHIN = 1.0   # seconds from the signal to join's exit
BY_SIGNAL = pytest.mark.parametrize("signum", SIGNALS, ids=["SIGTERM", "SIGINT"])


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


class Stall:
    """Hold every request whose path `matches` (after it arrived: `arrived` is the barrier)
    until `release` is set; the index's own handler answers everything else and afterwards."""

    def __init__(self, idx, matches):
        self.idx, self.matches = idx, matches
        self.arrived, self.release = threading.Event(), threading.Event()
        self.base = idx.server.RequestHandlerClass
        stall = self

        class Held(self.base):   # type: ignore[misc, valid-type]
            def handle(self):
                try:
                    super().handle()
                except OSError:       # the stopped join's end is gone: nothing to answer
                    pass

            def send_head(self):
                if self.command == "GET" and stall.matches(self.path):
                    stall.arrived.set()
                    stall.release.wait(60)
                return super().send_head()
        idx.server.RequestHandlerClass = Held

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.release.set()
        self.idx.server.RequestHandlerClass = self.base


def join(tmp_path, *args, persist=False, agent_mode="exit"):
    """The real CLI, `fdlenv join` on a one-GPU box with the stand-in agent; stderr piped."""
    (tmp_path / "work").mkdir(exist_ok=True)
    env = {**os.environ, "FLODL_TESTING_GPU_JSON": GPU, "HOME": str(tmp_path)}
    cmd = [sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe",
           "--home", str(tmp_path / "home"), *args, *(["--persist"] if persist else []),
           "--", STANDIN, str(tmp_path / "out"), "0", agent_mode]
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path / "work",
                            env=env)


def children(pid: int) -> list[int]:
    """The live children of `pid` (every thread's), read from /proc."""
    out: list[int] = []
    for task in os.listdir(f"/proc/{pid}/task"):
        try:
            out += [int(c) for c in Path(f"/proc/{pid}/task/{task}/children").read_text().split()]
        except OSError:
            pass
    return out


def stop(proc, signum, moment: str, to_thread: bool = False) -> tuple[str, float]:
    """Send `signum` now (`to_thread`: to a thread that is not the main one, as the kernel may
    hand a process-directed signal to any); join's remaining stderr and the seconds from the
    signal to its exit."""
    from test_sigterm_realise import _to_another_thread

    kids = children(proc.pid)
    t0 = time.monotonic()
    if to_thread:
        _to_another_thread(proc.pid, signum)
    else:
        proc.send_signal(signum)
    try:
        rest = proc.communicate(timeout=20)[1]   # the held request would hold it for 60 s, a re-dial wait 5 s
    finally:
        if proc.poll() is None:
            proc.kill()
    took = time.monotonic() - t0
    print(f"stop latency, {signal.Signals(signum).name} {moment}: exit {proc.returncode} in {took:.3f} s")
    assert all(_gone(k) for k in kids), f"children left: {kids}"
    # The contract (a service manager's stop), not a speed measure: a few ms here, against the
    # 1.5 s a held download's thread was given to notice, or the held request's 60 s
    assert took < WITHIN, f"{took:.3f} s from the signal to the exit ({moment})\n{rest}"
    return rest, took


def the_one_error(text: str, agent_ran: bool = False) -> str:
    """The one `error:` line; no traceback of fdlenv's (a Python stand-in agent stopped by
    SIGINT prints its own KeyboardInterrupt: the agent's output, not fdlenv's)."""
    errors = [ln for ln in text.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1, text
    assert "bug in fdlenv" not in text and "/fdlenv/" not in text, text
    assert agent_ran or "Traceback" not in text, text
    return errors[0]


def read_until(proc, pred) -> str:
    """stderr up to and including the first line `pred` accepts (a barrier)."""
    seen = []
    assert proc.stderr is not None
    for line in proc.stderr:
        seen.append(line)
        if pred(line):
            return "".join(seen)
    raise AssertionError(f"join ended ({proc.wait()}) before the line: {''.join(seen)}")


def leftovers(folder: Path, pattern: str) -> list[Path]:
    return sorted(folder.glob(pattern)) if folder.is_dir() else []


def mirrors(index) -> tuple[str, ...]:
    return ("--libtorch", "cpu", "--mirror", f"pytorch={index.url}", "--mirror", f"pypi={index.simple}")


@BY_SIGNAL
@ONCE_AND_PERSIST
def test_a_stop_mid_download_ends_join_at_once_with_130_and_no_staging_left(tmp_path, index, signum, persist):
    """The on-demand lock done, the realise downloading: the torch wheel's body is held by the
    index until the signal is sent. Before this, the stop was 'a bug in fdlenv (Interrupted ...)',
    exit 1, and the held download kept the process 13-60 s."""
    with Stall(index, lambda p: p.endswith(".whl") and "/torch-" in p) as held:
        proc = join(tmp_path, *mirrors(index), persist=persist)
        assert held.arrived.wait(60), proc.communicate(timeout=30)
        rest, _ = stop(proc, signum, f"mid-download ({'persist' if persist else 'once'})")
    name = signal.Signals(signum).name
    assert proc.returncode == 130, rest
    assert the_one_error(rest) == (f"error: stopped by {name} during preparation; nothing half-written was kept; "
                                   "not re-dialing")
    home = tmp_path / "home"
    assert not leftovers(home / "staging", "*") and not leftovers(home / "envs", "cpu-*")
    assert not leftovers(home / "pkgs", ".whl-*")     # no half-extracted wheel
    assert not (tmp_path / "out").exists()          # the agent never ran


@BY_SIGNAL
def test_a_stop_while_the_lock_is_resolved_on_demand_ends_join_with_130_and_writes_no_lock(tmp_path, index, signum):
    """The on-demand lock reads torch's page: the page is held until the signal is sent."""
    with Stall(index, lambda p: p.rstrip("/").endswith("/cpu/torch")) as held:
        proc = join(tmp_path, *mirrors(index), persist=True)
        assert held.arrived.wait(60), proc.communicate(timeout=30)
        rest, _ = stop(proc, signum, "mid-lock")
    assert proc.returncode == 130, rest
    assert the_one_error(rest).startswith(f"error: stopped by {signal.Signals(signum).name} during preparation")
    lockfiles = tmp_path / "home" / "lockfiles"
    assert not (lockfiles.is_dir() and [p for p in lockfiles.iterdir() if p.suffix == ".yml"]), list(lockfiles.iterdir())
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("moment", ["download", "lock"])
def test_a_stop_the_kernel_hands_to_a_reader_thread_still_ends_join_at_once(tmp_path, index, moment):
    """The main thread waits for the held request (the realise's download thread, the resolver's
    page future); the handler runs only in the main thread, so its waits are in slices
    (`base.deadlines.join`, `deadlines.result`)."""
    from test_sigterm_realise import _TGKILL

    if os.uname().machine not in _TGKILL:
        pytest.skip("no tgkill number for this machine")
    held_path = ((lambda p: p.endswith(".whl") and "/torch-" in p) if moment == "download"
                 else (lambda p: p.rstrip("/").endswith("/cpu/torch")))
    with Stall(index, held_path) as held:
        proc = join(tmp_path, *mirrors(index), persist=True)
        assert held.arrived.wait(60), proc.communicate(timeout=30)
        rest, _ = stop(proc, signal.SIGTERM, f"mid-{moment}, to a reader thread", to_thread=True)
    assert proc.returncode == 130, rest
    assert the_one_error(rest).startswith("error: stopped by SIGTERM during preparation")
    assert not (tmp_path / "out").exists()


@BY_SIGNAL
def test_a_stop_while_the_tunnel_is_set_up_ends_join_with_130_and_closes_the_connection(tmp_path, signum):
    """An ssh server that accepts and never sends its banner: the tunnel's set-up waits on it
    (up to its connect timeout); the accept is the barrier. The connection must be closed by
    the stop (the server reads its end), and no attempt follows."""
    key = tmp_path / "id_ed25519"
    key.write_text("not read before the banner\n")
    srv = socket.create_server(("127.0.0.1", 0))
    proc = join(tmp_path, "--ssh", f"join@127.0.0.1:{srv.getsockname()[1]}", "--identity", str(key), persist=True)
    try:
        srv.settimeout(60)
        conn, _ = srv.accept()
        rest, _ = stop(proc, signum, "during the tunnel's set-up")
        conn.settimeout(10)
        while conn.recv(4096):               # fdlenv's banner, then the end: the stop closed its side
            pass
        conn.close()
    finally:
        srv.close()
    assert proc.returncode == 130, rest
    assert the_one_error(rest) == (f"error: stopped by {signal.Signals(signum).name} during the tunnel's set-up; "
                                   "nothing half-written was kept; the tunnel was closed; not re-dialing")


@BY_SIGNAL
def test_a_stop_in_the_wait_to_re_dial_ends_join_at_once_with_130(tmp_path, signum):
    """The agent exits 0 under --persist; fdlenv's own 're-dialing in' line is the barrier."""
    proc = join(tmp_path, persist=True)
    said = read_until(proc, lambda ln: "re-dialing in" in ln)
    assert "agent exited with code 0" in said
    rest, _ = stop(proc, signum, "in the re-dial wait")
    assert proc.returncode == 130, said + rest
    assert the_one_error(said + rest) == (f"error: stopped by {signal.Signals(signum).name} while waiting to "
                                          "re-dial; not re-dialing")
    assert not (tmp_path / "out" / "agent1.json").exists()    # no second attempt


@BY_SIGNAL
@ONCE_AND_PERSIST
def test_a_stop_while_the_agent_runs_ends_its_group_and_join_exits_130(tmp_path, signum, persist):
    """The stand-in agent hangs with a rank child once both have written their pids (the
    marker); the signal goes to the agent's group, both end, and join says the stop: 130
    whatever the agent's own code (here death by the signal)."""
    proc = join(tmp_path, persist=persist, agent_mode="hang")
    pids = [tmp_path / "out" / f for f in ("agent.pid", "rank.pid")]
    deadline = time.monotonic() + 60
    while not all(p.exists() and p.read_text().strip() for p in pids):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=30)
        time.sleep(0.02)                # polling for the marker files, not waiting out a race
    agent, rank = (int(p.read_text()) for p in pids)
    rest, _ = stop(proc, signum, f"while the agent runs ({'persist' if persist else 'once'})")
    name = signal.Signals(signum).name
    assert proc.returncode == 130, rest
    assert the_one_error(rest, agent_ran=True) == (f"error: stopped by {name} while the agent ran: the signal went to its process "
                                   f"group and the agent was killed by {name}; not re-dialing")
    assert _gone(agent) and _gone(rank)
    assert not (tmp_path / "out" / "agent1.json").exists()


PROBE_HANGS = """\
import os, sys, time
if os.environ.get("FLODL_INTERNAL_MODEL_SIG_PROBE") == "1":
    open(sys.argv[1], "w").write(str(os.getpid()))
    time.sleep(600)
open(sys.argv[1] + ".agent", "w").write("ran")
"""


@BY_SIGNAL
def test_a_stop_during_the_signature_probe_ends_the_probe_and_join_with_130(tmp_path, signum):
    """The binary hangs in probe mode once it has written its pid (the marker): the signal goes to
    the probe's group, the attempt stops there, and no tunnel or agent follows."""
    (tmp_path / "work").mkdir()
    script, marker = tmp_path / "probe_hangs.py", tmp_path / "probe.pid"
    script.write_text(PROBE_HANGS)
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin", sys.executable,
                             "--home", str(tmp_path / "home"), "--persist", "--", str(script), str(marker)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, cwd=tmp_path / "work",
                            env={**os.environ, "FLODL_TESTING_GPU_JSON": GPU, "HOME": str(tmp_path)})
    deadline = time.monotonic() + 60
    while not (marker.exists() and marker.read_text().strip()):
        assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=30)
        time.sleep(0.02)                # polling for the marker file, not waiting out a race
    probe = int(marker.read_text())
    rest, _ = stop(proc, signum, "during the signature probe")
    assert proc.returncode == 130, rest
    assert the_one_error(rest, agent_ran=True) == (f"error: stopped by {signal.Signals(signum).name} during the "
                                                   "signature probe; nothing half-written was kept; not re-dialing")
    assert "WARNING" not in rest                   # a stopped probe says nothing of the binary
    assert _gone(probe) and not Path(str(marker) + ".agent").exists()
