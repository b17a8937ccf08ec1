"""A mirror that serves other bytes, too many, too few or too slowly: bounded before the hash, and
classified by cause (netread, store/streamzip, store/wheels, store/wheelfile, simpleapi).

The index is a real PEP 503 tree of real wheels, served over HTTP on 127.0.0.1 by a handler
that misbehaves the way each test says; the lock comes from `fdlenv lock` against it.
"""

from __future__ import annotations

import functools
import http.server
import io
import json
import os
import socket
import threading
import time
import zipfile

import pytest
from helpers_cli import fdlenv
from helpers_wheels import make_index, make_wheels, sha256, write_wheel_env

from fdlenv.base import netread
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


class Faulty(http.server.SimpleHTTPRequestHandler):
    """Static files, except the torch wheel, served as `mode` says."""

    mode = "normal"
    body: bytes = b""          # what "other" serves instead of the file

    def log_message(self, *a):
        pass

    def do_GET(self):
        path = self.translate_path(self.path)
        if not os.path.basename(path).startswith("torch-") or type(self).mode == "normal":
            return super().do_GET()
        data = open(path, "rb").read()
        mode = type(self).mode
        if mode == "cut-once":      # the first answer is cut, every later one whole
            type(self).mode = "normal"
            mode = "cut"
        if mode == "slow":
            data = data + b"\0" * (64 << 20)        # longer than any test waits; never whole
        self.send_response(206 if mode.startswith("206") else 200)
        if mode == "206-zero":        # a range asked, the whole file sent as a range from 0
            self.send_header("Content-Range", f"bytes 0-{len(data) - 1}/{len(data)}")
            self.send_header("Content-Length", str(len(data)))
        elif mode == "cut-length":
            self.send_header("Content-Length", str(len(data)))
        elif mode == "other":
            self.send_header("Content-Length", str(len(type(self).body)))
        self.end_headers()
        try:
            if mode in ("cut", "cut-length"):
                self.wfile.write(data[: len(data) // 2])
            elif mode == "other":
                self.wfile.write(type(self).body)
            elif mode == "slow":          # a 64 KiB piece every 50 ms: minutes for the whole wheel
                for i in range(0, len(data), 65536):
                    self.wfile.write(data[i:i + 65536])
                    self.wfile.flush()
                    time.sleep(0.05)
            elif mode == "endless":
                self.wfile.write(data)
                while True:
                    self.wfile.write(b"\0" * 65536)
            else:
                self.wfile.write(data)
        except (BrokenPipeError, ConnectionResetError):
            pass
        self.close_connection = True


@pytest.fixture
def mirror(tmp_path):
    url = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    lock = tmp_path / "conda-lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, lock, mirrors={"pypi": url}, home=home)
    Faulty.mode, Faulty.body = "normal", b""
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Faulty, directory=str(tmp_path / "simple")))
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    torch = next((tmp_path / "simple" / "files").glob("torch-*.whl"))
    page = tmp_path / "simple" / "torch" / "index.html"
    page.write_text(page.read_text().split("#sha256=")[0] + '">x</a>\n')   # no hash stated: the body decides
    yield home, lock, f"http://127.0.0.1:{srv.server_address[1]}", torch
    srv.shutdown()


def _realise(home, lock, url):
    return fdlenv("env", "realize", "--libtorch", "cu128", "--lock", str(lock), "--home", str(home.root),
                  "--mirror", f"pypi={url}", "--json")


def _one_error(res) -> str:
    assert "Traceback" not in res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error:"), res.stderr
    return last


def _nothing_published(home) -> None:
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))
    assert not list(home.pkgs.glob("whl-*")) or all("torch" not in p.name for p in home.pkgs.glob("whl-*"))
    assert not list(home.pkgs.glob(".whl-*"))


def _bomb(megabytes: int) -> bytes:
    """A zip whose one member inflates `megabytes` MiB of zeros from well under 1% of that."""
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        info = zipfile.ZipInfo("torch/lib/libtorch.so")
        info.compress_type = zipfile.ZIP_DEFLATED
        with z.open(info, "w", force_zip64=True) as f:
            zero = b"\0" * (1 << 20)
            for _ in range(megabytes):
                f.write(zero)
    return out.getvalue()


@pytest.mark.parametrize("mode", ["cut", "cut-length"])
def test_a_download_cut_mid_body_is_transient_and_the_next_try_succeeds(mirror, mode):
    home, lock, url, _ = mirror
    Faulty.mode = mode
    res = _realise(home, lock, url)
    assert res.returncode == 1, res.stderr
    last = _one_error(res)
    assert "tampered" not in last and ("ended early" in last or "cut" in last), last
    assert res.stderr.count("trying again") == 2          # tried three times before saying so
    _nothing_published(home)
    Faulty.mode = "normal"
    res = _realise(home, lock, url)
    assert res.returncode == 0, res.stderr


