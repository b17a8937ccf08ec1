"""A mirror that lags heals the box: what a sync fixes is transient (exit 1), never permanent.

The upstream is the suite's loopback index laid out like PyTorch's; a box's lock
is made from it, then the index is made to lag the way a mirror does (the
project page missing, a page without the locked file, an empty page, as a cold
pull-through cache answers), and a box realises through it with `--frozen`:
exit 1, naming what it lacks. The test then syncs the mirror (after it saw the
failure: the failure is the barrier) and the next attempt succeeds. Under
`join --persist` the loop's own backoff makes that next attempt.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from helpers_cli import fdlenv

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
WHEEL = "torch-2.10.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl"


@pytest.fixture
def mirror(tmp_path):
    """(index, the cpu lock made from it, torch's page dir) of a fresh loopback index."""
    with serve(tmp_path) as idx:
        fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", f"pytorch={idx.url}", "--home",
               str(tmp_path / "h0"), check=True)
        yield idx, tmp_path / "h0/lockfiles/cpu.conda-lock.yml", tmp_path / "pytorch-index/whl/cpu/torch"


def lag(page: Path, how: str) -> dict[Path, bytes]:
    """Make torch's page lag `how`; returns what a sync puts back."""
    saved = {p: p.read_bytes() for p in page.iterdir()}
    if how == "page":
        shutil.rmtree(page)
    elif how == "file":   # the page lists the older release, not the locked file
        for p in saved:
            lines = p.read_text().splitlines(keepends=True)
            if p.suffix == ".json":
                doc = json.loads(p.read_text())
                doc["files"] = [f for f in doc["files"] if f["filename"] != WHEEL]
                p.write_text(json.dumps(doc))
            else:
                p.write_text("".join(line for line in lines if WHEEL not in line))
    else:                  # an empty page
        for p in saved:
            p.write_text('{"meta": {"api-version": "1.1"}, "files": []}' if p.suffix == ".json" else "<html></html>")
    return saved


def sync(page: Path, saved: dict[Path, bytes]) -> None:
    page.mkdir(exist_ok=True)
    for p, data in saved.items():
        p.write_bytes(data)


def box(lock: Path, idx, home: Path, *extra: str) -> subprocess.CompletedProcess:
    return fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--frozen", "--mirror",
                  f"pytorch={idx.url}", "--home", str(home), "--json", *extra)


@pytest.mark.parametrize("how, says", [("page", "its page"), ("file", "lists 3 file(s) but not"),
                                       ("empty", "lists no files")])
def test_a_mirror_lacking_a_page_or_the_locked_file_or_serving_an_empty_page_is_1_and_heals_on_sync(
        tmp_path, mirror, how, says):
    idx, lock, page = mirror
    saved = lag(page, how)
    first = box(lock, idx, tmp_path / "box")
    assert first.returncode == 1, first.stderr                       # a sync fixes it: transient
    error = json.loads(first.stdout)["error"]
    assert says in error and idx.url in error and first.stderr.count("error:") == 1
    assert not list((tmp_path / "box" / "envs").glob("cpu-*"))
    sync(page, saved)                                                  # the mirror catches up
    again = box(lock, idx, tmp_path / "box")
    assert again.returncode == 0, again.stderr
    assert Path(json.loads(again.stdout)["path"]).is_dir()


