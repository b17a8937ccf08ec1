"""Every wait ends: a request has one total deadline and a lock wait has one, each a setting
(fdlenv/base/deadlines.py, netread, flocks).

The stalled server is a real socket on 127.0.0.1 that answers a status line and then one
header line per tick, each tick sent by the test: every socket operation of the client
succeeds well within its own timeout, so only the total deadline can end the request.
"""

from __future__ import annotations

import os
import queue
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from fdlenv.base import flocks

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

MARGIN = 15.0     # seconds past the deadline a realise may take to start, fail and exit


class HeaderTrickle:
    """Accepts connections; each gets `HTTP/1.1 200 OK` and then one header line per `tick()`."""

    def __init__(self):
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.url = f"http://127.0.0.1:{self.sock.getsockname()[1]}"
        self.conns: list[socket.socket] = []
        self.ticks: queue.Queue = queue.Queue()
        self.asked = threading.Event()
        threading.Thread(target=self._accept, daemon=True).start()
        threading.Thread(target=self._trickle, daemon=True).start()

    def _accept(self):
        while True:
            try:
                conn, _ = self.sock.accept()
            except OSError:
                return
            conn.recv(65536)
            conn.sendall(b"HTTP/1.1 200 OK\r\n")
            self.conns.append(conn)
            self.asked.set()

    def _trickle(self):
        n = 0
        while self.ticks.get() is not None:
            n += 1
            for conn in list(self.conns):
                try:
                    conn.sendall(f"X-Tick-{n}: {n}\r\n".encode())
                except OSError:
                    self.conns.remove(conn)

    def tick(self):
        self.ticks.put(1)

    def close(self):
        self.ticks.put(None)
        self.sock.close()
        for conn in self.conns:
            conn.close()


@pytest.fixture
def stalled():
    srv = HeaderTrickle()
    yield srv
    srv.close()


def _fdlenv(*args: str, env: dict) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-m", "fdlenv", *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True, env={**os.environ, **env})


def _realize(home: Path, url: str, env: dict) -> subprocess.Popen:
    return _fdlenv("env", "realize", "--libtorch", "rocm7.1", "--mirror", f"pytorch={url}", "--mirror",
                   f"pypi={url}/simple", "--home", str(home), env=env)


def test_a_server_that_trickles_header_lines_ends_at_the_request_deadline_and_frees_the_lock(tmp_path, stalled):
    home = tmp_path / "h"
    deadline = 2.0
    began = time.monotonic()
    proc = _realize(home, stalled.url, {"FDLENV_REQUEST_TIMEOUT": f"{deadline:g}"})
    while proc.poll() is None and time.monotonic() - began < deadline + MARGIN + 30:
        if stalled.asked.is_set():
            stalled.tick()                      # one header line, then the server's pace:
        try:
            proc.wait(timeout=0.25)             # ... a quarter second (never 100 headers before 25 s)
        except subprocess.TimeoutExpired:
            pass
    took = time.monotonic() - began
    if proc.poll() is None:
        proc.kill()
    out, err = proc.communicate()
    assert stalled.asked.is_set(), err
    assert proc.returncode == 1 and took < deadline + MARGIN, (proc.returncode, took, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert stalled.url in errors[0] and "within 2 s" in errors[0] and "FDLENV_REQUEST_TIMEOUT" in errors[0], err
    lock = home / "locks" / "ondemand-rocm7.1.lock"
    assert lock.exists() and not flocks.held(lock)        # the next caller takes it at once
    with flocks.exclusive(lock, "the next caller"):
        pass


def test_a_lock_held_past_the_lock_deadline_is_one_transient_error_naming_it_and_its_holder(tmp_path, stalled):
    home = tmp_path / "h"
    lock = home / "locks" / "ondemand-rocm7.1.lock"
    with flocks.exclusive(lock, "a test holding it"):
        began = time.monotonic()
        proc = _realize(home, stalled.url, {"FDLENV_LOCK_TIMEOUT": "1"})
        out, err = proc.communicate(timeout=60)
        took = time.monotonic() - began
    assert proc.returncode == 1 and took < 1 + MARGIN, (took, err)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in err, err
    assert str(lock) in errors[0] and f"pid {os.getpid()}" in errors[0] and "FDLENV_LOCK_TIMEOUT" in errors[0], err
    assert not stalled.asked.is_set()         # it never got to ask the index


@pytest.mark.parametrize("value", ["0", "-3", "soon", "inf"])
def test_a_deadline_setting_that_is_not_a_positive_number_is_one_error_naming_it(tmp_path, stalled, value):
    proc = _realize(tmp_path / "h", stalled.url, {"FDLENV_REQUEST_TIMEOUT": value})
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 2 and err.strip().splitlines()[-1].startswith("error: FDLENV_REQUEST_TIMEOUT="), err
    assert "positive number of seconds" in err and "Traceback" not in err
