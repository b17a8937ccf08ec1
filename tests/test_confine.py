"""One helper keeps paths made from data inside their root and fdlenv's own files off links
(fdlenv/base/confine.py); each caller has its own end-to-end test (export: test_mirror_export,
the env builder: test_env_confinement, the package cache: test_streamzip and
test_store_faults, the replay: test_hotpath)."""

from __future__ import annotations

import os

import pytest

from fdlenv.base import confine
from fdlenv.hot import replay
from fdlenv.base.errors import Fail


@pytest.mark.parametrize(("name", "why"), [
    ("pytorch/../x", "climbs out"), ("a/b/../../../x", "climbs out"), ("/etc/passwd", "absolute"),
    ("a\0b", "NUL"), ("", "empty"), ("./.", "empty"),
])
def test_a_path_that_leaves_its_root_is_named_with_why(name, why):
    assert why in confine.problem(name)


def test_quoted_slashes_are_unquoted_before_the_check_and_backslashes_only_for_zip_members():
    assert confine.problem("torch-1%2F..%2F..%2Fx.whl") is None           # a name, as it stands
    assert "climbs out" in confine.problem("torch-1%2F..%2F..%2Fx.whl", quoted=True)
    assert confine.problem("a\\..\\b") is None and "backslash" in confine.problem("a\\..\\b", backslash=True)


def test_inside_normalises_and_refuses_naming_the_field_and_a_symlink_on_the_way(tmp_path):
    assert confine.inside(tmp_path, "a//./b", "f") == tmp_path / "a" / "b"
    with pytest.raises(Fail) as e:
        confine.inside(tmp_path, "pytorch/cpu/torch-1%2F..%2F..%2F..%2Fx.whl", "the lock entry torch", quoted=True)
    assert not e.value.transient and e.value.message.startswith("the lock entry torch: the path ")
    (tmp_path / "out").mkdir()
    os.symlink(tmp_path / "out", tmp_path / "link")
    with pytest.raises(Fail, match="runs through the symlink"):
        confine.inside(tmp_path, "link/x", "f")


def test_an_own_file_replaces_a_link_standing_there_and_never_writes_through_it(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("shared\n")
    env = tmp_path / "env"
    (env / "libtorch").mkdir(parents=True)
    os.symlink("../../victim.txt", env / "libtorch" / ".arch")
    assert confine.write_own(env, "libtorch/.arch", b"cuda=none\n")
    assert victim.read_text() == "shared\n" and not (env / "libtorch" / ".arch").is_symlink()
    assert (env / "libtorch" / ".arch").read_bytes() == b"cuda=none\n"
    os.symlink("../../victim.txt", env / "libtorch" / "build-version")
    assert not confine.write_own(env, "libtorch/build-version", b"x\n", keep=True)   # what stands, stays
    assert victim.read_text() == "shared\n"


def test_an_own_file_under_a_linked_directory_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir()
    env = tmp_path / "env"
    env.mkdir()
    os.symlink(tmp_path / "elsewhere", env / ".fdlenv")
    with pytest.raises(confine.Refused):
        confine.write_own(env, ".fdlenv/manifest.json", b"{}")
    assert list((tmp_path / "elsewhere").iterdir()) == []


def test_within_resolves_links_and_dots_on_both_sides(tmp_path):
    (tmp_path / "home" / "envs" / "cpu-1").mkdir(parents=True)
    os.symlink(tmp_path / "home", tmp_path / "via")
    os.symlink(tmp_path, tmp_path / "home" / "envs" / "out")
    assert replay.within(str(tmp_path / "via/envs/cpu-1"), str(tmp_path / "home/envs"))
    assert not replay.within(str(tmp_path / "home/envs/../x"), str(tmp_path / "home/envs"))
    assert not replay.within(str(tmp_path / "home/envs/out"), str(tmp_path / "home/envs"))
    assert not replay.within(str(tmp_path / "home/envs"), str(tmp_path / "home/envs"))
