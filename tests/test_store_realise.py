"""Realising envs from real locks: contents, identity, the fast path, pointers, mirrors."""

from __future__ import annotations

import json
import os
import shutil

import pytest
from conda_lock.lockfile import parse_conda_lock_file
from helpers_conda import Pkg, make_channel
from helpers_imports import imported, of_fdlenv
from helpers_cli import fdlenv
from helpers_store import bump_variant, make_world, realise_json

from fdlenv.base.errors import Fail
from fdlenv.lock import lock_envs
from fdlenv.names.platforms import this_platform
from fdlenv.lock.file import read_variant
from fdlenv.store.realise import realise

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def test_realise_installs_links_rewrites_and_publishes(tmp_path):
    w = make_world(tmp_path, wheel=True)
    out = realise_json(w)
    path = w.home.envs / os.path.basename(out["path"])
    assert out["created"] is True and out["variant"] == "cpu"
    assert path.name == f"cpu-{out['key'][:16]}"
    assert out["libtorch_root"] == str(path / "libtorch")
    # prefix placeholder rewritten to the *published* path, never the staging one
    assert (path / "share/hooks/where.txt").read_text() == f"prefix={path}\n"
    assert os.readlink(path / "share/hooks/link.txt") == "where.txt"
    assert (path / "share/common/data.txt").read_text() == "shared\n"          # noarch
    assert (path / "libtorch/lib/libtorch.so").stat().st_nlink >= 2            # hard-linked from the cache
    site = list(path.glob("lib/python*/site-packages/tinywheel/__init__.py"))
    assert site and "1.0" in site[0].read_text()                               # pip entry
    manifest = json.loads((path / ".fdlenv/manifest.json").read_text())
    assert manifest["key"] == out["key"] and manifest["links"]["copied"] == []
    assert {r["name"] for r in manifest["records"]} == {"libtorch-cpu", "hooks", "common-data", "tinywheel"}
    arch = (path / "libtorch/.arch").read_text().splitlines()
    assert "source=locked" in arch and "variant=cpu" in arch and "torch=2.10.0" in arch
    # flodl's view
    assert (w.home.libtorch / ".active").read_text() == "precompiled/cpu\n"
    assert os.path.realpath(w.home.libtorch / "precompiled/cpu") == str(path / "libtorch")
    assert not list(w.home.staging.iterdir())


# The re-dial path when no memo answers it (the first call after a change writes the memo
# that `hot.replay` answers the next ones from): what `fdlenv env realize` of a realised env
# imports (docs/ARCHITECTURE.md lists it). Records there are `base.record.Record`s, tuples at
# run time: neither typing nor dataclasses is imported, nor hashlib (CPython's own sha256 module serves the lock's
# digest) nor shutil (cli's parser computes the help width itself).
REDIAL_MODULES = {
    "fdlenv", "fdlenv.__main__", "fdlenv.front.cli", "fdlenv.base.errors", "fdlenv.base.progress", "fdlenv.base.hashing", "fdlenv.base.atomic",
    "fdlenv.front.commands", "fdlenv.front.commands.env", "fdlenv.front.options", "fdlenv.app.settings", "fdlenv.app.libtorch", "fdlenv.app.lockview", "fdlenv.store.active",
    "fdlenv.names.home", "fdlenv.index.mirrors", "fdlenv.lock.paths", "fdlenv.config.fdlfile", "fdlenv.names.variants",
    "fdlenv.store", "fdlenv.store.realise", "fdlenv.store.fastpath", "fdlenv.store.env",
    "fdlenv.store.envkey", "fdlenv.store.pointers", "fdlenv.store.leases", "fdlenv.base.flocks", "fdlenv.base.output",
    "fdlenv.names.platforms", "fdlenv.hot.replay", "fdlenv.base.confine", "fdlenv.names.leasefile", "fdlenv.names.buildtree", "fdlenv.hot.memo", "fdlenv.base.shells",
    "fdlenv.base.memory", "fdlenv.names.roots", "fdlenv.store.statecodec",
    "fdlenv.base.record",   # typed records (the option table's, ChannelMap, Libtorch): tuples, no typing or collections
    "fdlenv.front.table", "fdlenv.config.model",   # the option table; Libtorch, the token parsed once
    # the packages those live in (each an __init__ of a docstring)
    "fdlenv.app", "fdlenv.base", "fdlenv.config", "fdlenv.front", "fdlenv.hot", "fdlenv.index", "fdlenv.lock",
    "fdlenv.names",
    "fdlenv.store.health",   # the per-attempt check: every file's lstat against the realise's table
}
NEVER_ON_REDIAL = ("typing", "dataclasses", "shutil", "rattler", "conda_lock", "yaml", "filelock")


def test_second_realise_is_the_fast_path_on_the_declared_modules_only(tmp_path):
    w = make_world(tmp_path)
    first = realise_json(w)
    code, out, mods = imported(["env", "realize", "--libtorch", "cpu", "--lock", str(w.lock),
                                "--home", str(w.home.root), "--json"])
    banned = set(NEVER_ON_REDIAL) | ({"hashlib"} if mods & {"_sha256", "_sha2"} else set())
    assert json.loads(out)["key"] == first["key"] and json.loads(out)["created"] is False
    assert code == 0 and not mods & banned, mods & banned
    assert of_fdlenv(mods) <= REDIAL_MODULES, of_fdlenv(mods) - REDIAL_MODULES


