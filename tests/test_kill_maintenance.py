"""kill -9 during `env remove`, `env gc` and `env verify --full --repair` leaves every env and
every package-cache entry whole or gone (store/gc.py, store/maintain.py, atomic.discard/exchange).

Each trial kills at an observed point of the process's own progress (how many of the files it
deletes or builds are gone or made), never after a sleep; the points spread from the first
file to the last. After each kill the next realise must produce an env that verifies in full.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest
from helpers_conda import make_wheel, write_env
from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.store.maintain import env_dirs, verify

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

# Kill moments spread over each operation: 5 in the suite, FDLENV_KILL_TRIALS=N for a longer hunt.
TRIALS = max(5, int(os.environ.get("FDLENV_KILL_TRIALS", "5")))


def _world(tmp: Path):
    """A cpu env of a 600-file conda package and a 300-file wheel (both in the package cache)."""
    w = make_world(tmp, nfiles=600)
    wheel = make_wheel(tmp / "wheels", "bigwheel", "1.0",
                       {f"d{i // 100}/m{i}.py": f"X = {i}\n" for i in range(300)})
    write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.0", "hooks", "common-data", {"pip": [str(wheel)]}])
    lock_envs(w.envs, w.lock, home=w.home)
    return w


def _cli(w, *args: str) -> list[str]:
    return [sys.executable, "-m", "fdlenv", *args, "--home", str(w.home.root)]


def _realise(w) -> dict:
    res = subprocess.run(_cli(w, "env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--json"),
                         capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    return json.loads(res.stdout)


# Where the payload's files sit, in the package cache, envs and staging (hidden trash included):
# counted with one listdir per leaf directory, cheap enough to look between two deletes.
_LEAVES = ("*/libtorch/share/many/*", "*/site/d*", "*/lib/python*/site-packages/d*")


def _count(*roots: Path) -> int:
    import glob

    n = 0
    for root in roots:
        for pattern in _LEAVES:
            for d in glob.glob(str(root / pattern), include_hidden=True):
                try:
                    n += len(os.listdir(d))
                except OSError:     # deleted between the glob and the look
                    pass
    return n


def _kill_when(cmd: list[str], reached) -> bool:
    """Run `cmd`; SIGKILL its process group once `reached()` holds. True when it was killed."""
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    while True:
        if reached():
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
            return True
        try:
            proc.wait(timeout=0.002)    # between two looks: the process's exit ends the wait
            return False
        except subprocess.TimeoutExpired:
            pass


def _assert_whole_or_gone(home: Home) -> None:
    """Every env under its name verifies (files present, sizes right); none is half there. (The
    old env a killed repair leaves holds the byte a trial flipped in place: its mtime moved.)"""
    for d in sorted(home.envs.iterdir()) if home.envs.is_dir() else []:
        assert (d / ".fdlenv" / "manifest.json").is_file(), f"{d.name}: an env without its manifest"
        half = [p for p in verify(d).problems if not p.what.startswith("modified in place")]
        assert not half, f"{d.name} is half there: {half[:3]}"


def _assert_next_realise_is_whole(w) -> dict:
    env = _realise(w)
    rep = verify(Path(env["path"]), full=True)
    assert not rep.problems, f"the realise after a kill made an incomplete env: {rep.problems[:3]}"
    return env


@pytest.mark.slow
@pytest.mark.parametrize("how", ["remove", "gc"])
def test_kill_9_during_remove_or_gc_leaves_each_env_and_cache_entry_whole_or_gone(tmp_path, how):
    w = _world(tmp_path)
    killed = 0
    for i in range(TRIALS):
        env = _realise(w)
        if how == "gc":     # the env's root deleted by hand: gc collects it and its cache entries
            for link in w.home.roots.iterdir():
                link.unlink()
            for link in (w.home.libtorch / "precompiled").iterdir():
                link.unlink()
            cmd = _cli(w, "env", "gc")
        else:
            cmd = _cli(w, "env", "remove", "cpu")
        places = (w.home.pkgs, w.home.envs, w.home.staging)
        before = _count(*places)
        target = before * (i + 0.5) // TRIALS        # files deleted when the kill comes
        killed += _kill_when(cmd, lambda before=before, places=places, target=target: before - _count(*places) >= target)
        _assert_whole_or_gone(w.home)
        again = _assert_next_realise_is_whole(w)
        assert again["path"] == env["path"]
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} trials were killed mid-way"


def _repair_reached(staging: Path, target: int, size: int):
    if target <= size:
        return lambda: _count(staging) >= target
    gone = target - size        # files of the old env deleted
    peak = [0]

    def reached() -> bool:
        n = _count(staging)
        peak[0] = max(peak[0], n)
        return peak[0] >= size and peak[0] - n >= gone
    return reached


@pytest.mark.slow
def test_kill_9_during_repair_leaves_the_old_env_or_the_new_and_its_pointers_resolve(tmp_path):
    w = _world(tmp_path)
    env = _realise(w)
    lib = Path(env["libtorch_root"]) / "lib" / "libtorch.so"
    killed = 0
    for i in range(TRIALS):
        data = bytearray(lib.read_bytes())
        data[0] ^= 0xFF
        with open(lib, "r+b") as f:      # in place: the cache entry's inode flips too
            f.write(data)
        size = _count(w.home.envs)
        # Files built in staging; the last trials kill while the old env is deleted after the swap
        # (then staging holds it, shrinking).
        target = size * (i + 1) // (TRIALS - TRIALS // 5)   # the last fifth lands past the end
        cmd = _cli(w, "env", "verify", "cpu", "--full", "--repair")
        killed += _kill_when(cmd, _repair_reached(w.home.staging, target, size))
        dirs = env_dirs(w.home)
        assert [str(d) for d in dirs] == [env["path"]], "the env is gone after a killed repair"
        _assert_whole_or_gone(w.home)
        pointer = w.home.libtorch / "precompiled" / "cpu"
        assert os.path.isdir(pointer), "flodl's pointer dangles after a killed repair"
        res = subprocess.run(cmd, capture_output=True, text=True)
        assert res.returncode == 0, res.stderr
        assert not verify(Path(env["path"]), full=True).problems
    assert killed >= TRIALS // 2, f"only {killed} of {TRIALS} trials were killed mid-way"


def test_a_process_in_the_env_never_finds_libtorch_missing_during_a_repair(tmp_path):
    w = _world(tmp_path)
    env = _realise(w)
    lib = Path(env["libtorch_root"]) / "lib" / "libtorch.so"
    with open(lib, "r+b") as f:
        f.write(b"X")
    done, missing, looks = threading.Event(), [], [0]

    def watch():
        while not done.is_set():
            looks[0] += 1
            if not os.path.exists(lib):
                missing.append(looks[0])

    t = threading.Thread(target=watch)
    t.start()
    try:
        res = fdlenv("env", "verify", "cpu", "--full", "--repair", "--home", str(w.home.root))
    finally:
        done.set()
        t.join()
    assert res.returncode == 0, res.stderr
    assert looks[0] > 100 and not missing, f"libtorch.so was missing in {len(missing)} of {looks[0]} looks"
    assert lib.read_bytes() == b"cpu-lib"
