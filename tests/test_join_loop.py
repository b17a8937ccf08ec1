"""The attempt and the persist loop, with a stand-in agent and injected time."""

from __future__ import annotations

import errno
import json
import os
import random
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fdlenv.config.model import JoinSettings, SshConfig
from fdlenv.base.errors import Fail
from fdlenv.join import loop as L
from fdlenv.join.spec import decode
from fdlenv.app.prepare import Prepared
from fdlenv.store.env import Env

HERE = Path(__file__).parent
STANDIN = str(HERE / "join_standin.py")
TOKEN = "00112233445566778899aabbccddeeff"
ENV_EXTRA = {"LIBTORCH_PATH": "/envs/cu128-abc/lib/libtorch", "FDL_GPU_FEATURE": "cuda",
             "LD_LIBRARY_PATH": "/envs/cu128-abc/lib/libtorch/lib:/usr/lib",
             "CONDA_PREFIX": "/envs/cu128-abc"}


def fake_prepare(out, *, variant="cu128", args=None, data_path=None, run_id=None, notes=(),
                 cwd=None, calls=None):
    env_dir = Path(out) / "home" / "envs" / "cu128-abc"   # a realised env as the store leaves it
    (env_dir / ".fdlenv").mkdir(parents=True, exist_ok=True)
    (env_dir / ".fdlenv" / "manifest.json").write_text("{}")

    def prepare(settings):
        if calls is not None:
            calls.append(settings)
        return Prepared(variant=variant, env=Env(variant or "cpu", "abc", env_dir, Path("/lib/libtorch")),
                        bin=None, cwd=cwd, data_path=data_path, args=args, run_id=run_id,
                        notes=list(notes), environ={"PATH": os.environ["PATH"], **ENV_EXTRA})
    return prepare


def settings(out, code=0, mode="exit", **kw):
    base = dict(host="box7", controller_host="ctrl.lan", controller_port=1400,
                bin=sys.executable, args=(STANDIN, str(out), str(code), mode), sig_probe=True)
    base.update(kw)
    return JoinSettings(**base)


def agent_record(out, n=0):
    return json.loads((Path(out) / f"agent{n}.json").read_text())


def test_one_shot_runs_the_agent_with_spec_env_and_returns_its_code(tmp_path):
    notes = []
    s = settings(tmp_path, code=7, token=TOKEN, devices=(0, 2), gpu_ram_share=0.5)
    code = L.run_join(s, fake_prepare(tmp_path, data_path="/data/root", run_id="run-42",
                                      notes=["a preparation note"]), say=notes.append)
    assert code == 7
    rec = agent_record(tmp_path)
    env = rec["env"]
    assert rec["argv"][1:] == [str(tmp_path), "7", "exit"]
    assert TOKEN not in " ".join(rec["argv"])          # never on argv
    for k, v in ENV_EXTRA.items():
        assert env[k] == v
    assert env["FLODL_HOST_NAME"] == "box7"
    assert "FLODL_INTERNAL_MODEL_SIG_PROBE" not in env
    spec = decode(env["FLODL_INTERNAL_AGENT_JSON"])
    assert spec == {"host": "box7", "controller_host": "ctrl.lan", "controller_port": 1400,
                    "libtorch": "precompiled/cu128", "salt_hex": TOKEN,
                    "local_devices": [0, 2], "data_path": "/data/root", "run_id": "run-42",
                    "gpu_ram_share": 0.5, "model_sig_hex": "5a" * 32}
    # the rank child inherits the same environment
    rank = json.loads((tmp_path / "rank0.json").read_text())
    for k in (*ENV_EXTRA, "FLODL_HOST_NAME", "FLODL_INTERNAL_AGENT_JSON"):
        assert rank[k] == env[k]
    # own process group
    assert rec["pgid"] == rec["pid"] and rec["pgid"] != os.getpgid(0)
    assert "a preparation note" in notes


