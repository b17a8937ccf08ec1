"""A private index as a company runs one: HTTPS under its own CA, Basic auth, a real proxy in front.

- `make_ca(dir)`: a CA made with `openssl`, a server certificate it signs for 127.0.0.1 and
  localhost, and a client certificate (cert and key in one PEM, as pip's `client-cert` takes);
- `PrivateIndex`: a loopback HTTPS server over a directory (a PEP 503 tree from
  helpers_wheels.make_index) that answers 401 unless the request carries one of `accepted`
  as Basic auth, answers range requests, optionally asks for a client certificate, and records every request's path
  and Authorization header (`seen`), so a test says which requests carried what;
- `tinyproxy(dir, user, password)`: Debian's tinyproxy on 127.0.0.1 with its own config and
  Basic auth, started and read until it says it accepts connections; its log shows each CONNECT;
- `leaks(secrets, texts, roots)`: every place a secret (or its percent-encoded form) shows up
  in the given outputs and in any file under the given directories.
"""

from __future__ import annotations

import base64
import functools
import http.server
import os
import shutil
import socket
import ssl
import subprocess
import threading
import urllib.parse
from pathlib import Path

import pytest

# Variables of this machine (and of a developer's) that would decide a TLS, proxy or index question
# a test asks itself: cleared from every child's environment.
MACHINE_VARS = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "PIP_CLIENT_CERT", "PIP_FIND_LINKS", "PIP_INDEX_URL",
                "PIP_EXTRA_INDEX_URL", "PIP_PROXY", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE", "NETRC", "UV_DEFAULT_INDEX",
                "UV_INDEX_URL", "UV_NATIVE_TLS", "UV_CONFIG_FILE", "PIP_CONFIG_FILE")


def clean_env(**extra: str) -> dict[str, str]:
    """os.environ without the machine's TLS, proxy and index settings (pip's config files and
    uv's shut out), plus `extra`."""
    env = {k: v for k, v in os.environ.items()
           if k not in MACHINE_VARS and not k.lower().endswith("_proxy") and not k.startswith("UV_INDEX_")}
    return env | {"PIP_CONFIG_FILE": os.devnull, "UV_NO_CONFIG": "1"} | extra


def _openssl(*args: str) -> None:
    subprocess.run(["openssl", *args], check=True, capture_output=True)


def make_ca(d: Path) -> dict[str, Path]:
    """ca.pem, server.pem/server.key (127.0.0.1, localhost), client.pem (cert + key); paths by name."""
    if shutil.which("openssl") is None:
        pytest.skip("needs the openssl command")
    d.mkdir(parents=True, exist_ok=True)
    p = {n: d / n for n in ("ca.pem", "ca.key", "server.pem", "server.key", "server.csr", "client.pem",
                            "client.key", "client.csr", "client.crt", "ext.cnf")}
    _openssl("req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=fdlenv test CA",
             "-keyout", str(p["ca.key"]), "-out", str(p["ca.pem"]))
    p["ext.cnf"].write_text("subjectAltName=IP:127.0.0.1,DNS:localhost\n")
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=127.0.0.1", "-keyout", str(p["server.key"]),
             "-out", str(p["server.csr"]))
    _openssl("x509", "-req", "-in", str(p["server.csr"]), "-CA", str(p["ca.pem"]), "-CAkey", str(p["ca.key"]),
             "-CAcreateserial", "-days", "2", "-extfile", str(p["ext.cnf"]), "-out", str(p["server.pem"]))
    _openssl("req", "-newkey", "rsa:2048", "-nodes", "-subj", "/CN=box", "-keyout", str(p["client.key"]),
             "-out", str(p["client.csr"]))
    _openssl("x509", "-req", "-in", str(p["client.csr"]), "-CA", str(p["ca.pem"]), "-CAkey", str(p["ca.key"]),
             "-CAcreateserial", "-days", "2", "-out", str(p["client.crt"]))
    p["client.pem"].write_text(p["client.crt"].read_text() + p["client.key"].read_text())
    return p


