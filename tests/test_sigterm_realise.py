"""SIGTERM during a realise ends it as Ctrl-C does: unwound, one `error:` line, JSON, 130.

A service manager stops with SIGTERM, and so does `kill`; left to its default action it
killed fdlenv mid-install (143, no JSON, a staging dir left). The realise runs for real
against a loopback index whose server holds the torch wheel's body until the test
releases it (a barrier: the handler says when it is holding); once the install's staging
dir exists, the test sends SIGTERM and reads what the command leaves.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs


class Holding(http.server.SimpleHTTPRequestHandler):
    """Static files; the torch wheel's body is held (after its headers and a first part)."""

    holding = threading.Event()      # set once a torch body is being held
    release = threading.Event()      # set by the test: let it go

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        if not os.path.basename(path).startswith("torch-"):
            return super().do_GET()
        data = open(path, "rb").read()
        self.send_response(200)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        try:
            self.wfile.write(data[:len(data) // 2])
            self.wfile.flush()
            type(self).holding.set()
            type(self).release.wait(120)
            self.wfile.write(data[len(data) // 2:])
        except OSError:
            pass


@pytest.fixture
def held_index(tmp_path):
    url = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    write_wheel_env(tmp_path / "envs", "cu128")
    lock, home = tmp_path / "conda-lock.yml", Home(tmp_path / "home")
    lock_envs(tmp_path / "envs", lock, mirrors={"pypi": url}, home=home)
    Holding.holding, Holding.release = threading.Event(), threading.Event()
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0),
                                          functools.partial(Holding, directory=str(tmp_path / "simple")))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield home, lock, f"http://127.0.0.1:{srv.server_address[1]}"
    Holding.release.set()
    srv.shutdown()


_TGKILL = {"x86_64": 234, "aarch64": 131}   # the syscall's number: signal one thread of a process


def _to_another_thread(pid: int, signum: int) -> None:
    """`signum` to a thread of `pid` that is not its main thread, as the kernel may hand a
    process-directed signal to any thread (Python runs the handler in the main thread only)."""
    import ctypes

    tids = sorted(int(t) for t in os.listdir(f"/proc/{pid}/task") if int(t) != pid)
    assert tids, "the realise runs its download in threads"
    libc = ctypes.CDLL(None, use_errno=True)
    assert libc.syscall(_TGKILL[os.uname().machine], pid, tids[0], signum) == 0, ctypes.get_errno()


@pytest.mark.slow
@pytest.mark.parametrize("as_json,to_thread", [(True, False), (False, False), (False, True)],
                         ids=["json", "text", "to a download thread"])
def test_sigterm_during_a_realise_exits_130_with_one_error_line_and_an_empty_staging(held_index, as_json,
                                                                                       to_thread):
    """`to a download thread`: the signal lands on a thread while the main thread waits for the
    held download; the wait is in slices (`base.deadlines.join`), so it still stops at once."""
    if to_thread and os.uname().machine not in _TGKILL:
        pytest.skip("no tgkill number for this machine")
    home, lock, url = held_index
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu128", "--lock",
                             str(lock), "--home", str(home.root), "--mirror", f"pypi={url}",
                             *(["--json"] if as_json else [])],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        assert Holding.holding.wait(60), proc.communicate(timeout=30)     # the barrier: a body is held
        deadline = time.monotonic() + 60
        while not (home.staging.is_dir() and any(home.staging.iterdir())):   # the install is staging
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate(timeout=30)
        staged = sorted(p.name for p in home.staging.iterdir())
        if to_thread:
            _to_another_thread(proc.pid, signal.SIGTERM)
        else:
            proc.send_signal(signal.SIGTERM)
        out, err = proc.communicate(timeout=30)   # the server holds the body for 120 s
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err
    errs = [ln for ln in err.splitlines() if ln.startswith("error:")]
    assert errs == ["error: stopped by SIGTERM; nothing half-written was kept"], err
    if as_json:
        got = json.loads(out)
        assert got["exit"] == 130 and got["error"] == errs[0][len("error: "):]
    else:
        assert out == ""
    assert staged and not list(home.staging.iterdir()), (staged, list(home.staging.iterdir()))
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))


# A SIGTERM while the command line is still being read (argparse and the command's imports:
# the first 0.1-0.15 s of `env gc`, `env verify --repair`, `mirror export`, which take no quick
# path). Delivered by the process to itself from inside the parser: the same moment every time.
_SIGTERM_WHILE_PARSING = """
import os, signal, sys
from fdlenv.front import cli, parser
build = parser.build_parser
def parsing(*a, **kw):
    os.kill(os.getpid(), signal.SIGTERM)
    return build(*a, **kw)
parser.build_parser = parsing
sys.argv = ["fdlenv", *sys.argv[1:]]
sys.exit(cli.main())
"""


@pytest.mark.parametrize("argv", [["env", "gc"], ["env", "verify", "--repair", "cpu"],
                                  ["mirror", "export", "DIR"]], ids=["gc", "verify-repair", "export"])
def test_sigterm_while_the_command_line_is_read_is_130_with_one_line(tmp_path, argv):
    argv = [str(tmp_path / "out") if a == "DIR" else a for a in argv] + ["--home", str(tmp_path / "h")]
    res = subprocess.run([sys.executable, "-c", _SIGTERM_WHILE_PARSING, *argv], capture_output=True, text=True,
                         timeout=60)
    assert res.returncode == 130, (res.returncode, res.stderr)
    assert res.stderr.strip().splitlines()[-1] == "error: stopped by SIGTERM; nothing half-written was kept"
    assert "Traceback" not in res.stderr and not (tmp_path / "out").exists()
