"""A loopback wheel index served the way real indexes serve (bench/wheels.py, loopback rows).

`python -m http.server` ignores `Range`: uv then reads every wheel twice (its metadata from a
full download, then the install), which doubles uv's time and flatters fdlenv. This server
answers as a real index (and its CDN) does:
- files by `os.sendfile`, a thread per connection, HTTP/1.1 keep-alive;
- `Range: bytes=a-b`, `bytes=a-`, `bytes=-n` answered 206 with `Content-Range`; a range past the
  end 416 with `Content-Range: bytes */SIZE`; several ranges or a malformed one: the whole file
  (200, as RFC 9110 allows); `HEAD` with `Content-Length` and `Accept-Ranges: bytes`;
- project pages `/<project>/` in one of two forms, chosen at start:
  plain: PEP 503 HTML with `#sha256=` fragments and no sizes (what `mirror export` writes and
         what a devpi or plain file mirror serves);
  sized: PEP 691 JSON with PEP 700's `size` to a client whose Accept asks for
         `application/vnd.pypi.simple.v1+json` (fdlenv's simpleapi and uv both do), HTML otherwise;
- no PEP 658 `.metadata` files: a client wanting a wheel's metadata reads its zip directory with
  Range requests (uv's lazy wheel, fdlenv's simpleapi), the case this row exists to time.

Started as a process by bench/wheels.py; it prints its port on the first line of stdout.

    python bench/serve.py --files FILES.json [--sized] [--port 0]

FILES.json: a list of {"project", "filename", "sha256", "path"}; only those files are served
(their hashes come from the lock the bench read, so the server hashes nothing at start).
"""

from __future__ import annotations

import argparse
import contextlib
import html
import json
import os
import re
import subprocess
import sys
import urllib.parse
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
PIECE = 8 << 20          # bytes per sendfile call


def parse_range(header: str | None, size: int) -> tuple[int, int] | None | str:
    """(first, last) byte of one `bytes=` range; None: serve the whole file (no header, several
    ranges, a malformed one); "unsatisfiable": a 416."""
    m = re.fullmatch(r"bytes=(\d*)-(\d*)", (header or "").strip())
    if m is None or m.group(1) == m.group(2) == "":
        return None
    first, last = m.groups()
    if not first:                                   # bytes=-n: the last n bytes
        n = int(last)
        return (max(0, size - n), size - 1) if n > 0 and size > 0 else "unsatisfiable"
    a = int(first)
    if last and int(last) < a:
        return None
    return (a, min(int(last), size - 1) if last else size - 1) if a < size else "unsatisfiable"


class Index:
    def __init__(self, files: list[dict], sized: bool):
        self.sized = sized
        self.projects: dict[str, list[dict]] = {}
        self.paths: dict[str, str] = {}
        for f in files:
            f = {**f, "size": os.path.getsize(f["path"])}
            self.projects.setdefault(f["project"], []).append(f)
            self.paths[f"/{f['project']}/{urllib.parse.quote(f['filename'])}"] = f["path"]

    def page(self, project: str, want_json: bool) -> tuple[bytes, str] | None:
        if project not in self.projects:
            return None
        files = self.projects[project]
        if want_json and self.sized:
            doc = {"meta": {"api-version": "1.1"}, "name": project,
                   "versions": sorted({f["filename"].split("-")[1] for f in files}),
                   "files": [{"filename": f["filename"], "url": urllib.parse.quote(f["filename"]),
                              "hashes": {"sha256": f["sha256"]}, "size": f["size"]} for f in files]}
            return json.dumps(doc).encode(), JSON_TYPE
        links = "".join(f'<a href="{urllib.parse.quote(f["filename"])}#sha256={f["sha256"]}">'
                        f'{html.escape(f["filename"])}</a><br/>\n' for f in files)
        return (f"<!DOCTYPE html><html><body><h1>Links for {project}</h1>\n{links}</body></html>\n".encode(),
                "text/html")

    def root(self) -> bytes:
        links = "".join(f'<a href="{p}/">{p}</a><br/>\n' for p in sorted(self.projects))
        return f"<!DOCTYPE html><html><body>\n{links}</body></html>\n".encode()


def handler(index: Index):
    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def log_message(self, format, *args):
            pass

        def do_HEAD(self) -> None:
            self.answer(body=False)

        def do_GET(self) -> None:
            self.answer(body=True)

        def small(self, status: int, data: bytes, ctype: str, body: bool) -> None:
            self.send_response(status)
            self.send_header("Content-Type", ctype)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if body:
                self.wfile.write(data)

        def answer(self, body: bool) -> None:
            path = urllib.parse.urlsplit(self.path).path
            if path in index.paths:
                return self.file(index.paths[path], body)
            parts = [p for p in path.split("/") if p]
            if not parts:
                return self.small(200, index.root(), "text/html", body)
            page = index.page(parts[0], JSON_TYPE in self.headers.get("Accept", "")) if len(parts) == 1 else None
            if page is None:
                return self.small(404, b"not found\n", "text/plain", body)
            if not path.endswith("/"):
                self.send_response(301)
                self.send_header("Location", path + "/")
                self.send_header("Content-Length", "0")
                return self.end_headers()
            self.small(200, *page, body)

        def file(self, fpath: str, body: bool) -> None:
            with open(fpath, "rb") as f:
                size = os.fstat(f.fileno()).st_size
                rng = parse_range(self.headers.get("Range"), size)
                if rng == "unsatisfiable":
                    self.send_response(416)
                    self.send_header("Content-Range", f"bytes */{size}")
                    self.send_header("Content-Length", "0")
                    return self.end_headers()
                first, last = rng if isinstance(rng, tuple) else (0, size - 1)
                self.send_response(206 if isinstance(rng, tuple) else 200)
                if isinstance(rng, tuple):
                    self.send_header("Content-Range", f"bytes {first}-{last}/{size}")
                self.send_header("Content-Type", "application/octet-stream")
                self.send_header("Accept-Ranges", "bytes")
                self.send_header("Content-Length", str(last - first + 1))
                self.end_headers()
                if not body:
                    return
                sock, offset, left = self.connection.fileno(), first, last - first + 1
                while left > 0:
                    sent = os.sendfile(sock, f.fileno(), offset, min(left, PIECE))
                    if sent == 0:
                        raise ConnectionError("the client went away")
                    offset, left = offset + sent, left - sent

    return Handler


@contextlib.contextmanager
def started(files: list[dict], sized: bool, where: Path):
    """This server in a process of its own, serving `files` (see FILES.json above); yields its
    base URL (`http://127.0.0.1:PORT`) and stops it on leaving."""
    listing = where / ("files-sized.json" if sized else "files.json")
    listing.write_text(json.dumps(files))
    proc = subprocess.Popen([sys.executable, __file__, "--files", str(listing), *(["--sized"] if sized else [])],
                            stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout is not None
        port = proc.stdout.readline().strip()
        if not port.isdigit():
            sys.exit(f"serve.py: the loopback server did not start (exit {proc.wait()})")
        yield f"http://127.0.0.1:{port}"
    finally:
        proc.terminate()
        proc.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", required=True, help="JSON list of {project, filename, sha256, path}")
    ap.add_argument("--sized", action="store_true", help="PEP 691 JSON pages with PEP 700 sizes")
    ap.add_argument("--port", type=int, default=0)
    a = ap.parse_args()
    with open(a.files) as f:
        index = Index(json.load(f), a.sized)
    server = ThreadingHTTPServer(("127.0.0.1", a.port), handler(index))
    server.daemon_threads = True
    print(server.server_address[1], flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    sys.exit(0)


if __name__ == "__main__":
    main()
