"""Bad input and faults: each gives one clear error, the right exit code, and nothing half-written."""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time

import pytest
import yaml
from helpers_conda import Pkg, make_package, write_env
from helpers_cli import fdlenv
from helpers_store import make_world, variant_pkg, visible_envs

from fdlenv.lock import lock_envs
from fdlenv.store.maintain import verify

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def _realise(w, *extra, home=None):
    return fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock),
                  "--home", str(home or w.home.root), "--json", *extra)


def _assert_nothing_published(home):
    assert visible_envs(home) == []
    assert not home.staging.exists() or not list(home.staging.iterdir())


def test_lock_that_does_not_parse(tmp_path):
    w = make_world(tmp_path)
    w.lock.write_text("version: 1\npackage: [\n  - {name: x\n")
    res = _realise(w)
    assert res.returncode == 2
    assert res.stderr.strip().splitlines()[-1].startswith("error: --lock:") and "does not parse" in res.stderr
    _assert_nothing_published(w.home)


def test_record_without_sha256(tmp_path):
    w = make_world(tmp_path)
    doc = yaml.safe_load(w.lock.read_text())
    del doc["package"][0]["hash"]["sha256"]        # damage a real lock, as a bad edit would
    w.lock.write_text(yaml.safe_dump(doc))
    res = _realise(w)
    assert res.returncode == 2 and "hash.sha256" in res.stderr
    _assert_nothing_published(w.home)


@pytest.mark.parametrize("warm", [False, True])
def test_tampered_archive_is_refused_for_file_urls(tmp_path, warm):
    w = make_world(tmp_path, extra=[Pkg("extra", "1.0", files={"share/extra.txt": "x"})])
    if warm:
        # The cache already holds a good extraction; a new env (new key) must still check the bytes.
        assert _realise(w).returncode == 0
        write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.0", "hooks", "common-data", "extra"])
        lock_envs(w.envs, w.lock, home=w.home)
    before = visible_envs(w.home)
    archive = next(w.home.channel.glob("linux-64/libtorch-cpu-*.conda"))
    good = archive.read_bytes()
    evil = make_package(tmp_path / "evil", variant_pkg("cpu", payload=b"EVIL"))
    assert evil.name == archive.name and evil.read_bytes() != good
    archive.write_bytes(evil.read_bytes())           # a valid archive with other bytes
    res = _realise(w)
    assert res.returncode == 2 and "does not match the lock" in res.stderr and "sha256" in res.stderr
    assert visible_envs(w.home) == before
    assert not list(w.home.staging.iterdir())
    archive.write_bytes(good)                        # the real bytes come back: it must heal
    res = _realise(w)
    assert res.returncode == 0, res.stderr
    root = json.loads(res.stdout)["libtorch_root"]
    with open(os.path.join(root, "lib/libtorch.so"), "rb") as f:
        assert f.read() == b"cpu-lib"


def test_package_escaping_the_prefix_is_refused(tmp_path):
    w = make_world(tmp_path, extra=[Pkg("evil", "1.0", files={"../../escaped.txt": "gotcha", "ok.txt": "ok"})])
    write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu", "evil"])
    lock_envs(w.envs, w.lock, home=w.home)
    res = _realise(w)
    assert res.returncode == 2 and "escapes the prefix" in res.stderr and "evil" in res.stderr
    _assert_nothing_published(w.home)
    assert not list(tmp_path.rglob("escaped.txt"))


@pytest.mark.slow
def test_kill_9_at_random_moments_never_leaves_a_partial_env(tmp_path):
    w = make_world(tmp_path, nfiles=3000)
    rng = random.Random(7)
    killed = 0
    for _ in range(3):
        proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cpu",
                                 "--lock", str(w.lock), "--home", str(w.home.root)],
                                stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
        # The marker: the staging prefix exists, so the install is under way; then a random
        # number of its files later (the env is published only by the final rename).
        wanted = rng.randint(0, 2000)
        while proc.poll() is None:
            stages = list(w.home.staging.glob("*-*")) if w.home.staging.is_dir() else []
            if stages and (wanted == 0 or sum(len(f) for _, _, f in os.walk(stages[0])) >= wanted):
                break
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)     # the worker dies with it
            killed += 1
        proc.wait()
        for env in visible_envs(w.home):
            assert (env / ".fdlenv/manifest.json").is_file(), "a partial env became visible"
        if visible_envs(w.home):
            break
    assert killed >= 1
    res = _realise(w)
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)
    assert not verify(w.home.envs / os.path.basename(env["path"]), full=True).problems
    assert [p for p in w.home.staging.iterdir()] == []
    assert not [p for p in w.home.pkgs.iterdir() if p.name.startswith(".") and p.is_dir()]


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as f:
        return [int(p) for p in f.read().split()]


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split(") ", 1)[1][0] != "Z"
    except OSError:
        return False


