"""`env gc` covers everything fdlenv owns under the home, and `env remove` (store/gc.py)."""

from __future__ import annotations

import pytest

import json
import os
from pathlib import Path

from helpers_cli import fdlenv
from helpers_store import make_world, realise_json

from fdlenv.store import leases

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def _home(w):
    return ("--home", str(w.home.root))


def _leftovers(w, dead_key: str) -> dict[str, Path]:
    """What killed and finished runs leave, each named by why gc may take it."""
    h = w.home.root
    made = {
        "staging": h / "staging" / f"{dead_key}-4242",
        "activation": h / "cache" / "activation" / f"{dead_key}-0123456789ab.json",
        "fast": h / "cache" / "fast" / "00ff-cpu-linux-64.json",
        "lock": h / "locks" / f"{dead_key}.lock",
        "build": h / "builds" / ("b" * 64),
        "build staging": h / "builds" / f".staging-{'c' * 64}-4242",
        "old walk-through": h / "walkthrough" / "build" / "0000000000000001",
        "new walk-through": h / "walkthrough" / "build" / "0000000000000002",
    }
    made["staging"].mkdir(parents=True)
    (made["staging"] / "half.so").write_bytes(b"x" * 4096)
    for k in ("activation", "lock"):
        made[k].parent.mkdir(parents=True, exist_ok=True)
        made[k].write_text("{}")
    made["fast"].parent.mkdir(parents=True, exist_ok=True)
    made["fast"].write_text(json.dumps({"dir": "cpu-gone", "key": dead_key, "libtorch_root": "/x"}))
    made["build"].mkdir(parents=True)
    (made["build"] / ".fdlenv-build.json").write_text(json.dumps({"env": dead_key}))
    (made["build"] / "train").write_bytes(b"\x7fELF" * 1000)
    made["build staging"].mkdir()
    for k in ("old walk-through", "new walk-through"):
        made[k].mkdir(parents=True)
        (made[k] / "agent").write_bytes(b"bin")
    os.utime(made["old walk-through"], (1, 1))
    return made


def test_gc_takes_what_runs_left_and_reports_what_it_never_touches(tmp_path):
    w = make_world(tmp_path)
    live = realise_json(w)
    made = _leftovers(w, "d" * 64)
    kept = {name: w.home.root / name / "keep.bin" for name in ("channels", "data", "source")}
    for p in kept.values():
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_bytes(b"k" * 1000)
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)
    planned = {o["path"] for o in plan["other"]}
    for name in ("staging", "activation", "fast", "lock", "build", "build staging", "old walk-through"):
        assert str(made[name]) in planned, name
    assert str(made["new walk-through"]) not in planned and plan["envs"] == []
    assert plan["bytes"] >= 4096 + 4000
    assert all(p.exists() for p in made.values())                   # a dry run removes nothing
    assert plan["kept"]["never_collected"] == ["channels/", "data/", "libtorch/"] and "--sources" in plan["kept"]["source"]
    assert plan["kept"]["envs"] > 0 and all(k.isidentifier() for k in plan["kept"])
    res = fdlenv("env", "gc", *_home(w), check=True)
    assert "never collected" in res.stdout
    for name in ("staging", "activation", "fast", "lock", "build", "build staging", "old walk-through"):
        assert not made[name].exists(), name
    assert made["new walk-through"].exists() and all(p.exists() for p in kept.values())
    assert fdlenv("env", "verify", "--full", *_home(w)).returncode == 0 and os.path.isdir(live["path"])
    # the live env's own caches survive: a re-dial still takes the fast path
    assert fdlenv("run", "--libtorch", "cpu", *_home(w), "true").returncode == 0
    assert json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)["other"] == []



def _modules(res) -> set[str]:
    return {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}


def test_gc_keeps_the_lock_holdings_a_kept_envs_re_dial_asks_and_drops_them_once_none_does(tmp_path):
    from fdlenv.lock import lock_envs
    from fdlenv.lock.paths import split_path
    from fdlenv.store import fastpath

    w = make_world(tmp_path, variants=("cpu", "cu126"))
    w.lock.unlink()
    lock_envs(w.envs, w.lock, variants=["cu126"], home=w.home)      # the base file lacks cpu,
    lock_envs(w.envs, split_path(w.lock, "cpu"), variants=["cpu"], home=w.home)   # its split holds it
    realise_json(w)
    fast = w.home.cache / "fast"
    asked = sorted(fast.glob("*-cpu-linux-64.holds"))     # the realise asked both whether they hold cpu
    assert sorted(p.read_text() for p in asked) == ["0", "1"]
    fastpath.remember_holds(w.home, "0" * 64, "rocm7.1", "linux-64", False)   # a variant no env has
    (stray,) = fast.glob("0000*-rocm7.1-linux-64.holds")
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)
    assert {o["path"] for o in plan["other"]} == {str(stray)}
    fdlenv("env", "gc", *_home(w), check=True)
    assert all(p.is_file() for p in asked) and not stray.exists()
    # after gc the re-dial is as cheap as before: the fast cache answers, the lock is not parsed
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), *_home(w),
                 env={"FDLENV_NO_HOTPATH": "1", "PYTHONPROFILEIMPORTTIME": "1"}, check=True)
    assert "fdlenv.store.realise" in _modules(res) and "fdlenv.lock.file" not in _modules(res)
    fdlenv("env", "remove", "cpu", *_home(w), check=True)   # no env of cpu left: nothing asks them
    assert not any(p.exists() for p in asked)

