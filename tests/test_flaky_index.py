"""A flaky index costs seconds inside the attempt, not a re-dial: every request is tried again.

The suite's loopback index laid out like PyTorch's (helpers_pytorch_index) misbehaves once
per method and path, as a mirror that hiccups does: a 503 (with or without Retry-After), a
body cut half-way under its full Content-Length, an answer held for a moment. A fresh home
realises cu126 from it, locking on demand (project pages, PEP 658 `.metadata` files, or range
reads into the wheels where the index has no metadata) and then downloading the wheels: one
attempt, exit 0, and every path the realise asked for was struck by the fault first. Only a
fault that outlasts the tries is exit 1, and a Retry-After is honoured up to its cap.
"""

from __future__ import annotations

import http.server
import json
import threading
import time

import pytest
from helpers_pytorch_index import serve
from helpers_cli import fdlenv

from fdlenv.base import netconf, netread

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.fixture
def index(tmp_path):
    with serve(tmp_path / "idx") as idx:
        yield idx


@pytest.fixture
def bare_index(tmp_path):
    """The same index without PEP 658 files: core metadata is read by range requests."""
    with serve(tmp_path / "bare", metadata=False) as idx:
        yield idx


def realise(idx, home):
    return fdlenv("env", "realize", "--libtorch", "cu126", "--mirror", f"pytorch={idx.url}",
                  "--mirror", f"pypi={idx.simple}", "--home", str(home), "--json")


def struck(idx, fault: str) -> set[str]:
    return {path for f, _, path in idx.faulted if f == fault}


@pytest.mark.parametrize("faults", [("503",), ("cut",), ("stall", "503", "cut")])
def test_an_index_failing_once_per_path_is_realised_in_one_attempt(index, tmp_path, faults):
    index.faults = faults
    t0 = time.monotonic()
    res = realise(index, tmp_path / "home")
    took = time.monotonic() - t0
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["created"] is True
    asked = {p for _, p in index.calls}
    for fault in faults:
        paths = struck(index, fault)
        assert any(p.endswith(".metadata") for p in paths) and any(p.endswith(".whl") for p in paths)
        assert any(p.endswith("/") for p in paths)
        assert paths == asked       # every page, metadata file and wheel struck once, and tried again
    assert "trying again" in res.stderr
    print(f"{'+'.join(faults)} once per path: {len(asked)} paths, realised in one attempt in {took:.1f} s")


def test_range_reads_into_wheels_without_metadata_are_tried_again_after_a_503(bare_index, tmp_path):
    bare_index.faults = ("503",)
    res = realise(bare_index, tmp_path / "home")
    assert res.returncode == 0, res.stderr
    assert bare_index.ranges and any(p.endswith(".whl") for p in struck(bare_index, "503"))


def test_a_503_that_lasts_is_transient_once_the_tries_are_spent(tmp_path):
    class Down(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            self.send_response(503)
            self.send_header("Retry-After", "0")
            self.send_header("Content-Length", "0")
            self.end_headers()

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Down)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        url = f"http://127.0.0.1:{srv.server_address[1]}"
        res = fdlenv("env", "realize", "--libtorch", "cu126", "--mirror", f"pytorch={url}/whl",
                     "--mirror", f"pypi={url}/simple", "--home", str(tmp_path / "home"), "--json")
        assert res.returncode == 1, res.stderr
        last = res.stderr.strip().splitlines()[-1]
        assert last.startswith("error:") and "503" in last, last
        assert f"trying again in 0 s (2/{netread.TRIES})" in res.stderr
    finally:
        srv.shutdown()
        srv.server_close()


def _gap_server(retry_after: str):
    """A server answering 503 with `retry_after` the first time, then 200; it notes when each came."""
    came: list[float] = []

    class Once(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            came.append(time.monotonic())
            first = len(came) == 1
            self.send_response(503 if first else 200)
            if first:
                self.send_header("Retry-After", retry_after)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")

    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Once)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    return srv, came


@pytest.mark.parametrize(("retry_after", "wait"), [("1", 1.0), ("3600", 1.5)])
def test_retry_after_is_honoured_up_to_its_cap(monkeypatch, retry_after, wait):
    monkeypatch.setattr(netconf, "RETRY_AFTER_CAP", 1.5)
    srv, came = _gap_server(retry_after)
    try:
        body, _ = netread.fetch(f"http://127.0.0.1:{srv.server_address[1]}/page", 1 << 10)
    finally:
        srv.shutdown()
        srv.server_close()
    assert body == b"ok" and len(came) == 2
    gap = came[1] - came[0]
    assert wait <= gap < wait + 5    # as long as asked (over the 0.5 s pause), up to the cap, not an hour
