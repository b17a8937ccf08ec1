"""An agent that cannot be executed is permanent: exit 2, never re-dialed under `--persist`.

flodl classes a spawn failure as permanent; so does fdlenv, by the exec's own errno (the
probe's Popen, the group guard's gate), never by a shell's 126/127. Each way a binary
cannot run is made for real here: a missing file, no execute bit, a format the kernel
refuses, a `#!` naming a missing interpreter, an ELF header for another machine (aarch64
on x86_64, or x86_64 elsewhere). The loop runs with the probe on (it finds the failure
first, before any tunnel) and off (the agent's own spawn finds it), and once end to end:
the real CLI under `--persist` through the real sshd fixture.
"""

from __future__ import annotations

import os
import socket
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest

from fdlenv.config.model import JoinSettings, SshConfig
from fdlenv.join import loop as L
from fdlenv.join.runnable import host_machine

HERE = Path(__file__).parent
OTHER = (183, "aarch64") if host_machine() != "aarch64" else (62, "x86_64")   # e_machine, name


def elf_header(machine: int) -> bytes:
    """A minimal 64-bit little-endian ELF executable header (no program headers)."""
    ident = b"\x7fELF" + bytes([2, 1, 1, 0]) + bytes(8)
    return ident + struct.pack("<HHIQQQIHHHHHH", 2, machine, 1, 0x400000, 64, 0, 0, 64, 56, 0, 64, 0, 0)


def make(tmp_path: Path, kind: str) -> tuple[Path, str]:
    """The binary for `kind` and the words its error line must hold."""
    p = tmp_path / f"agent-{kind}"
    if kind == "missing":
        return p, "no such file"
    if kind == "not-executable":
        p.write_text("#!/bin/sh\nexit 0\n")
        p.chmod(0o644)
        return p, "not executable (mode 0644): chmod +x"
    if kind == "no-format":
        p.write_text("echo i am no program\n")
    elif kind == "bad-interpreter":
        p.write_text("#!/nonexistent\nexit 0\n")
    elif kind == "wrong-arch":
        p.write_bytes(elf_header(OTHER[0]))
    p.chmod(0o755)
    return p, {"no-format": "not an executable format",
               "bad-interpreter": "bad interpreter /nonexistent (the #! line)",
               "wrong-arch": f"wrong architecture: an {OTHER[1]} ELF program on this {host_machine()} box"}[kind]


def emulated(name: str) -> bool:
    """binfmt_misc hands another machine's ELF to an emulator (qemu-user): then it may run."""
    d = Path("/proc/sys/fs/binfmt_misc")
    return d.is_dir() and any(name in f.name for f in d.iterdir())


def prepare_for(tmp_path: Path, calls: list):
    from fdlenv.app.prepare import Prepared

    def prepare(settings):
        calls.append(settings)
        return Prepared(variant="cpu", env=None, bin=None, environ={"PATH": os.environ["PATH"]})
    return prepare


KINDS = ["missing", "not-executable", "no-format", "bad-interpreter", "wrong-arch"]


@pytest.mark.parametrize("probe", [True, False], ids=["probe-finds-it", "spawn-finds-it"])
@pytest.mark.parametrize("kind", KINDS)
def test_an_agent_that_cannot_be_executed_exits_2_under_persist_naming_the_binary_and_cause(
        tmp_path, capsys, kind, probe):
    if kind == "wrong-arch" and emulated(OTHER[1]):
        pytest.skip(f"binfmt_misc runs {OTHER[1]} programs here (an emulator is registered)")
    binary, cause = make(tmp_path, kind)
    opened, sleeps, calls, notes = [], [], [], []

    class Tunnel:
        local_port = 4242

        def close(self):
            opened.append("closed")

    def opener(ssh, host, port, say):
        opened.append("open")
        return Tunnel()
    s = JoinSettings(host="box", controller_host="10.0.0.1", controller_port=1337, bin=str(binary),
                     args=("--epochs", "1"), persist=True, sig_probe=probe, ssh=SshConfig(target="gw"))
    rc = L.run_join(s, prepare_for(tmp_path, calls), open_tunnel=opener, sleep=sleeps.append,
                    say=notes.append)
    errs = [ln for ln in capsys.readouterr().err.splitlines() if ln.startswith("error:")]
    assert rc == 2 and sleeps == [] and len(calls) == 1          # one attempt, no re-dial
    assert len(errs) == 1 and errs[0].startswith(f"error: run {binary}: {cause}"), errs
    assert errs[0].endswith("no retry can fix it")
    assert "126" not in errs[0] and "127" not in errs[0]
    assert opened == ([] if probe else ["open", "closed"])        # the probe stops it before the tunnel
    assert "not re-dialing — retrying cannot fix this (exit 2)" in notes


def test_an_agent_that_runs_and_exits_127_is_its_own_code_not_a_spawn_failure(tmp_path):
    """126/127 from a program that did run are that program's codes (re-dialed under --persist)."""
    s = JoinSettings(host="box", controller_host="127.0.0.1", controller_port=1, bin="/bin/sh",
                     args=("-c", "exit 127"), sig_probe=False)
    assert L.run_join(s, prepare_for(tmp_path, []), say=lambda m: None) == 127


def test_a_bad_interpreter_under_persist_through_the_real_sshd_stops_at_once_with_exit_2(tmp_path):
    """The real CLI, `--persist`, an ssh hop to the real sshd: the probe finds the `#!` line's
    missing interpreter, no tunnel is opened, exit 2 in well under the first 5 s backoff."""
    from sshd import sshd_available, start_sshd
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    binary, cause = make(tmp_path, "bad-interpreter")
    env = {**os.environ, "FLODL_HOME": str(tmp_path / "home"), "PYTHONPATH": str(HERE.parent),
           "FLODL_TESTING_GPU_JSON": '[{"vendor": "nvidia", "arch": "8.6"}]'}
    controller = socket.create_server(("127.0.0.1", 0))   # the tunnel's far end listens
    with start_sshd(tmp_path / "sshd") as sd, controller:
        for probe in ([], ["--no-sig-probe"]):
            argv = [sys.executable, "-m", "fdlenv", "join", f"127.0.0.1:{controller.getsockname()[1]}",
                    "--persist", "--bin", str(binary),
                    "--ssh", f"{sd.user}@{sd.host}:{sd.port}", "--identity", str(sd.identity),
                    *probe, "--", "--epochs", "1"]
            t0 = time.monotonic()
            res = subprocess.run(argv, capture_output=True, text=True, env=env, cwd=tmp_path, timeout=60)
            wall = time.monotonic() - t0
            errs = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
            print(f"bad interpreter under --persist {probe or ['(probe on)']}: exit {res.returncode} "
                  f"in {wall:.2f} s wall")
            assert res.returncode == 2 and len(errs) == 1, res.stderr
            assert errs[0].startswith(f"error: run {binary}: {cause}")
            assert "re-dialing in" not in res.stderr and "Traceback" not in res.stderr
            assert ("opening tunnel" in res.stderr) == bool(probe), res.stderr
            assert wall < 30