@pytest.mark.slow
def test_the_install_worker_dies_with_a_killed_parent(tmp_path):
    w = make_world(tmp_path, nfiles=3000)
    proc = subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cpu",
                             "--lock", str(w.lock), "--home", str(w.home.root)],
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    deadline = time.monotonic() + 30
    while "installing" not in (line := proc.stderr.readline()) and time.monotonic() < deadline:
        assert line, "the realise ended before installing"
    workers = _children(proc.pid)
    assert workers, "no install worker ran"
    while not any(p.is_dir() for p in w.home.staging.iterdir()):  # the worker is installing
        assert time.monotonic() < deadline, "the worker never started installing"
        time.sleep(0.005)
    proc.kill()                                      # the parent only, not its group
    proc.wait()
    deadline = time.monotonic() + 3
    while any(_alive(p) for p in workers) and time.monotonic() < deadline:
        time.sleep(0.02)
    assert not any(_alive(p) for p in workers)
    assert not list(w.home.staging.glob("*.ok"))    # it did not finish an install nobody publishes
    res = _realise(w)
    assert res.returncode == 0, res.stderr
    assert not verify(w.home.envs / os.path.basename(json.loads(res.stdout)["path"]), full=True).problems


@pytest.mark.slow
def test_concurrent_realisations_build_each_env_once(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"), nfiles=500)
    procs = [subprocess.Popen([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", v,
                               "--lock", str(w.lock), "--home", str(w.home.root), "--json"],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
             for v in ("cpu", "cu126", "cpu", "cu126", "cpu", "cu126")]
    outs = []
    for p in procs:
        out, err = p.communicate(timeout=300)
        assert p.returncode == 0, err
        outs.append(json.loads(out))
    for v in ("cpu", "cu126"):
        mine = [o for o in outs if o["variant"] == v]
        assert len({o["key"] for o in mine}) == 1
        assert sum(o["created"] for o in mine) == 1       # built once, the others reused it
    envs = visible_envs(w.home)
    assert len(envs) == 2
    for env in envs:
        names = {json.loads(m.read_text())["name"] for m in (env / "conda-meta").glob("*.json")}
        other = "libtorch-cu126" if env.name.startswith("cpu") else "libtorch-cpu"
        assert other not in names                         # never a hybrid
        assert not verify(env, full=True).problems


@contextlib.contextmanager
def tmpfs(path, size: str):
    """A small tmpfs at `path` for the test's duration; skips where mounting is not allowed."""
    path.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)],
                      capture_output=True).returncode != 0:
        pytest.skip("cannot mount a tmpfs here (needs root)")
    try:
        yield path
    finally:
        subprocess.run(["umount", str(path)])


def test_full_disk_cleans_staging_and_says_where(tmp_path):
    w = make_world(tmp_path, extra=[Pkg("bulky", "1.0", files={"share/bulk.bin": os.urandom(6 << 20)})])
    write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu", "bulky"])
    lock_envs(w.envs, w.lock, home=w.home)
    with tmpfs(tmp_path / "tiny", "3m") as tiny:
        res = _realise(w, home=tiny / "home")
        assert res.returncode == 1, res.stderr
        assert "no space left" in res.stderr and str(tiny / "home") in res.stderr
        assert not list((tiny / "home" / "staging").iterdir())
        assert not (tiny / "home" / "envs").exists() or not list((tiny / "home" / "envs").iterdir())


def test_copy_instead_of_hardlink_is_reported(tmp_path):
    w = make_world(tmp_path)
    with tmpfs(tmp_path / "otherfs", "64m") as other_fs:
        w.home.root.mkdir(parents=True, exist_ok=True)
        os.symlink(other_fs, w.home.pkgs)               # cache on another filesystem than envs/
        res = _realise(w)
        assert res.returncode == 0, res.stderr
        assert "copied, not hard-linked" in res.stderr
        env = json.loads(res.stdout)
        manifest = json.loads(open(os.path.join(env["path"], ".fdlenv/manifest.json")).read())
        assert "libtorch-cpu" in manifest["links"]["copied"]