def test_gc_sources_drops_fetched_trees_no_join_holds(tmp_path):
    w = make_world(tmp_path)
    tree = w.home.source / ("e" * 16)
    tree.mkdir(parents=True)
    (tree / "main.rs").write_text("fn main() {}\n")
    assert tree.exists() and fdlenv("env", "gc", *_home(w), check=True) and tree.exists()
    fdlenv("env", "gc", "--sources", *_home(w), check=True)
    assert not tree.exists()


def test_env_remove_drops_the_variant_and_what_only_it_used(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"))
    cpu, cu = realise_json(w, "cpu"), realise_json(w, "cu126")
    fdlenv("env", "use", "--libtorch", "cpu", *_home(w), check=True)
    pre = w.home.libtorch / "precompiled"
    dry = json.loads(fdlenv("env", "remove", "cpu", "--dry-run", "--json", *_home(w), check=True).stdout)
    assert dry["envs"] == [cpu["path"]] and any("libtorch-cpu" in e for e in dry["cache_entries"])
    assert os.path.isdir(cpu["path"]) and (pre / "cpu").is_symlink()       # nothing removed yet
    out = json.loads(fdlenv("env", "remove", "--libtorch", "cpu", "--json", *_home(w), check=True).stdout)
    assert out["envs"] == [cpu["path"]] and not os.path.exists(cpu["path"])
    assert not (pre / "cpu").exists() and (w.home.libtorch / ".active").read_text() == ""
    assert not any(p.name.startswith("cpu-") for p in w.home.roots.iterdir())
    stems = {p.name for p in w.home.pkgs.iterdir() if p.is_dir()}
    assert not any(s.startswith("libtorch-cpu") for s in stems) and any(s.startswith("libtorch-cu126") for s in stems)
    assert os.path.isdir(cu["path"]) and fdlenv("env", "verify", "--full", *_home(w)).returncode == 0
    again = fdlenv("env", "remove", "cpu", *_home(w))
    assert again.returncode == 2 and "not realised" in again.stderr


def test_env_remove_leaves_an_env_a_process_uses_and_flodls_own_download(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    flodl = w.home.libtorch / "precompiled" / "cu128"
    (flodl / "lib").mkdir(parents=True)
    (flodl / "lib" / "libtorch.so").write_bytes(b"flodl")
    fd = leases.take(Path(env["path"]))          # a running `fdlenv run` holds this
    try:
        out = json.loads(fdlenv("env", "remove", "cpu", "--json", *_home(w), check=True).stdout)
        assert out["still_in_use"] == [env["path"]] and os.path.isdir(env["path"])
    finally:
        leases.release(fd)
    fdlenv("env", "gc", *_home(w), check=True)
    assert not os.path.exists(env["path"])                  # unrooted: the next gc takes it
    assert (flodl / "lib" / "libtorch.so").read_bytes() == b"flodl"


def _distinct_bytes(*roots: Path) -> int:
    """The oracle: bytes of the distinct inodes (files and links) under `roots`, as `du` counts them."""
    seen, total = set(), 0
    for root in roots:
        for dirpath, _dirs, files in os.walk(root):
            for name in files:
                st = os.lstat(os.path.join(dirpath, name))
                if (st.st_dev, st.st_ino) not in seen:
                    seen.add((st.st_dev, st.st_ino))
                    total += st.st_size
    return total


def _sharing_world(tmp_path):
    from helpers_conda import Pkg, make_channel, write_env

    from fdlenv.lock import lock_envs

    w = make_world(tmp_path, variants=("cpu", "cu126"))
    make_channel(w.home.channel, [Pkg("bigshared", "1.0", files={"share/big.bin": os.urandom(3 << 20)})])
    for v in ("cpu", "cu126"):
        write_env(w.envs, v, ["flodl"], [f"libtorch-{v} 2.10.0", "hooks", "common-data", "bigshared"])
    lock_envs(w.envs, w.lock, home=w.home)
    return w


def test_sizes_count_each_inode_once_in_remove_gc_and_list(tmp_path):
    w = _sharing_world(tmp_path)
    cpu, cu = realise_json(w, "cpu"), realise_json(w, "cu126")
    listed = {e["variant"]: e["size"] for e in json.loads(fdlenv("env", "list", "--json", *_home(w)).stdout)["envs"]}
    for env in (cpu, cu):
        entries = [w.home.pkgs / n for n in json.loads(
            (Path(env["path"]) / ".fdlenv/manifest.json").read_text())["size"]["entries"]]
        assert abs(listed[env["variant"]] - _distinct_bytes(Path(env["path"]), *entries)) < 64 << 10
    kept = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)["kept"]["envs"]
    assert abs(kept - _distinct_bytes(w.home.envs, w.home.pkgs)) < 64 << 10     # 3 MB shared: once
    before = _distinct_bytes(w.home.root)
    dry = json.loads(fdlenv("env", "remove", "cpu", "--dry-run", "--json", *_home(w), check=True).stdout)
    out = json.loads(fdlenv("env", "remove", "cpu", "--json", *_home(w), check=True).stdout)
    freed = before - _distinct_bytes(w.home.root)
    assert abs(out["bytes"] - freed) < 64 << 10 and abs(dry["bytes"] - out["bytes"]) < 64 << 10
    assert freed < 1 << 20                         # the shared 3 MB stays with cu126
    assert (w.home.pkgs / "bigshared-1.0-0" / "share" / "big.bin").is_file()


def test_gc_drops_a_root_whose_env_was_deleted_by_hand(tmp_path):
    import shutil

    w = make_world(tmp_path)
    env = realise_json(w)
    shutil.rmtree(env["path"])
    roots = list(w.home.roots.iterdir())
    assert roots and all(not p.exists() for p in roots)
    plan = json.loads(fdlenv("env", "gc", "--json", *_home(w), check=True).stdout)
    assert {o["path"] for o in plan["other"]} >= {str(p) for p in roots}
    assert list(w.home.roots.iterdir()) == []


def test_gc_sweeps_the_trash_killed_deletes_left_in_envs_pkgs_and_staging(tmp_path):
    """A killed delete leaves its tree under `.trash-<name>.<pid>` (atomic.discard): beside the
    env (a delete without a trash dir), in pkgs/, or in staging/ (where remove puts an env)."""
    from fdlenv.base import atomic

    w = make_world(tmp_path, wheel=True)
    env = Path(realise_json(w)["path"])
    trash = {
        "envs, manifest gone": w.home.envs / f"{atomic.TRASH}{env.name}.4242",
        "envs, manifest kept": w.home.envs / f"{atomic.TRASH}{env.name}.4343",
        "pkgs": w.home.pkgs / f"{atomic.TRASH}whl-{'e' * 64}.4242",
        "staging, as remove names it": w.home.staging / f"{atomic.TRASH}{env.name}.4242",
    }
    import shutil

    for name, where in trash.items():
        where.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(env, where, symlinks=True)
        if name == "envs, manifest gone":
            shutil.rmtree(where / ".fdlenv")        # deleted first, as the kill found it
    listed = json.loads(fdlenv("env", "list", "--json", *_home(w), check=True).stdout)
    assert [e["path"] for e in listed["envs"]] == [str(env)]      # trash is never an env
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)
    assert {str(p) for p in trash.values()} <= {o["path"] for o in plan["other"]}
    fdlenv("env", "gc", *_home(w), check=True)
    assert [name for name, p in trash.items() if os.path.lexists(p)] == []
    assert env.is_dir() and fdlenv("env", "verify", "--full", *_home(w)).returncode == 0


def test_removing_an_env_sweeps_its_hot_memos_and_keeps_the_others(tmp_path):
    from test_hotpath import replayed

    from fdlenv.hot import replay

    w = make_world(tmp_path, variants=("cpu", "cu126"))
    for v in ("cpu", "cu126"):
        realise_json(w, v)
        replayed("shell-hook", "--libtorch", v, "--lock", str(w.lock), *_home(w))
    hot = w.home.cache / "hot"

    def named() -> list[str]:
        return sorted(os.path.basename(replay.memo_env(str(p)) or "?").split("-")[0] for p in hot.iterdir())

    assert named() == ["cpu", "cu126"]
    fdlenv("env", "remove", "cpu", *_home(w), check=True)
    assert named() == ["cu126"]
