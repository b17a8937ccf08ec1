"""Every https:// request of a process shares one TLS context, and it verifies as the default does.

A context loads the CA store (about 1 MiB each); urllib makes one per connection when given
none, so a cold realise (16 index pages and 7 downloads side by side) peaked some 20 MiB over
the same realise from a plain-http index. A real TLS server on 127.0.0.1 with a self-signed
certificate: trusted through SSL_CERT_FILE, every request answers and one context was made;
not trusted, the request fails on the certificate (verification was not loosened for sharing).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap

import pytest

pytestmark = pytest.mark.skipif(shutil.which("openssl") is None, reason="needs the openssl command")

_SERVER = textwrap.dedent("""
    import http.server, ssl, sys
    class H(http.server.BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        def log_message(self, *a): pass
        def do_GET(self):
            body = b"hello " + self.path.encode()
            self.send_response(200); self.send_header("Content-Length", str(len(body))); self.end_headers()
            self.wfile.write(body)
    s = http.server.ThreadingHTTPServer(("127.0.0.1", 0), H)
    ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER); ctx.load_cert_chain(sys.argv[1], sys.argv[2])
    s.socket = ctx.wrap_socket(s.socket, server_side=True)
    print(s.server_address[1], flush=True)
    s.serve_forever()
""")

_CLIENT = textwrap.dedent("""
    import ssl, sys
    made = []   # every TLS context the process makes, whoever makes it (urllib, http.client, fdlenv)
    real = ssl.SSLContext.__new__
    ssl.SSLContext.__new__ = lambda cls, *a, **k: made.append(1) or real(cls, *a, **k)
    from concurrent.futures import ThreadPoolExecutor
    from fdlenv.base import netread
    def one(i):
        with netread.open_url(f"{sys.argv[1]}/page{i}") as r:
            return r.read().decode()
    try:
        with ThreadPoolExecutor(8) as pool:
            got = list(pool.map(one, range(16)))
    except OSError as e:
        print("failed:", netread.why(e)); sys.exit(0)
    except netread.Fail as e:   # a certificate not trusted: permanent, named by the CA setting used
        print("failed:", e.message); sys.exit(0)
    print(len(made), sorted(got) == sorted(f"hello /page{i}" for i in range(16)))
""")


@pytest.fixture()
def tls_server(tmp_path):
    cert, key = tmp_path / "cert.pem", tmp_path / "key.pem"
    subprocess.run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2", "-subj", "/CN=127.0.0.1",
                    "-addext", "subjectAltName=IP:127.0.0.1", "-keyout", str(key), "-out", str(cert)],
                   check=True, capture_output=True)
    server = subprocess.Popen([sys.executable, "-c", _SERVER, str(cert), str(key)], stdout=subprocess.PIPE, text=True)
    try:
        port = server.stdout.readline().strip()
        yield f"https://127.0.0.1:{port}", cert
    finally:
        server.kill()
        server.wait()


def client(url: str, env_extra: dict[str, str]) -> str:
    import os

    cas = ("SSL_CERT_FILE", "SSL_CERT_DIR", "PIP_CERT", "REQUESTS_CA_BUNDLE", "CURL_CA_BUNDLE")   # the machine's
    env = {k: v for k, v in os.environ.items() if k not in cas} | {"PIP_CONFIG_FILE": os.devnull} | env_extra
    return subprocess.run([sys.executable, "-c", _CLIENT, url], capture_output=True, text=True, check=True,
                          env=env, timeout=60).stdout.strip()


def test_sixteen_https_requests_side_by_side_share_one_tls_context(tls_server):
    url, cert = tls_server
    assert client(url, {"SSL_CERT_FILE": str(cert)}) == "1 True"


def test_a_server_whose_certificate_is_not_trusted_is_refused(tls_server):
    url, _ = tls_server
    out = client(url, {})
    assert out.startswith("failed:") and "certificate" in out.lower(), out
