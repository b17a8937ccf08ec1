"""gc never races a realise and never collects an env a live process uses (store/leases.py).

Barriers, not sleeps: the test holds the store lock itself (as gc or a realise would)
and watches the other side print that it waits; a fifo holds a running command at a
known point while gc runs.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from helpers_cli import fdlenv
from helpers_store import bump_variant, make_world, realise_json

from fdlenv.base.flocks import exclusive, shared
from fdlenv.store.leases import store_lock

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def _waits_then_finishes(cmd: list[str], hold) -> subprocess.CompletedProcess:
    """Start `cmd` while `hold` (a lock context) is held; it must say it waits; then let go."""
    with hold:
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        first = proc.stderr.readline()          # the barrier: it reached the lock and waits
        assert "waiting for" in first, first
        assert proc.poll() is None
    out, err = proc.communicate(timeout=60)
    return subprocess.CompletedProcess(cmd, proc.returncode, out, first + err)


def test_a_realise_waits_while_gc_holds_the_store(tmp_path):
    w = make_world(tmp_path)
    first = realise_json(w)
    cmd = [sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cpu", "--lock", str(w.lock),
           "--home", str(w.home.root), "--json"]
    res = _waits_then_finishes(cmd, exclusive(store_lock(w.home.locks), "gc (the test)"))
    assert res.returncode == 0 and "gc (the test)" not in res.stderr
    assert json.loads(res.stdout)["key"] == first["key"] and os.path.isdir(first["path"])


def test_gc_waits_while_a_realise_holds_the_store(tmp_path):
    w = make_world(tmp_path)
    realise_json(w)
    cmd = [sys.executable, "-m", "fdlenv", "env", "gc", "--home", str(w.home.root), "--json"]
    res = _waits_then_finishes(cmd, shared(store_lock(w.home.locks), "realise (the test)"))
    assert res.returncode == 0, res.stderr


@pytest.mark.slow
def test_realises_and_gc_running_together_never_lose_a_reported_env(tmp_path):
    w = make_world(tmp_path)
    locks = []
    for i in range(2):   # two lock files: two roots, both envs stay live
        lock = tmp_path / f"lock{i}.yml"
        lock.write_bytes(w.lock.read_bytes())
        locks.append(lock)
    gc_loop = subprocess.Popen([sys.executable, "-c", (
        "import subprocess, sys\n"
        "while True:\n"
        f"    subprocess.run([sys.executable, '-m', 'fdlenv', 'env', 'gc', '--home', {str(w.home.root)!r}],"
        " capture_output=True)\n")])
    try:
        for i in range(12):
            if i % 4 == 3:
                bump_variant(w, payload=f"cpu-v{i}".encode())   # new builds: the old envs become garbage
                for lock in locks:
                    lock.write_bytes(w.lock.read_bytes())
            res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(locks[i % 2]),
                         "--home", str(w.home.root), "--json")
            assert res.returncode == 0, res.stderr
            env = json.loads(res.stdout)
            assert os.path.isfile(os.path.join(env["path"], ".fdlenv", "manifest.json"))
    finally:
        gc_loop.kill()
        gc_loop.wait()


def test_gc_leaves_an_env_a_running_command_uses_until_it_exits(tmp_path):
    w = make_world(tmp_path)
    old = realise_json(w)
    up, go = tmp_path / "up", tmp_path / "go"
    os.mkfifo(up)
    os.mkfifo(go)
    script = ('echo up > "$1"; read x < "$2"; '
              'cat "$LIBTORCH_PATH/lib/libtorch.so" > /dev/null && echo still-there')
    cmd = [sys.executable, "-m", "fdlenv", "run", "--libtorch", "cpu", "--lock", str(w.lock),
           "--home", str(w.home.root), "--", "sh", "-c", script, "sh", str(up), str(go)]
    job = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        with open(up) as f:           # barrier: the command runs inside the old env
            assert f.readline().strip() == "up"
        bump_variant(w, payload=b"cpu-v2")
        fdlenv("env", "use", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), check=True)
        gc = json.loads(fdlenv("env", "gc", "--home", str(w.home.root), "--json", check=True).stdout)
        assert old["path"] not in gc["envs"] and os.path.isdir(old["path"])
        with open(go, "w") as f:
            f.write("go\n")
        out, err = job.communicate(timeout=60)
    finally:
        if job.poll() is None:
            job.kill()
    assert job.returncode == 0 and out.strip() == "still-there", err
    gc = json.loads(fdlenv("env", "gc", "--home", str(w.home.root), "--json", check=True).stdout)
    assert gc["envs"] == [old["path"]] and not os.path.exists(old["path"])
