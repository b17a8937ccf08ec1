"""A wheel an env file names by URL, and `pack libtorch --from URL`, read as every index is read:
pip's CAs, the URL's own user:password sent to its origin only, and nothing secret kept.

Both once called urllib directly: a private HTTPS host was refused (its CA unknown), and the
URL's password went into the lock. Each test serves the file from a real HTTPS server under a
CA made with openssl, which answers 401 without the credentials, and runs fdlenv in a child
whose environment names that CA as pip's `cert` (PIP_CERT), which urllib alone never reads."""

from __future__ import annotations

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_private_index import PrivateIndex, clean_env, leaks, make_ca
from test_pack_libtorch import official_zip, torch_wheel

USER, PASSWORD = "fleet", "s3cret-pw"


@pytest.fixture
def served(tmp_path):
    root = tmp_path / "served"
    root.mkdir()
    certs = make_ca(tmp_path / "ca")
    server = PrivateIndex(root, certs, accepted=((USER, PASSWORD),))
    yield root, server, certs
    server.close()


def _child(code: str, certs: dict[str, Path], home: Path) -> subprocess.CompletedProcess[str]:
    env = clean_env(PIP_CERT=str(certs["ca.pem"]), HOME=str(home), FLODL_HOME=str(home / ".flodl"))
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)


def test_an_env_files_wheel_url_with_a_password_is_read_under_the_ca_and_the_lock_never_holds_the_password(served, tmp_path):
    root, server, certs = served
    wheel = torch_wheel(root)
    env_file = tmp_path / "envs" / "cpu.yml"
    env_file.parent.mkdir()
    url = f"https://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{wheel.name}"
    res = _child("import json, sys\nfrom pathlib import Path\nfrom fdlenv.lock.envfile import _wheel\n"
                 f"w = _wheel({url!r}, Path({str(env_file)!r}))\n"
                 "print(json.dumps({'url': w.url, 'sha256': w.sha256}))", certs, tmp_path / "h")
    assert res.returncode == 0, res.stderr
    got = json.loads(res.stdout)
    assert got["sha256"] == hashlib.sha256(wheel.read_bytes()).hexdigest()
    assert got["url"] == f"https://127.0.0.1:{server.port}/{wheel.name}"       # what a lock would hold
    assert [auth is not None for path, auth in server.seen if path.endswith(".whl")] == [True]
    assert leaks([PASSWORD], {"stdout": res.stdout, "stderr": res.stderr}, [tmp_path / "h"]) == []


def test_an_env_files_wheel_url_refused_for_its_credentials_is_one_line_without_the_password(served, tmp_path):
    root, server, certs = served
    wheel = torch_wheel(root)
    url = f"https://{USER}:wrong-pw@127.0.0.1:{server.port}/{wheel.name}"
    res = _child("import sys\nfrom pathlib import Path\nfrom fdlenv.base.errors import Fail\n"
                 "from fdlenv.lock.envfile import _wheel\n"
                 f"try:\n    _wheel({url!r}, Path('cpu.yml'))\n"
                 "except Fail as f:\n    print(f.message); sys.exit(2 if not f.transient else 1)\n",
                 certs, tmp_path / "h")
    assert res.returncode == 2, (res.stdout, res.stderr)
    assert "401" in res.stdout and "wrong-pw" not in res.stdout + res.stderr


def test_pack_libtorch_downloads_from_a_private_https_url_with_its_password_and_packs_the_same_bytes(served, tmp_path):
    root, server, certs = served
    src = official_zip(root)
    url = f"https://{USER}:{PASSWORD}@127.0.0.1:{server.port}/{src.name}"
    channel = tmp_path / "channel"
    res = _child("from pathlib import Path\nfrom fdlenv.pack.libtorch import pack_libtorch\n"
                 f"p = pack_libtorch('12.8', {url!r}, Path({str(channel)!r}))\nprint(p.source_sha256)",
                 certs, tmp_path / "h")
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip().splitlines()[-1] == hashlib.sha256(src.read_bytes()).hexdigest()
    assert any(path.endswith(".zip") and auth is not None for path, auth in server.seen)
    assert leaks([PASSWORD], {"stdout": res.stdout, "stderr": res.stderr}, [tmp_path / "h", channel]) == []
