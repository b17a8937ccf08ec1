"""Remote archives: fetched once into archives/<sha256>, hashed while they stream, never kept when wrong.

The channel is served by a real HTTP server on 127.0.0.1 and the lock comes
from a real solve against that URL (rattler reads the served repodata).
"""

from __future__ import annotations

import functools
import http.server
import json
import threading

import pytest
from helpers_conda import write_env
from helpers_cli import fdlenv
from helpers_store import make_world, variant_pkg

from fdlenv.lock import lock_envs
from fdlenv.pack.condapkg import write_conda

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.fixture
def served(tmp_path):
    """A world whose lock names http:// URLs of its channel."""
    w = make_world(tmp_path)
    handler = functools.partial(http.server.SimpleHTTPRequestHandler, directory=str(w.home.channel.parent))
    handler.log_message = lambda *a: None
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    url = f"http://127.0.0.1:{srv.server_address[1]}/flodl"
    write_env(w.envs, "cpu", [url], ["libtorch-cpu 2.10.0", "hooks", "common-data"])
    lock_envs(w.envs, w.lock, home=w.home)
    assert f"url: {url}/" in w.lock.read_text()
    yield w, url
    srv.shutdown()


def _realise(w, home):
    return fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(home), "--json")


def test_remote_archives_are_downloaded_once_and_verified(served, tmp_path):
    w, _url = served
    home = tmp_path / "remote-home"
    res = _realise(w, home)
    assert res.returncode == 0, res.stderr
    fetched = sorted(p.name for p in (home / "archives").iterdir())
    shas = sorted(f"{r['sha256']}.conda" for r in json.loads(
        (home / "envs" / json.loads(res.stdout)["path"].rsplit("/", 1)[1] / ".fdlenv/manifest.json")
        .read_text())["records"])
    assert fetched == shas                      # keyed by content, nothing else kept
    env = json.loads(res.stdout)
    with open(f"{env['libtorch_root']}/lib/libtorch.so", "rb") as f:
        assert f.read() == b"cpu-lib"


def test_a_tampered_remote_archive_is_refused_and_not_kept(served, tmp_path):
    w, _url = served
    archive = next(w.home.channel.glob("linux-64/libtorch-cpu-*.conda"))
    evil = write_conda(tmp_path / "evil", variant_pkg("cpu", payload=b"EVIL").meta(),
                       variant_pkg("cpu", payload=b"EVIL").pkg_files())
    archive.write_bytes(evil.read_bytes())
    home = tmp_path / "remote-home"
    res = _realise(w, home)
    assert res.returncode == 2 and "does not match the lock" in res.stderr
    assert not (home / "envs").exists() or not list((home / "envs").iterdir())
    assert not [p for p in (home / "archives").iterdir() if "libtorch" in p.name or p.name.startswith(".")] \
        and len(list((home / "archives").iterdir())) <= 2  # only the good archives stayed


def test_an_unreachable_mirror_is_transient(served, tmp_path):
    w, url = served
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(tmp_path / "h"),
                 "--mirror", f"{url}=http://127.0.0.1:9/flodl")
    assert res.returncode == 1 and res.stderr.strip().splitlines()[-1].startswith("error: download of")
