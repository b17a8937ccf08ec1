"""Nothing a lock's packages hold is written outside the env: symlinks are checked by where they
resolve, no path is written through one, and activation scripts come only from conda packages
(store/install_worker.py, store/linktree.link, store/maintain.verify)."""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest

from helpers_conda import Pkg, make_channel, make_wheel, write_env
from helpers_cli import fdlenv
from helpers_store import make_world, visible_envs

from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

SITE = f"lib/python{sys.version_info[0]}.{sys.version_info[1]}/site-packages"


def _outside(tmp: Path) -> Path:
    out = tmp / "outside"
    (out / "lib").mkdir(parents=True)
    (out / "lib" / "libtorch.so").write_bytes(b"the host's own")
    return out


def _tree(root: Path) -> dict[str, bytes]:
    return {str(p.relative_to(root)): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def _lock_with(w, extra: list[Pkg], wheel: Path | None = None) -> None:
    make_channel(w.home.channel, extra)
    deps: list = ["libtorch-cpu 2.10.0", "hooks", "common-data", *(p.name for p in extra)]
    if wheel:
        deps.append({"pip": [str(wheel)]})
    write_env(w.envs, "cpu", ["flodl"], deps)
    lock_envs(w.envs, w.lock, home=w.home)


def _realise(w):
    return fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root))


def _refused(w, res, outside: Path, before: dict, *words: str) -> None:
    assert res.returncode == 2, res.stderr
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error:") and all(word in last for word in words), last
    assert "Traceback" not in res.stderr
    assert _tree(outside) == before, "a file outside the env was written"
    assert visible_envs(w.home) == []
    assert not [p for p in w.home.staging.iterdir()] if w.home.staging.is_dir() else True


def test_a_package_symlink_out_of_the_env_is_refused_before_a_wheel_is_linked_through_it(tmp_path):
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    before = _tree(outside)
    wheel = make_wheel(tmp_path / "wheels", "torchish", "1.0", {"lib/libtorch.so": b"from the wheel"},
                       top="torchish")
    _lock_with(w, [Pkg("trap", "1.0", symlinks={f"{SITE}/torchish": str(outside)})], wheel)
    _refused(w, _realise(w), outside, before, "trap", "resolves outside the env")


def test_a_relative_symlink_that_climbs_out_is_refused(tmp_path):
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    before = _tree(outside)
    _lock_with(w, [Pkg("climber", "1.0", symlinks={"share/up": "../../../../outside"})])
    _refused(w, _realise(w), outside, before, "climber", "share/up")


def test_a_package_writing_through_another_packages_symlink_is_refused_before_the_install(tmp_path):
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    before = _tree(outside)
    _lock_with(w, [Pkg("door", "1.0", symlinks={"share/door": str(outside / "lib")}),
                   Pkg("walker", "1.0", files={"share/door/libtorch.so": "replaced"})])
    _refused(w, _realise(w), outside, before, "walker", "door", "through")


def test_a_file_over_another_packages_symlink_is_refused(tmp_path):
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    before = _tree(outside)
    _lock_with(w, [Pkg("pointer", "1.0", symlinks={"lib/libfoo.so": str(outside / "lib" / "libtorch.so")}),
                   Pkg("clobber", "1.0", files={"lib/libfoo.so": "over it"})])
    _refused(w, _realise(w), outside, before, "clobber", "over")


def test_a_wheel_shipping_an_activation_script_is_refused(tmp_path):
    w = make_world(tmp_path)
    outside = _outside(tmp_path)
    wheel = make_wheel(tmp_path / "wheels", "sneaky", "1.0",
                       {"data/etc/conda/activate.d/sneaky.sh": f"touch {tmp_path}/ran\n"}, top="sneaky-1.0.data")
    _lock_with(w, [], wheel)
    _refused(w, _realise(w), outside, _tree(outside), "sneaky", "etc/conda")
    assert not (tmp_path / "ran").exists()


def test_symlinks_inside_the_env_are_kept_and_verify_full_flags_one_planted_to_the_outside(tmp_path):
    w = make_world(tmp_path)
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root),
                 "--json", check=True)
    env = Path(json.loads(res.stdout)["path"])
    assert os.readlink(env / "share/hooks/link.txt") == "where.txt"       # a package's own link, kept
    assert fdlenv("env", "verify", "--full", "--home", str(w.home.root)).returncode == 0
    os.symlink(tmp_path, env / "share" / "escape")
    res = fdlenv("env", "verify", "--full", "--json", "--home", str(w.home.root))
    assert res.returncode == 2
    problems = json.loads(res.stdout)["envs"][0]["problems"]
    assert [p["path"] for p in problems] == ["share/escape"] and "outside" in problems[0]["what"]


OVER_OWN = {
    "a link at libtorch/.arch": Pkg("archlink", "1.0", symlinks={"libtorch/.arch": "../share/common/data.txt"}),
    "a link at .fdlenv/manifest.json": Pkg("metalink", "1.0",
                                           symlinks={".fdlenv/manifest.json": "../share/common/data.txt"}),
    "a file at libtorch/.arch": Pkg("archfile", "1.0", files={"libtorch/.arch": "cuda=mine\n"}),
}


@pytest.mark.parametrize("what", OVER_OWN, ids=list(OVER_OWN))
def test_a_package_shipping_anything_where_fdlenv_writes_its_own_file_is_refused_and_no_shared_file_changes(
        tmp_path, what):
    """A first env is published; a second, sharing the package cache, holds a package with a link
    (to a file hard-linked from the cache) or a file where fdlenv writes `.arch` or the manifest:
    refused naming the package and the path, and the first env's file and the cache's unchanged."""
    w = make_world(tmp_path)
    first = Path(json.loads(_realise_json(w))["path"])
    victim = first / "share" / "common" / "data.txt"
    before = victim.read_bytes()
    pkg = OVER_OWN[what]
    _lock_with(w, [pkg])
    res = _realise(w)
    print(res.stderr.strip().splitlines()[-1])
    assert victim.read_bytes() == before and victim.stat().st_nlink > 1
    rel = next(iter(pkg.symlinks or pkg.files))
    assert res.returncode == 2 and res.stderr.count("error:") == 1 and "Traceback" not in res.stderr, res.stderr
    assert pkg.name in res.stderr and rel.split("/")[0] in res.stderr
    assert visible_envs(w.home) == [first]
    assert fdlenv("env", "verify", "--full", "--home", str(w.home.root)).returncode == 0


def _realise_json(w) -> str:
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root), "--json",
                 check=True)
    return res.stdout