def test_a_download_cut_once_is_tried_again_and_the_realise_succeeds(mirror):
    home, lock, url, _ = mirror
    Faulty.mode = "cut-once"
    res = _realise(home, lock, url)
    assert res.returncode == 0, res.stderr
    assert "trying again (2/3)" in res.stderr


def test_a_zip_bomb_in_place_of_the_wheel_stops_at_the_ratio_cap(mirror):
    home, lock, url, _ = mirror
    Faulty.mode, Faulty.body = "other", _bomb(1024)
    assert len(Faulty.body) < 8 << 20
    res = _realise(home, lock, url)
    assert res.returncode == 2
    assert "inflates over" in _one_error(res)
    _nothing_published(home)


def test_an_endless_body_after_a_whole_zip_is_cut_off_and_permanent(mirror):
    home, lock, url, _ = mirror
    Faulty.mode = "endless"
    res = _realise(home, lock, url)
    assert res.returncode == 2
    assert "central directory runs past" in _one_error(res)
    _nothing_published(home)


def test_a_resume_answered_with_the_whole_file_as_a_range_from_zero_starts_over(mirror):
    home, lock, url, torch = mirror
    data = torch.read_bytes()
    home.ensure(home.archives)
    (home.archives / f".{sha256(torch)}.part").write_bytes(data[: len(data) // 3])   # a killed run's part
    Faulty.mode = "206-zero"
    res = _realise(home, lock, url)
    assert res.returncode == 0, res.stderr


def test_a_range_answer_to_a_whole_file_request_is_transient(mirror):
    home, lock, url, _ = mirror
    Faulty.mode = "206-plain"
    res = _realise(home, lock, url)
    assert res.returncode == 1 and "206" in _one_error(res)
    _nothing_published(home)


def test_garbage_in_place_of_the_wheel_is_permanent_without_a_traceback(mirror):
    home, lock, url, _ = mirror
    Faulty.mode, Faulty.body = "other", b"PK\x03\x04" + os.urandom(4096)
    res = _realise(home, lock, url)
    last = _one_error(res)
    assert res.returncode == 2 and ("well-formed" in last or "does not match the lock" in last), last
    _nothing_published(home)


def test_a_wheel_whose_record_lies_about_a_size_is_refused(tmp_path):
    import base64
    import hashlib

    built = make_wheels(tmp_path / "built")
    torch = built[0]
    with zipfile.ZipFile(torch) as z:
        items = {i.filename: z.read(i) for i in z.infolist()}
    record = next(n for n in items if n.endswith(".dist-info/RECORD"))
    lib = "torch/lib/libtorch.so"
    digest = base64.urlsafe_b64encode(hashlib.sha256(items[lib]).digest()).rstrip(b"=").decode()
    items[record] = items[record].replace(f"{lib},sha256={digest},{len(items[lib])}".encode(),
                                          f"{lib},sha256={digest},{len(items[lib]) + 1}".encode())
    with zipfile.ZipFile(torch, "w", zipfile.ZIP_DEFLATED) as z:
        for name, data in items.items():
            z.writestr(name, data)
    url = make_index(tmp_path / "simple", built)
    write_wheel_env(tmp_path / "envs", "cu128")
    home = Home(tmp_path / "home")
    lock_envs(tmp_path / "envs", tmp_path / "lock.yml", mirrors={"pypi": url}, home=home)
    res = _realise(home, tmp_path / "lock.yml", url)
    assert res.returncode == 2 and "RECORD states" in _one_error(res)


# ---------------------------------------------------------------- index traffic, unit level

class _Trickle(http.server.BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.end_headers()
        try:
            if self.path.startswith("/endless"):
                while True:
                    self.wfile.write(b"<a>" * 20000)
            for _ in range(1000):
                self.wfile.write(b"<")
                self.wfile.flush()
                time.sleep(0.05)      # the server's pace (the client's deadline is what is tested)
        except (BrokenPipeError, ConnectionResetError):
            pass


@pytest.fixture
def trickle():
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Trickle)
    srv.daemon_threads = True
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_a_page_that_trickles_ends_at_its_deadline_as_transient(trickle):
    with netread.open_url(trickle + "/slow") as resp, pytest.raises(Fail) as e:
        netread.read_all(resp, 1 << 20, trickle + "/slow", deadline=0.5)
    assert e.value.transient and "did not finish within 0.5 s" in e.value.message


def test_an_endless_page_is_cut_at_its_cap_as_permanent(trickle):
    with netread.open_url(trickle + "/endless") as resp, pytest.raises(Fail) as e:
        netread.read_all(resp, 4 << 20, trickle + "/endless")
    assert not e.value.transient and "sent over 4 MiB" in e.value.message


def test_an_index_naming_local_files_is_never_read_from(tmp_path):
    """JSON `url`s and HTML hrefs of file:// from a remote index are dropped before anything opens them."""
    from fdlenv.index import simpleapi

    root = tmp_path / "idx"
    for project in ("html", "json"):   # each file a wheel of its page's project (any other is refused)
        secret = tmp_path / f"{project}-0.9-py3-none-any.whl"
        secret.write_bytes(b"local")
        ok = f"{project}-1.0-py3-none-any.whl"
        (root / project).mkdir(parents=True)
        (root / project / "index.html").write_text(
            f'<a href="{secret.as_uri()}">{secret.name}</a>\n<a href="{ok}">{ok}</a>\n' if project == "html" else
            json.dumps({"files": [{"filename": secret.name, "url": secret.as_uri(), "hashes": {}},
                                  {"filename": ok, "url": ok, "hashes": {}}]}))

    class Typed(http.server.SimpleHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def guess_type(self, path):
            return simpleapi.JSON_TYPE if "/json/" in str(path) else "text/html"

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Typed, directory=str(root)))
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        base = f"http://127.0.0.1:{srv.server_address[1]}"
        for project in ("html", "json"):
            files = simpleapi.project_files(base, project)
            assert [f.filename for f in files] == [f"{project}-1.0-py3-none-any.whl"]
            assert all(f.url.startswith(base) for f in files)
    finally:
        srv.shutdown()


def test_a_download_that_stalls_is_transient():
    a, b = socket.socketpair()
    reader = a.makefile("rb")
    b.sendall(b"x" * 10)
    netread_window = netread.STALL_WINDOW
    try:
        netread.STALL_WINDOW = 0.2
        got = netread.chunks(reader, "http://mirror/x.whl", 1 << 20, size=4)
        assert next(got) == b"xxxx"
        time.sleep(0.3)          # the window passes with 10 bytes: below STALL_BYTES
        with pytest.raises(Fail) as e:
            list(got)
        assert e.value.transient and "stalled" in e.value.message
    finally:
        netread.STALL_WINDOW = netread_window
        a.close()
        b.close()


@pytest.mark.parametrize("presses", [1, 2])
def test_ctrl_c_ends_a_realise_at_once_with_130_and_leaves_no_debris(mirror, presses):
    import signal
    import subprocess
    import sys

    home, lock, url, _ = mirror
    Faulty.mode = "slow"
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cu128", "--lock",
                             str(lock), "--home", str(home.root), "--mirror", f"pypi={url}"],
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    while not list(home.pkgs.glob(".whl-*")) if home.pkgs.is_dir() else True:   # the marker: a download under way
        assert proc.poll() is None, proc.communicate()
    for _ in range(presses):
        os.killpg(proc.pid, signal.SIGINT)          # what a terminal's Ctrl-C sends: the whole group
    out, err = proc.communicate(timeout=10)          # a liveness bound; the downloads alone take minutes
    assert proc.returncode == 130, err
    assert "Traceback" not in err and "Exception ignored" not in err
    assert err.strip().splitlines()[-1] == "error: interrupted"
    assert not list(home.pkgs.glob(".*")), (err, [(p.name, sorted(os.listdir(p))[:5]) for p in home.pkgs.glob(".*")])
    assert not (home.staging.is_dir() and list(home.staging.iterdir()))
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))


