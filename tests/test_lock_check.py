"""`fdlenv lock --check`: satisfiability of the specs, not an input hash."""

from __future__ import annotations

import json

import pytest
from helpers_conda import Pkg, channel_url, make_channel, make_wheel, write_env

from fdlenv.front import cli
from fdlenv.names.home import Home
from fdlenv.lock import check_locks, lock_envs


@pytest.fixture
def locked(tmp_path):
    home = Home(tmp_path / "home")
    make_channel(home.channel, [
        Pkg("libtorch-cpu", "2.10.0", depends=["zlib >=1.2"]),
        Pkg("libtorch-cu126", "2.10.0", depends=["zlib", "__cuda >=12.6"]),
        Pkg("zlib", "1.2"), Pkg("zlib", "1.3"),
        Pkg("rsync", "3.4", depends=["zlib"]),
    ])
    envs = tmp_path / "envs"
    wheel = make_wheel(envs / "wheels", "helper", "1.0")
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.*", "rsync", {"pip": [f"wheels/{wheel.name}"]}])
    write_env(envs, "cu126", ["flodl"], ["libtorch-cu126", "rsync"])
    out = tmp_path / "conda-lock.yml"
    lock_envs(envs, out, home=home)
    return home, envs, out, wheel


def test_fresh_lock_passes(locked):
    home, envs, out, _ = locked
    assert check_locks(envs, out, home=home) == []


def test_cosmetic_edit_is_not_stale(locked):
    home, envs, out, wheel = locked
    write_env(envs, "cpu", ["flodl"], ["rsync", "libtorch-cpu >=2.10", {"pip": [f"wheels/{wheel.name}"]}])
    assert check_locks(envs, out, home=home) == []


def test_version_constraint_change_is_stale(locked):
    home, envs, out, wheel = locked
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.11.*", "rsync", {"pip": [f"wheels/{wheel.name}"]}])
    (line,) = check_locks(envs, out, home=home)
    assert line.startswith("cpu (linux-64):") and "libtorch-cpu 2.11.*" in line and "2.10.0" in line


def test_new_and_removed_specs_are_stale(locked):
    home, envs, out, _ = locked
    write_env(envs, "cu126", ["flodl"], ["libtorch-cu126", "cmake"])
    problems = check_locks(envs, out, home=home, variants=["cu126"])
    assert any("nothing named cmake is locked" in p for p in problems)
    assert any("rsync is locked but nothing" in p for p in problems)


def test_channel_change_is_stale(locked, tmp_path):
    home, envs, out, _ = locked
    other = make_channel(tmp_path / "elsewhere", [Pkg("zlib", "1.3")])
    write_env(envs, "cu126", [channel_url(other)], ["libtorch-cu126", "rsync"])
    problems = check_locks(envs, out, home=home, variants=["cu126"])
    assert problems and all("does not name" in p for p in problems)
    assert any("libtorch-cu126" in p for p in problems)


def test_changed_wheel_is_stale(locked):
    home, envs, out, wheel = locked
    make_wheel(wheel.parent, "helper", "1.0", files={"__init__.py": "CHANGED = True\n"})
    (line,) = check_locks(envs, out, home=home)
    assert "pip wheel helper changed" in line


def test_a_missing_variant_is_stale_when_asked_for_and_left_to_on_demand_otherwise(locked):
    home, envs, out, _ = locked
    write_env(envs, "cu128", ["flodl"], ["rsync"])
    (line,) = check_locks(envs, out, variants=["cu128"], home=home)
    assert line.startswith("cu128: not locked")
    assert check_locks(envs, out, home=home) == []     # locked on demand where it is asked for


def test_cli_check_exit_codes(locked, capsys):
    home, envs, out, wheel = locked
    base = ["lock", "--check", "--envs", str(envs), "--out", str(out), "--home", str(home.root), "--json"]
    assert cli.main(base) == 0
    assert json.loads(capsys.readouterr().out) == {"schema": 1, "stale": False, "problems": []}
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.9.*", "rsync", {"pip": [f"wheels/{wheel.name}"]}])
    assert cli.main(base) == 1
    captured = capsys.readouterr()
    assert json.loads(captured.out)["stale"] is True
    assert "stale: cpu (linux-64): 'libtorch-cpu 2.9.*'" in captured.err