def test_reader_agrees_with_conda_lock_parser(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"), wheel=True)
    oracle = parse_conda_lock_file(w.lock)
    plat = this_platform()
    for variant in ("cpu", "cu126"):
        ours = {(r.manager, r.name, r.version, r.sha256, r.url) for r in read_variant(w.lock, variant, plat)}
        theirs = {(p.manager, p.name, p.version, p.hash.sha256, p.url) for p in oracle.package
                  if p.platform == plat and p.categories & {"main", variant}}
        assert ours == theirs and ours


def test_variants_do_not_mix_and_each_gets_its_key(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"))
    cpu, cu = realise_json(w, "cpu"), realise_json(w, "12.6")
    assert cpu["key"] != cu["key"]
    assert (w.home.envs / os.path.basename(cu["path"]) / "libtorch/lib/libtorch.so").read_bytes() == b"cu126-lib"
    metas = {p.name for p in (w.home.envs / os.path.basename(cpu["path"]) / "conda-meta").glob("*.json")}
    assert not any("cu126" in m for m in metas)


def test_changed_lock_gives_new_key_and_old_env_stays(tmp_path):
    w = make_world(tmp_path)
    old = realise_json(w)
    bump_variant(w)
    new = realise_json(w)
    assert new["key"] != old["key"] and new["created"]
    assert (w.home.envs / os.path.basename(old["path"]) / "libtorch/lib/libtorch.so").read_bytes() == b"cpu-lib"
    assert (w.home.envs / os.path.basename(new["path"]) / "libtorch/lib/libtorch.so").read_bytes() == b"cpu-v2"


def test_mirror_maps_a_moved_channel(tmp_path):
    w = make_world(tmp_path)
    moved = tmp_path / "mirror" / "flodl"
    shutil.move(str(w.home.channel), moved)
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), "--json")
    assert res.returncode == 2 and "--mirror" in res.stderr
    out = realise_json(w, "cpu", "--mirror", f"flodl={moved.as_uri()}")
    assert out["created"]


def test_fdl_yml_supplies_lock_and_mirrors(tmp_path):
    w = make_world(tmp_path)
    moved = tmp_path / "elsewhere" / "flodl"
    shutil.move(str(w.home.channel), moved)
    proj = tmp_path / "proj"
    proj.mkdir()
    (proj / "fdl.yml").write_text(f"fdlenv:\n  lock: {w.lock}\n  mirrors:\n    flodl: {moved.as_uri()}\n")
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--home", str(w.home.root), "--json", cwd=proj, check=True)
    assert json.loads(res.stdout)["created"]


def test_missing_variant_names_the_variants_the_lock_has(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"))
    with pytest.raises(Fail) as e:
        realise(w.home, "rocm7.1", w.lock)
    assert "rocm7.1" in str(e.value) and "cpu, cu126" in str(e.value)
    res = fdlenv("env", "realize", "--libtorch", "cu999", "--lock", str(w.lock), "--home", str(w.home.root))
    assert res.returncode == 2 and res.stderr.startswith("error: --libtorch") and "rocm7.1" in res.stderr


def test_split_lock_is_read_per_variant(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"))
    split = tmp_path / "split" / "conda-lock.yml"
    written = lock_envs(w.envs, split, home=w.home, split=True)
    assert len(written) == 2 and not split.exists()
    env = realise(w.home, "cu126", split)
    assert (env.libtorch_root / "lib/libtorch.so").read_bytes() == b"cu126-lib"


def test_extra_package_in_channel_does_not_change_key(tmp_path):
    w = make_world(tmp_path)
    first = realise_json(w)
    make_channel(w.home.channel, [Pkg("unrelated", "1.0", files={"x": "y"})])
    lock_envs(w.envs, w.lock, home=w.home)
    assert realise_json(w)["key"] == first["key"]


def test_flodls_own_precompiled_download_is_never_touched(tmp_path):
    """A box where `fdl libtorch download` ran: precompiled/cpu is a real directory."""
    w = make_world(tmp_path)
    flodl = w.home.libtorch / "precompiled" / "cpu"
    (flodl / "lib").mkdir(parents=True)
    (flodl / "lib" / "libtorch.so").write_bytes(b"flodl's own")
    (flodl / "build-version").write_text("2.10.0+cpu\n")
    before = {p: p.read_bytes() for p in flodl.rglob("*") if p.is_file()}
    for _ in range(2):
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), "--json")
        assert res.returncode == 0, res.stderr
    run = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), "--",
                 "sh", "-c", 'cat "$LIBTORCH_PATH/lib/libtorch.so"')
    assert run.returncode == 0 and run.stdout == "cpu-lib"      # the locked env, not flodl's copy
    assert not flodl.is_symlink() and {p: p.read_bytes() for p in flodl.rglob("*") if p.is_file()} == before
    # fdlenv's own pointer lives beside flodl's, and no temp name is left behind
    assert sorted(p.name for p in (w.home.libtorch / "precompiled").iterdir()) == ["cpu", "cpu-fdlenv"]
    assert (w.home.libtorch / "precompiled" / "cpu-fdlenv" / "lib" / "libtorch.so").read_bytes() == b"cpu-lib"
