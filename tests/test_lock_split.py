"""The one-build-per-(manager, name, platform) invariant: refusal, and --split."""

from __future__ import annotations

import pytest
from conda_lock.lockfile import parse_conda_lock_file
from helpers_conda import Pkg, make_channel, write_env

from fdlenv.front import cli
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import check_locks, lock_envs, split_path


@pytest.fixture
def setup(tmp_path):
    home = Home(tmp_path / "home")
    make_channel(home.channel, [
        Pkg("libtorch-cpu", "2.10.0", depends=["protobuf 5.*"]),
        Pkg("libtorch-cu128", "2.10.0", depends=["protobuf 6.*", "__cuda >=12.8"]),
        Pkg("protobuf", "5.1", files={"lib/p": b"5"}),
        Pkg("protobuf", "6.2", files={"lib/p": b"6"}),
        Pkg("git", "2.50", files={"bin/git": b"g"}),
    ])
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu", "git"])
    write_env(envs, "cu128", ["flodl"], ["libtorch-cu128", "git"])
    return home, envs, tmp_path / "conda-lock.yml"


def test_refuses_naming_package_and_variants(setup):
    home, envs, out = setup
    with pytest.raises(Fail) as e:
        lock_envs(envs, out, home=home)
    msg = str(e.value)
    assert "protobuf" in msg and "cpu needs protobuf-5.1-0" in msg and "cu128 needs protobuf-6.2-0" in msg
    assert "--split" in msg and "git" not in msg.split("\n", 1)[1]
    assert not out.exists()


def test_split_writes_one_lock_per_variant(setup):
    home, envs, out = setup
    written = lock_envs(envs, out, split=True, home=home)
    assert written == [split_path(out, "cpu"), split_path(out, "cu128")]
    assert [p.name for p in written] == ["cpu.conda-lock.yml", "cu128.conda-lock.yml"]
    versions = {}
    for variant, path in zip(("cpu", "cu128"), written, strict=True):
        lf = parse_conda_lock_file(path)
        assert {c for p in lf.package for c in p.categories} == {variant}
        versions[variant] = {p.name: p.version for p in lf.package}
    assert versions["cpu"]["protobuf"] == "5.1" and versions["cu128"]["protobuf"] == "6.2"
    assert versions["cpu"]["git"] == versions["cu128"]["git"] == "2.50"
    assert not out.exists()
    assert check_locks(envs, out, home=home) == []   # --check reads the split files


def test_cli_refusal_exit_code_and_split(setup, capsys):
    home, envs, out = setup
    base = ["lock", "--envs", str(envs), "--out", str(out), "--home", str(home.root)]
    assert cli.main(base) == 2
    assert "protobuf" in capsys.readouterr().err
    assert cli.main(base + ["--split", "--json"]) == 0
    assert "cu128.conda-lock.yml" in capsys.readouterr().out
    assert cli.main(base + ["--check"]) == 0