def test_join_persist_through_a_lagging_mirror_backs_off_and_runs_the_agent_once_the_mirror_syncs(tmp_path, mirror):
    idx, lock, page = mirror
    saved = lag(page, "page")
    (tmp_path / "work").mkdir()
    cmd = [sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--persist", "--libtorch", "cpu", "--lock",
           str(lock), "--frozen", "--mirror", f"pytorch={idx.url}", "--home", str(tmp_path / "box"),
           "--bin", sys.executable, "--no-sig-probe", "--", STANDIN, str(tmp_path / "out"), "0"]
    t0 = time.monotonic()
    env = {**os.environ, "FLODL_TESTING_GPU_JSON": '[{"vendor": "nvidia", "arch": "8.6"}]'}   # a box with a rank
    proc = subprocess.Popen(cmd, stderr=subprocess.PIPE, stdout=subprocess.DEVNULL, text=True, cwd=tmp_path / "work",
                            env=env)
    seen, synced_at = [], None
    try:
        for line in proc.stderr:
            seen.append(f"{time.monotonic() - t0:6.1f}s {line.rstrip()}")
            if "re-dialing in" in line and synced_at is None:
                assert (tmp_path / "out").exists() is False      # the agent never ran through the lag
                sync(page, saved)                                  # barrier: after the first failure
                synced_at = time.monotonic() - t0
            elif "re-dialing in" in line:                          # the attempt after the sync ran the agent
                break
    finally:
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=60)
    print("\n".join(seen))
    assert synced_at is not None and "no project 'torch'" in "\n".join(seen)
    assert json.loads((tmp_path / "out" / "agent0.json").read_text())["argv"][1:] == [str(tmp_path / "out"), "0"]
    assert proc.returncode != 2


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize("where", ["a refused port", "a name that does not resolve"])
def test_pytorchs_index_unreachable_is_1_and_names_the_url_and_the_three_ways_out(tmp_path, where):
    base = (f"http://127.0.0.1:{free_port()}/whl" if where == "a refused port"
            else "http://fdlenv-no-such-index.invalid/whl")
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", f"pytorch={base}", "--home", str(tmp_path / "h"),
                 "--json")
    assert res.returncode == 1, res.stderr                                  # the world may catch up
    error = json.loads(res.stdout)["error"]
    assert res.stderr.count("error:") == 1 and error in res.stderr
    assert f"cannot read {base}/cpu/torch/" in error and f"(served by --mirror pytorch={base})" in error
    for way in ("--mirror pytorch=URL", "`fdlenv: mirrors:` in fdl.yml", "`fdlenv lock --libtorch cpu`",
                "ship the lock beside fdl.yml", "`fdlenv mirror export DIR`"):
        assert way in error
    assert not (tmp_path / "h" / "lockfiles").exists() or not list((tmp_path / "h" / "lockfiles").glob("*.yml"))


def test_a_locked_box_whose_pytorch_index_is_unreachable_names_the_ways_out_too(tmp_path, mirror):
    idx, lock, _ = mirror
    base = f"http://127.0.0.1:{free_port()}/whl"
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--frozen", "--mirror",
                 f"pytorch={base}", "--home", str(tmp_path / "box"), "--json")
    assert res.returncode == 1, res.stderr
    error = json.loads(res.stdout)["error"]
    assert f"{base}/cpu/torch/" in error and "`fdlenv mirror export DIR`" in error


@pytest.mark.parametrize("how", ["page", "empty", "file"])
def test_locking_on_demand_through_a_mirror_without_torchs_page_yet_is_1_and_locks_once_it_syncs(tmp_path, mirror, how):
    idx, _, page = mirror
    saved = lag(page, how)
    cmd = ("env", "realize", "--libtorch", "cpu", "--mirror", f"pytorch={idx.url}", "--home", str(tmp_path / "fresh"),
           "--json")
    first = fdlenv(*cmd)
    assert first.returncode == 1, first.stderr
    assert "torch" in json.loads(first.stdout)["error"] and not (tmp_path / "fresh" / "lockfiles").exists()
    sync(page, saved)
    again = fdlenv(*cmd)
    assert again.returncode == 0, again.stderr
    assert (tmp_path / "fresh" / "lockfiles" / "cpu.conda-lock.yml").is_file()


def test_a_channel_mirror_share_without_a_locked_archive_yet_is_1_and_heals_when_it_is_copied(tmp_path):
    from helpers_store import make_world

    w = make_world(tmp_path / "world", variants=("cpu",))
    share = tmp_path / "share"
    shutil.copytree(w.home.channel, share)                      # a file:// mirror of the channel ...
    missing = {a: a.read_bytes() for a in share.rglob("libtorch-cpu-*.conda")}
    for archive in missing:                                     # ... that has not synced the variant yet
        archive.unlink()
    cmd = ("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--mirror", f"flodl={share.as_uri()}",
           "--home", str(tmp_path / "box"), "--json")
    first = fdlenv(*cmd)
    assert first.returncode == 1, first.stderr
    assert "where --mirror maps its channel" in json.loads(first.stdout)["error"]
    for archive, data in missing.items():                       # the sync
        archive.write_bytes(data)
    again = fdlenv(*cmd)
    assert again.returncode == 0, again.stderr