def test_minimal_spec_omits_unknowns_and_the_probe_can_be_off(tmp_path):
    L.run_join(settings(tmp_path, sig_probe=False), fake_prepare(tmp_path, variant=""),
               say=lambda m: None)
    spec = decode(agent_record(tmp_path)["env"]["FLODL_INTERNAL_AGENT_JSON"])
    assert spec == {"host": "box7", "controller_host": "ctrl.lan", "controller_port": 1400,
                    "libtorch": ""}


def test_published_args_replace_the_local_ones_with_a_note(tmp_path):
    notes = []
    published = [STANDIN, str(tmp_path), "3", "exit", "--published"]
    code = L.run_join(settings(tmp_path, sig_probe=False),
                      fake_prepare(tmp_path, args=published), say=notes.append)
    assert code == 3 and agent_record(tmp_path)["argv"][-1] == "--published"
    assert any("published run's arguments" in n for n in notes)


def test_a_built_binary_runs_in_its_project_dir(tmp_path):
    from fdlenv.config.model import SourceSpec
    proj = tmp_path / "proj"
    proj.mkdir()
    s = settings(tmp_path, sig_probe=False, bin=None, source=SourceSpec("file:///src"))

    def prepare(st):
        p = fake_prepare(tmp_path, cwd=str(proj))(st)
        p.bin = sys.executable
        return p
    assert L.run_join(s, prepare, say=lambda m: None) == 0
    assert agent_record(tmp_path)["cwd"] == str(proj)


def test_signal_death_reads_as_1(tmp_path):
    s = settings(tmp_path, sig_probe=False, bin="/bin/sh", args=("-c", "kill -9 $$"))
    assert L.run_join(s, fake_prepare(tmp_path), say=lambda m: None) == 1


def test_an_agent_that_cannot_be_spawned_is_permanent(tmp_path, capsys):
    s = settings(tmp_path, sig_probe=False, bin=str(tmp_path / "nope"), persist=True)
    assert L.run_join(s, fake_prepare(tmp_path), say=lambda m: None) == 2
    assert f"run {tmp_path / 'nope'}" in capsys.readouterr().err


def test_transient_one_shot_is_1_and_permanent_is_2_even_under_persist(tmp_path, capsys):
    def failing(kind):
        def prepare(s):
            raise Fail("mirror down" if kind == "t" else "no GPU", kind == "t", ("note before the failure",))
        return prepare
    notes = []
    assert L.run_join(settings(tmp_path), failing("t"), say=notes.append) == 1
    assert "note before the failure" in notes
    sleeps = []
    assert L.run_join(settings(tmp_path, persist=True), failing("p"), say=notes.append,
                      sleep=sleeps.append) == 2
    assert sleeps == [] and any("not re-dialing" in n for n in notes)
    err = capsys.readouterr().err
    assert "error: mirror down" in err and "error: no GPU" in err


class FakeClock:
    def __init__(self):
        self.t = 1000.0

    def __call__(self):
        return self.t


def scripted_loop(outcomes, *, persist=True, rng=None):
    """Run the loop over scripted attempts: an int = agent code, a Fail = raised,
    ('long', code) = an attempt lasting 200 s. Ends with a permanent failure."""
    clock = FakeClock()
    sleeps, notes = [], []
    it = iter(outcomes)

    class R(L.Runner):
        def attempt(self):
            try:
                o = next(it)
            except StopIteration:
                raise Fail.permanent("script over") from None
            if isinstance(o, tuple):
                clock.t += 200
                o = o[1]
            else:
                clock.t += 1
            if isinstance(o, Fail):
                raise o
            return o

    r = R(settings=JoinSettings(host="h", controller_host="c", controller_port=1,
                                persist=persist),
          prepare=lambda s: None, clock=clock, sleep=sleeps.append,
          rng=rng or random.Random(0), say=notes.append, open_tunnel=lambda *a, **k: None)
    code = r.run()
    return code, sleeps, notes


def bases(sleeps):
    """Undo the jitter: each sleep lies in [base, base*1.25], at the cap in [50, 60]."""
    out = []
    for s in sleeps:
        cands = [b for b in (5, 10, 20, 40) if b <= s <= b * (1 + L.JITTER)] or \
            [60 for _ in [0] if L.BACKOFF_MAX * 5 / 6 <= s <= L.BACKOFF_MAX]
        assert len(cands) == 1, s
        out.append(cands[0])
    return out