class PrivateIndex:
    """An HTTPS server over `root` on 127.0.0.1 (`host` in `url`: 127.0.0.1 or localhost)."""

    def __init__(self, root: Path, certs: dict[str, Path], accepted: tuple[tuple[str, str], ...] = (),
                 client_cert: bool = False, host: str = "127.0.0.1"):
        self.seen: list[tuple[str, str | None]] = []
        served = self
        wanted = {"Basic " + base64.b64encode(f"{u}:{p}".encode()).decode() for u, p in accepted}

        class Handler(http.server.SimpleHTTPRequestHandler):
            def log_message(self, *a):
                pass

            def send_head(self):
                auth = self.headers.get("Authorization")
                served.seen.append((self.path, auth))
                if wanted and auth not in wanted:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="fleet"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                local = Path(self.translate_path(urllib.parse.urlsplit(self.path).path))
                rng = self.headers.get("Range", "")
                if rng.startswith("bytes=") and local.is_file():   # what a lazy-wheel reader asks
                    import io
                    data = local.read_bytes()
                    first, _, last = rng.removeprefix("bytes=").partition("-")
                    start = max(len(data) - int(last), 0) if not first else int(first)
                    end = len(data) - 1 if not first or not last else min(int(last), len(data) - 1)
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                    self.send_header("Content-Length", str(end - start + 1))
                    self.end_headers()
                    return io.BytesIO(data[start:end + 1])
                return super().send_head()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), functools.partial(Handler, directory=str(root)))
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs["server.pem"], certs["server.key"])
        if client_cert:
            ctx.verify_mode = ssl.CERT_REQUIRED
            ctx.load_verify_locations(certs["ca.pem"])
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.port = self.server.server_address[1]
        self.url = f"https://{host}:{self.port}"
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Tinyproxy:
    """Debian's tinyproxy on 127.0.0.1 with Basic auth; `url` carries no credentials."""

    def __init__(self, d: Path, user: str, password: str):
        exe = shutil.which("tinyproxy")
        if exe is None:
            pytest.skip("needs tinyproxy (README line 2 installs it: apt-get install tinyproxy)")
        d.mkdir(parents=True, exist_ok=True)
        self.port = free_port()
        self.log = d / "tinyproxy.log"
        conf = d / "tinyproxy.conf"
        conf.write_text(f"Port {self.port}\nListen 127.0.0.1\nTimeout 60\nLogLevel Info\nMaxClients 50\n"
                        f"Allow 127.0.0.1\nBasicAuth {user} {password}\nPidFile \"{d / 'pid'}\"\n")
        self.proc = subprocess.Popen([exe, "-d", "-c", str(conf)], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        lines = []
        assert self.proc.stdout is not None
        guard = threading.Timer(60, self.proc.kill)   # one that never says so ends the wait
        guard.start()
        for line in self.proc.stdout:       # the barrier: tinyproxy says when it accepts
            lines.append(line)
            if "Accepting connections" in line:
                break
        guard.cancel()
        if not lines or "Accepting connections" not in lines[-1]:
            pytest.fail("tinyproxy did not start:\n" + "".join(lines[-20:]))
        self.lines = lines
        out = self.proc.stdout

        def drain():
            for line in out:
                self.lines.append(line)
        threading.Thread(target=drain, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.port}"

    def close(self) -> None:
        self.proc.terminate()
        self.proc.wait()


def encoded(secret: str) -> set[str]:
    return {secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote(secret)}


def leaks(secrets: list[str], texts: dict[str, str], roots: list[Path], allowed: tuple[Path, ...] = ()) -> list[str]:
    """Where any of `secrets` (or a percent-encoded form) appears: in `texts` (name -> text) or
    in a file under `roots` (the files in `allowed`, where a person put it, aside)."""
    forms = {f.encode() for s in secrets for f in encoded(s)}
    found = [name for name, text in texts.items() if any(f.decode() in text for f in forms)]
    for root in roots:
        for path in root.rglob("*"):
            if path in allowed or path.is_symlink() or not path.is_file():
                continue
            data = path.read_bytes()
            found += [str(path) for f in forms if f in data][:1]
    return found


class AuthFront:
    """What stands before a devpi-server whose reads need a password (devpi-server itself lets
    anyone read; a fleet puts nginx with devpi-lockdown, or any front asking for Basic auth, in
    front of it): HTTPS under `certs`, every request's Basic credentials checked by devpi's own
    `POST /+login`, then passed to devpi at `backend` (its pages link files relatively, so they
    come through here too); `seen` records each (path, whether credentials came and passed)."""

    def __init__(self, certs: dict[str, Path]):
        self.backend = ""
        self.seen: list[tuple[str, bool]] = []
        self.checked: dict[str, bool] = {}
        front = self

        class Handler(http.server.BaseHTTPRequestHandler):
            protocol_version = "HTTP/1.1"

            def log_message(self, *a):
                pass

            def do_HEAD(self):
                self.do_GET()

            def do_GET(self):
                ok = front.allowed(self.headers.get("Authorization", ""))
                front.seen.append((self.path, ok))
                if not ok:
                    self.send_response(401)
                    self.send_header("WWW-Authenticate", 'Basic realm="devpi"')
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return
                import urllib.error
                import urllib.request

                req = urllib.request.Request(front.backend + self.path, method=self.command,
                                             headers={k: v for k, v in self.headers.items()
                                                      if k.lower() in ("accept", "range")})
                try:
                    resp = urllib.request.urlopen(req, timeout=60)
                except urllib.error.HTTPError as e:
                    resp = e
                body = resp.read()
                self.send_response(resp.status)
                for k, v in resp.headers.items():
                    if k.lower() in ("content-type", "content-range"):
                        self.send_header(k, v)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                if self.command != "HEAD":
                    self.wfile.write(body)

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.server.daemon_threads = True
        ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        ctx.load_cert_chain(certs["server.pem"], certs["server.key"])
        self.server.socket = ctx.wrap_socket(self.server.socket, server_side=True)
        self.url = f"https://127.0.0.1:{self.server.server_address[1]}"

    def start(self, backend: str) -> None:
        self.backend = backend
        threading.Thread(target=self.server.serve_forever, daemon=True).start()

    def allowed(self, auth: str) -> bool:
        """Whether `auth` (an Authorization header) names a devpi user with its password."""
        if not auth.startswith("Basic "):
            return False
        if auth not in self.checked:
            import json
            import urllib.error
            import urllib.request

            user, _, password = base64.b64decode(auth[6:]).decode().partition(":")
            req = urllib.request.Request(self.backend + "/+login", method="POST",
                                         data=json.dumps({"user": user, "password": password}).encode(),
                                         headers={"Content-Type": "application/json", "Accept": "application/json"})
            try:
                with urllib.request.urlopen(req, timeout=60) as r:
                    self.checked[auth] = r.status == 200
            except urllib.error.HTTPError:
                self.checked[auth] = False
        return self.checked[auth]

    def close(self) -> None:
        self.server.shutdown()
        self.server.server_close()
