"""The model-signature probe: parsing, outcomes, timeout, cache."""

from __future__ import annotations

import os
import time

import pytest

from fdlenv.join import probe as P

SIG = "0123456789abcdef" * 4


def sh(script):
    # /bin/sh -c rather than a freshly written executable (exec races ETXTBSY)
    return "/bin/sh", ["-c", script]


def run(script, timeout=10.0):
    notes = []
    b, a = sh(script)
    r = P.run_probe(b, a, cwd=None, env={"PATH": os.environ["PATH"]}, timeout=timeout,
                    say=notes.append)
    return r, notes


def test_the_probe_flag_is_set_and_the_agent_spec_is_not():
    b, a = sh('echo "flodl-model-sig: $FLODL_INTERNAL_MODEL_SIG_PROBE${FLODL_INTERNAL_AGENT_JSON:-none}"')
    r = P.run_probe(b, a, cwd=None, env={"FLODL_INTERNAL_AGENT_JSON": "7b7d"}, say=lambda m: None)
    assert r.outcome == P.NO_SIG and r.tail == ("flodl-model-sig: 1none",)


def test_noise_then_a_valid_line_gives_the_signature_and_the_last_line_wins():
    r, notes = run(f'echo noise; echo "flodl-model-sig: {"f" * 64}"; echo more; '
                   f'echo "flodl-model-sig:   {SIG.upper()}  "')
    assert r.outcome == P.OK and r.sig == SIG and r.code == 0
    assert any("probing the binary" in n for n in notes)


def test_exit_zero_without_a_line_explains_and_shows_the_last_lines():
    r, notes = run("for i in 1 2 3 4 5 6 7 8 9 10; do echo line$i; done")
    assert r.outcome == P.NO_SIG and r.sig is None
    assert r.tail == tuple(f"line{i}" for i in range(3, 11))  # the last 8
    assert "last lines of the probe's output" in notes[-1].lower()
    assert "line10" in notes[-1] and "line2\n" not in notes[-1]


def test_a_non_hex_or_short_signature_is_no_signature():
    for bad in ("z" * 64, "ab" * 31, "ab" * 33):
        r, _ = run(f'echo "flodl-model-sig: {bad}"')
        assert r.outcome == P.NO_SIG and r.sig is None, bad


def test_a_nonzero_exit_warns_loudly_even_with_a_signature():
    r, notes = run(f'echo "flodl-model-sig: {SIG}"; exit 3')
    assert r.outcome == P.NONZERO and r.code == 3 and r.sig is None
    assert notes[-1].startswith("WARNING") and "code 3" in notes[-1]


def test_a_binary_that_cannot_run_carries_its_exec_errno_for_the_attempt_to_stop_on(tmp_path):
    notes = []
    r = P.run_probe(str(tmp_path / "nope"), ["--x"], cwd=None, env={}, say=notes.append)
    assert r.outcome == P.SPAWN_FAILED and isinstance(r.error, FileNotFoundError)
    assert not any("joining without a signature" in n for n in notes)


def test_timeout_kills_the_whole_group_without_blocking_on_the_pipe(tmp_path):
    marker = tmp_path / "grandchild.pid"
    t0 = time.monotonic()
    r, notes = run(f"sleep 30 & echo $! > {marker}; echo started; wait", timeout=1.0)
    assert time.monotonic() - t0 < 8
    assert r.outcome == P.TIMEOUT and "killed after 1s" in notes[-1]
    pid = int(marker.read_text())
    for _ in range(50):
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            break
        time.sleep(0.05)
    else:
        pytest.fail("the probe's grandchild survived the timeout")


def test_probe_key_binds_binary_identity_and_args(tmp_path):
    b = tmp_path / "bin"
    b.write_bytes(b"v1")
    k1 = P.probe_key(str(b), ["a"])
    assert k1 is not None and k1 == P.probe_key(str(b), ["a"])
    assert k1 != P.probe_key(str(b), ["b"])
    assert k1 != P.probe_key(str(b), ["a", ""])
    b.write_bytes(b"v2-longer")
    assert P.probe_key(str(b), ["a"]) != k1
    st = b.stat()
    k2 = P.probe_key(str(b), ["a"])
    os.utime(b, ns=(st.st_atime_ns, st.st_mtime_ns + 1_000_000_000))
    assert P.probe_key(str(b), ["a"]) != k2
    assert P.probe_key(str(tmp_path / "missing"), ["a"]) is None


def test_prober_caches_outcomes_including_failures(tmp_path):
    counter = tmp_path / "count"
    script = tmp_path / "probe.sh"
    script.write_text(f'echo x >> {counter}\nexit 4\n')
    notes = []
    pr = P.Prober(say=notes.append)
    r1 = pr("/bin/sh", [str(script)], cwd=None, env={})
    r2 = pr("/bin/sh", [str(script)], cwd=None, env={})
    assert r1.outcome == r2.outcome == P.NONZERO and r2.cached and not r1.cached
    assert counter.read_text().count("x") == 1 and pr.runs == 1
    r3 = pr("/bin/sh", [str(script), "other"], cwd=None, env={})
    assert not r3.cached and counter.read_text().count("x") == 2


def test_prober_skips_with_a_note_when_no_args_are_known_and_when_disabled():
    notes = []
    pr = P.Prober(say=notes.append)
    assert pr("/bin/false", [], cwd=None, env={}).outcome == P.SKIPPED
    assert "no arguments known" in notes[-1] and pr.runs == 0
    off = P.Prober(enabled=False, say=notes.append)
    assert off("/bin/false", ["x"], cwd=None, env={}).outcome == P.SKIPPED and off.runs == 0


def test_probe_runs_in_the_given_cwd(tmp_path):
    b, a = sh('echo "flodl-model-sig: $(pwd | sha256sum | cut -c1-64)"')
    r = P.run_probe(b, a, cwd=str(tmp_path), env={"PATH": os.environ["PATH"]},
                    say=lambda m: None)
    import hashlib
    assert r.sig == hashlib.sha256(f"{tmp_path}\n".encode()).hexdigest()