def test_persist_backoff_doubles_to_sixty_for_fast_failures():
    code, sleeps, notes = scripted_loop([1] * 5 + [Fail.retry("down")] * 3)
    assert code == 2
    assert bases(sleeps) == [5, 10, 20, 40, 60, 60, 60, 60]
    assert "agent exited with code 1 after 1s; re-dialing in" in notes[0]
    assert notes[0].endswith("(--persist)")
    assert any(n.startswith("attempt failed after 1s") for n in notes)


def test_a_clean_exit_or_a_long_stint_resets_the_backoff():
    code, sleeps, _ = scripted_loop([1, 1, 1, 0, 1, 1, ("long", 1), 1])
    assert bases(sleeps) == [5, 10, 20, 5, 10, 20, 5, 10]


def test_jitter_spreads_a_fleet_and_is_never_below_the_floor():
    firsts = set()
    for seed in range(20):
        _, sleeps, _ = scripted_loop([1], rng=random.Random(seed))
        assert 5 <= sleeps[0] <= 5 * (1 + L.JITTER)
        firsts.add(round(sleeps[0], 3))
    assert len(firsts) > 10


def test_backoff_helpers_match_the_reference():
    assert L.settle_backoff(40, clean=True, elapsed=1) == 5
    assert L.settle_backoff(40, clean=False, elapsed=121) == 5
    assert L.settle_backoff(40, clean=False, elapsed=120) == 40
    assert L.grow_backoff(40) == 60 and L.grow_backoff(60) == 60 and L.grow_backoff(5) == 10


def test_one_shot_returns_the_agent_code_without_sleeping():
    code, sleeps, _ = scripted_loop([42], persist=False)
    assert code == 42 and sleeps == []


def test_persist_with_a_real_failing_agent_redials(tmp_path):
    sleeps = []
    calls = []
    r = L.Runner(settings=settings(tmp_path, code=3, persist=True), prepare=None,
                 sleep=sleeps.append, say=lambda m: None, rng=random.Random(1))

    def prepare(s):
        if len(calls) == 3:
            raise Fail.permanent("stop here")
        return fake_prepare(tmp_path, calls=calls)(s)
    r.prepare = prepare
    assert r.run() == 2
    assert len(calls) == 3 and bases(sleeps) == [5, 10, 20]
    assert all((tmp_path / f"agent{i}.json").exists() for i in range(3))
    assert r.prober.runs == 1   # the probe outcome is cached across attempts


class FakeTunnel:
    def __init__(self, log):
        self.local_port = 45678
        self.log = log

    def close(self):
        self.log.append("closed")


def test_under_ssh_the_agent_dials_the_local_forward_and_the_tunnel_closes(tmp_path):
    log = []

    def opener(ssh, host, port, say):
        log.append(("open", ssh.target, host, port))
        return FakeTunnel(log)
    s = settings(tmp_path, sig_probe=False, ssh=SshConfig(target="gw"),
                 controller_host="10.0.0.1", controller_port=1337)
    assert L.run_join(s, fake_prepare(tmp_path), open_tunnel=opener, say=lambda m: None) == 0
    spec = decode(agent_record(tmp_path)["env"]["FLODL_INTERNAL_AGENT_JSON"])
    assert (spec["controller_host"], spec["controller_port"]) == ("127.0.0.1", 45678)
    assert log == [("open", "gw", "10.0.0.1", 1337), "closed"]


def test_the_probe_runs_before_the_tunnel_and_a_spawn_failure_still_closes_it(tmp_path):
    log = []

    class Prober:
        enabled = True
        runs = 0

        def __call__(self, *a, **k):
            log.append("probe")
            from fdlenv.join.probe import SKIPPED, ProbeResult
            return ProbeResult(SKIPPED)

    def opener(ssh, host, port, say):
        log.append("open")
        return FakeTunnel(log)
    s = settings(tmp_path, ssh=SshConfig(target="gw"), bin=str(tmp_path / "missing"))
    assert L.run_join(s, fake_prepare(tmp_path), open_tunnel=opener, prober=Prober(),
                      say=lambda m: None) == 2
    assert log == ["probe", "open", "closed"]


