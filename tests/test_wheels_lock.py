"""`fdlenv lock` on wheel variants: pip resolves torch through a named index into the libtorch closure.

The index is a real PEP 503 tree of real wheels on file://, reached only through
`--mirror NAME=URL` (as a user's mirror would be); conda-lock's own parser is
the oracle for what the lock holds.
"""

from __future__ import annotations

import pytest
from conda_lock.lockfile import parse_conda_lock_file
from helpers_conda import make_wheel
from helpers_wheels import CLOSURE, TORCH_TAG, make_index, make_wheels, sha256, torch_files, write_wheel_env

from fdlenv.front import cli
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import check_locks, lock_envs
from fdlenv.lock.paths import split_path


@pytest.fixture
def index(tmp_path):
    wheels = make_wheels(tmp_path / "built")
    return make_index(tmp_path / "simple", wheels), {w.name: w for w in wheels}


def test_the_lock_keeps_torch_and_its_native_runtime_wheels_only(tmp_path, index):
    url, wheels = index
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, mirrors={"pypi": url}, home=Home(tmp_path / "home"))
    packages = parse_conda_lock_file(out).package
    assert {p.name for p in packages} == CLOSURE
    for p in packages:
        assert p.manager == "pip" and p.categories == {"cu128"} and p.platform == "linux-64"
        filename = p.url.rsplit("/", 1)[1]
        assert p.url == f"pip+index://pypi/{p.name}/{filename}"
        assert p.hash.sha256 == sha256(wheels[filename])
    deps = {p.name: p.dependencies for p in packages}
    assert deps["torch"] == {"nvidia-fake-cu12": "==1.0", "nvidia-rt-fake": "==1.0"}   # through cuda-meta-fake[rt]
    assert deps["nvidia-fake-cu12"] == {"nvidia-dep-cu12": ">=2"}
    text = out.read_text()
    assert str(tmp_path) not in text and "file:" not in text   # index-relative: no location of the index


def test_the_lock_is_byte_stable_and_check_passes(tmp_path, index):
    url, _ = index
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    a, b = tmp_path / "a.yml", tmp_path / "b.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, a, mirrors={"pypi": url}, home=home)
    lock_envs(envs, b, mirrors={"pypi": url}, home=home)
    assert a.read_bytes() == b.read_bytes()
    assert check_locks(envs, a, home=home) == []


def test_check_is_offline_and_names_a_moved_pin_and_another_index(tmp_path, index):
    url, _ = index
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    out = tmp_path / "conda-lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, out, mirrors={"pypi": url}, home=home)
    write_wheel_env(envs, "cu128", "torch ==2.11.0")
    problems = check_locks(envs, out, home=home)
    assert any("torch==2.11.0" in p and "2.10.0" in p for p in problems), problems
    assert len(problems) == 1
    write_wheel_env(envs, "cu128", index="pytorch/cu128")
    problems = check_locks(envs, out, home=home)
    assert any("pytorch/cu128" in p for p in problems), problems


def test_a_second_variant_goes_to_its_own_file_and_leaves_the_first_as_it_was(tmp_path, index):
    url, _ = index
    cpu_torch = make_wheel(tmp_path / "cpu-built", "torch", "2.10.0+cpu", torch_files("cpu"),
                           tag=TORCH_TAG)   # a CPU torch: no nvidia-* requirement
    make_index(tmp_path / "other", [cpu_torch])
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    write_wheel_env(envs, "cpu", index="pytorch/cpu")
    out = tmp_path / "conda-lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, out, variants=["cu128"], mirrors={"pypi": url}, home=home)
    before = out.read_bytes()
    # `pytorch=URL` serves `pytorch/cpu` as URL/cpu: PyTorch's index layout
    (tmp_path / "pt").mkdir()
    (tmp_path / "pt" / "cpu").symlink_to(tmp_path / "other")
    written = lock_envs(envs, out, variants=["cpu"], mirrors={"pytorch": (tmp_path / "pt").as_uri()}, home=home)
    assert written == [split_path(out, "cpu")] and written[0].name == "cpu.conda-lock.yml"
    assert out.read_bytes() == before
    cpu = parse_conda_lock_file(written[0]).package
    assert {p.name: p.version for p in cpu}["torch"] == "2.10.0+cpu"
    assert all(p.url.startswith("pip+index://pytorch/cpu/") for p in cpu)
    assert check_locks(envs, out, home=home) == []
    # the index was read through the mirror's prefix: the locked torch is the wheel it serves
    assert {p.name: p.hash.sha256 for p in cpu}["torch"] == sha256(tmp_path / "other" / "files" / cpu_torch.name)


def test_an_index_name_nothing_maps_is_one_error_naming_the_flag(tmp_path, capsys):
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu126", index="inhouse/cu126")
    rc = cli.main(["lock", "--envs", str(envs), "--out", str(tmp_path / "l.yml"), "--home", str(tmp_path / "h")])
    err = capsys.readouterr().err
    assert rc == 2 and err.count("error:") == 1
    assert "--mirror inhouse=URL" in err and not (tmp_path / "l.yml").exists()


def test_pytorch_index_names_default_to_pytorchs_own_index_and_a_mirror_overrides_them():
    from fdlenv.index.pipindex import base_url

    assert base_url("pytorch/rocm7.1", {}) == "https://download.pytorch.org/whl/rocm7.1"
    assert base_url("pytorch/cpu", {"pytorch": "http://m.example/whl/"}) == "http://m.example/whl/cpu"
    assert base_url("pytorch/cpu", {"pytorch/cpu": "http://m.example/cpu"}) == "http://m.example/cpu"


def test_a_requirement_nothing_satisfies_fails_permanently_and_writes_nothing(tmp_path, index):
    url, _ = index
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128", "torch ==9.9")
    with pytest.raises(Fail) as e:
        lock_envs(envs, tmp_path / "l.yml", mirrors={"pypi": url}, home=Home(tmp_path / "h"))
    assert e.value.exit_code == 2 and "torch==9.9" in str(e.value)
    assert not (tmp_path / "l.yml").exists()