def test_a_body_arriving_in_small_pieces_is_handed_out_gathered_and_whole(monkeypatch):
    # Over HTTPS a read hands out one 16 KiB TLS record; the pieces are gathered into one
    # buffer the reader refills, so each must be consumed (hashed, copied) before the next.
    import hashlib

    class Records:                       # a TLS stream's reads: one 16 KiB record at most
        def __init__(self, f):
            self.f = f

        def read1(self, n):
            return self.f.read1(min(n, 16 << 10))

    monkeypatch.setattr(netread, "GATHER", 60.0)    # gathering is bounded by size here, never by time
    body = os.urandom(300_000)
    a, b = socket.socketpair()

    def send():
        b.sendall(body)
        b.close()
    sender = threading.Thread(target=send)
    sender.start()
    try:
        got, sizes, h = bytearray(), [], hashlib.sha256()
        for piece in netread.chunks(Records(a.makefile("rb")), "http://mirror/x.whl", 1 << 20, size=128 << 10):
            h.update(piece)
            got += piece
            sizes.append(len(piece))
        assert bytes(got) == body and h.hexdigest() == hashlib.sha256(body).hexdigest()
        assert sizes == [128 << 10, 128 << 10, len(body) - (256 << 10)]   # gathered past the 16 KiB records
    finally:
        sender.join()
        a.close()