def _gone(pid, budget=15.0):
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        # a zombie reparented to us would linger; check its state
        try:
            if Path(f"/proc/{pid}/stat").read_text().split()[2] == "Z":
                return True
        except OSError:
            return True
        time.sleep(0.05)
    return False


def hanging_join(tmp_path, *extra):
    """fdlenv's join loop running an agent that hangs with a rank child; returns (proc, agent, rank)
    once both have written their pids (the marker)."""
    proc = subprocess.Popen([sys.executable, str(HERE / "join_harness.py"), str(tmp_path), "0", "hang", *extra],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env={**os.environ, "PYTHONPATH": str(HERE.parent)})
    deadline = time.monotonic() + 20
    # both pid files, with content: the rank child starts a moment after the agent
    while not all((tmp_path / f).exists() and (tmp_path / f).read_text().strip()
                  for f in ("agent.pid", "rank.pid")):
        if proc.poll() is not None or time.monotonic() > deadline:
            proc.kill()
            raise AssertionError(f"agent or its rank child never started: {proc.communicate()}")
        time.sleep(0.05)
    return proc, int((tmp_path / "agent.pid").read_text()), int((tmp_path / "rank.pid").read_text())


@pytest.mark.parametrize("persist,to_thread", [(False, False), (True, False), (True, True)],
                         ids=["once", "persist", "persist, to a tunnel thread"])
def test_sigterm_to_fdlenv_stops_the_agent_and_its_children(tmp_path, persist, to_thread):
    """`to a tunnel thread`: the kernel hands the stop signal to a thread while the main thread
    waits for the agent; that wait is in slices (`base.deadlines.until_exited`), so the handler
    still forwards it at once."""
    from test_sigterm_realise import _TGKILL, _to_another_thread

    if to_thread and os.uname().machine not in _TGKILL:
        pytest.skip("no tgkill number for this machine")
    proc, agent, rank = hanging_join(tmp_path, *(["persist"] if persist else []), *(["thread"] if to_thread else []))
    try:
        assert os.getpgid(agent) != proc.pid and os.getpgid(rank) == agent
        if to_thread:
            _to_another_thread(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=20)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err        # a stop, whatever the agent's own code
    assert [ln for ln in err.splitlines() if ln.startswith("error:")] == [
        "error: stopped by SIGTERM while the agent ran: the signal went to its process group and the agent "
        "was killed by SIGTERM; not re-dialing"], err
    assert _gone(agent) and _gone(rank)
    assert not (tmp_path / "agent1.json").exists()   # no re-dial, even under persist


def test_end_to_end_through_a_real_sshd(tmp_path):
    """prepare -> probe -> real paramiko tunnel -> agent dials the controller through it."""
    from sshd import loopback_controller, sshd_available, start_sshd
    reason = sshd_available()
    if reason:
        pytest.skip(reason)

    def handle(c):
        data = b""
        while not data.endswith(b"\n"):
            d = c.recv(4096)
            if not d:
                break
            data += d
        if data:
            c.sendall(b"controller got: " + data)

    # every client is served: the tunnel's readiness check opens (and drops) one forward first
    with loopback_controller(handle) as (port, _), start_sshd(tmp_path) as sd:
        ssh = SshConfig(target=sd.host, port=sd.port, user=sd.user, identity_file=str(sd.identity),
                        options=(f"UserKnownHostsFile={tmp_path / 'kh'}", "IdentitiesOnly=yes",
                                 "StrictHostKeyChecking=accept-new"))
        s = settings(tmp_path / "out", mode="dial", ssh=ssh, controller_host="127.0.0.1",
                     controller_port=port)
        assert L.run_join(s, fake_prepare(tmp_path), say=lambda m: None) == 0
    assert (tmp_path / "out" / "dial.txt").read_bytes() == b"controller got: hello from box7\n"
    spec = decode(agent_record(tmp_path / "out")["env"]["FLODL_INTERNAL_AGENT_JSON"])
    assert spec["controller_host"] == "127.0.0.1"
    assert spec["controller_port"] != s.controller_port
    assert spec["model_sig_hex"] == "5a" * 32


