"""Progress a person can read: a live line on a terminal, plain lines elsewhere, `-q` for none."""

from __future__ import annotations

import fcntl
import os
import pty
import struct
import subprocess
import sys
import termios

from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.base import progress


def _realise_on_a_terminal(w) -> str:
    """`env realize` with stderr on a real pseudo-terminal of 120x40; what the terminal got."""
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 40, 120, 0, 0))
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cpu",
                             "--lock", str(w.lock), "--home", str(w.home.root)],
                            stdout=subprocess.PIPE, stderr=slave,
                            env={**{k: v for k, v in os.environ.items() if k not in ("COLUMNS", "LINES")},
                                 "TERM": "xterm"})   # the pty's own 120x40 (xdist exports COLUMNS=80)
    os.close(slave)
    chunks = []
    while True:
        try:
            data = os.read(master, 65536)
        except OSError:          # EIO: the child closed its end
            break
        if not data:
            break
        chunks.append(data)
    proc.wait(timeout=120)
    os.close(master)
    assert proc.returncode == 0
    return b"".join(chunks).decode(errors="replace")


def test_a_terminal_gets_a_live_line_with_size_and_what_is_linked(tmp_path):
    w = make_world(tmp_path, nfiles=200)
    out = _realise_on_a_terminal(w)
    line = [seg for seg in out.replace("\n", "\r").split("\r") if "installing 3 package(s)" in seg]
    assert line, out
    assert "3/3 linked" in line[-1] and "100%|" in line[-1]      # finished with its final state
    assert "B/s" in out                                                 # a rate, drawn in place


def test_a_log_gets_plain_lines_and_no_carriage_returns(tmp_path):
    w = make_world(tmp_path)
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root))
    assert res.returncode == 0 and "\r" not in res.stderr
    assert "fdlenv: installing 3 package(s) for cpu ..." in res.stderr.splitlines()


def test_quiet_prints_the_result_and_no_progress(tmp_path):
    w = make_world(tmp_path)
    for args in (["-q", "env", "realize"], ["env", "realize", "--quiet"]):
        res = fdlenv(*args, "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root))
        assert res.returncode == 0 and res.stderr == "" and res.stdout.startswith("cpu: ")
    bad = fdlenv("-q", "env", "realize", "--libtorch", "cu999", "--home", str(w.home.root))
    assert bad.returncode == 2 and bad.stderr.startswith("error: ")     # errors are never silenced


def test_a_meter_line_says_size_rate_eta_and_detail():
    now = [0.0]
    m = progress.Meter("wheels", total=4_000_000_000, clock=lambda: now[0])
    now[0] = 10.0
    m.add(1_000_000_000)
    m.detail = "1/16 downloaded"
    line = m.line()
    assert line == "wheels: 1.00 of 4.00 GB at 100 MB/s, ETA 30 s; 1/16 downloaded"


def test_rate_and_eta_come_from_a_recent_window_not_a_slow_start():
    now = [0.0]
    m = progress.Meter("wheels", total=3_000_000_000, clock=lambda: now[0])
    for t in range(1, 31):             # 30 s of lookups and a slow first connection: 1 MB/s
        now[0] = t
        m.add(1_000_000)
        m.line()
    for t in range(31, 41):            # then the mirror's real speed: 100 MB/s
        now[0] = t
        m.add(100_000_000)
        line = m.line()
    # since the start it would read 26 MB/s and ETA 1:16; the last 8 s say 100 MB/s and 20 s
    assert "at 100 MB/s, ETA 20 s" in line, line
    m2 = progress.Meter("wheels", total=10, clock=lambda: 0.0)
    assert m2.line() == "wheels: 0.00 of 0.00 GB"        # nothing seen yet: no rate, no ETA