def test_kill_9_of_fdlenv_takes_the_agent_and_its_children_with_it(tmp_path):
    """No code of fdlenv runs on SIGKILL: the group guard (a watcher told of its death by the
    kernel) must end the agent's whole process group."""
    proc, agent, rank = hanging_join(tmp_path)
    try:
        proc.kill()
        proc.wait()
    finally:
        if proc.poll() is None:
            proc.kill()
    assert _gone(agent) and _gone(rank)


@pytest.mark.parametrize("err, code", [(errno.ENOSPC, 1), (errno.EACCES, 2)])
def test_an_oserror_from_a_step_is_classified_like_any_failure(tmp_path, capsys, err, code):
    def prepare(s):
        raise OSError(err, os.strerror(err), str(tmp_path / "x"))
    notes = []
    assert L.run_join(settings(tmp_path, persist=(code == 2)), prepare, say=notes.append) == code
    line = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert len(line) == 1 and str(tmp_path / "x") in line[0]
    assert ("not re-dialing — retrying cannot fix this (exit 2)" in notes) == (code == 2)


def test_jitter_never_pushes_a_wait_past_the_cap():
    waits = [L.with_jitter(b, random.Random(seed)) for seed in range(200) for b in (40, 50, 60)]
    assert max(waits) <= L.BACKOFF_MAX and min(waits) >= L.BACKOFF_MIN
    assert len({round(w, 3) for w in waits if w > 50}) > 50        # still spread near the cap


def test_join_json_reports_one_object_per_attempt_with_its_outcome_and_class(tmp_path):
    reports, sleeps, calls = [], [], []
    r = L.Runner(settings=settings(tmp_path, code=3, persist=True), prepare=None, sleep=sleeps.append,
                 say=lambda m: None, rng=random.Random(1), report=reports.append)

    def prepare(s):
        if len(calls) >= 1:
            calls.append(s)
            if len(calls) == 2:
                raise Fail.retry("index away for now")
            raise Fail.permanent("stop here")
        return fake_prepare(tmp_path, calls=calls)(s)
    r.prepare = prepare
    assert r.run() == 2
    first, second, third = reports
    assert [x["attempt"] for x in reports] == [1, 2, 3] and len(sleeps) == 2
    assert (first["outcome"], first["exit"], first["agent_status"]) == ("agent exited", 3, 3)
    assert (second["outcome"], second["exit"], second["transient"], second["phase"]) == ("failed", 1, True, "prepare")
    assert second["error"].endswith("index away for now")
    assert (third["outcome"], third["exit"], third["transient"]) == ("failed", 2, False)
    assert all(x["controller"] == "ctrl.lan:1400" and x["persist"] is True and x["seconds"] >= 0 for x in reports)


def test_join_json_on_the_command_line_keeps_stdout_for_the_objects_and_the_agents_output_on_stderr(tmp_path):
    agent = tmp_path / "agent.sh"
    agent.write_text('#!/bin/sh\necho "agent says hi"\nexit 3\n')
    agent.chmod(0o755)
    env = {**os.environ, "FLODL_TESTING_GPU_JSON": '[{"vendor": "nvidia", "arch": "8.6"}]'}
    res = subprocess.run([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin", str(agent),
                          "--no-sig-probe", "--json"], capture_output=True, text=True, env=env, cwd=tmp_path,
                         timeout=120)
    assert res.returncode == 3, res.stderr
    (line,) = res.stdout.splitlines()
    obj = json.loads(line)
    assert (obj["schema"], obj["attempt"], obj["outcome"], obj["exit"]) == (1, 1, "agent exited", 3)
    assert "agent says hi" in res.stderr
