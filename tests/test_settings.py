"""One resolver for home, mirrors and lock: flags > environment > fdl.yml's `fdlenv:` > defaults,
and every command that touches the store (lock, pack, walkthrough too) honours it."""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_conda import Pkg, channel_url, make_channel, write_env
from helpers_wheels import make_index, make_wheels, write_wheel_env
from test_pack_libtorch import official_zip
from test_walkthrough import FAKE_CXX

from fdlenv.front import cli
from fdlenv.app import settings
from fdlenv.names.home import Home
from fdlenv.base.errors import Fail
from fdlenv.lock import lock_envs
from fdlenv.lock.paths import shipped_lock


@pytest.fixture
def project(tmp_path, monkeypatch):
    """A project dir with fdl.yml as the cwd; $HOME elsewhere and no $FLODL_HOME."""
    proj = tmp_path / "proj"
    proj.mkdir()
    monkeypatch.chdir(proj)
    monkeypatch.setenv("HOME", str(tmp_path / "user"))
    monkeypatch.delenv("FLODL_HOME", raising=False)
    return proj


def write_fdl(proj: Path, block: str) -> None:
    (proj / "fdl.yml").write_text("fdlenv:\n" + block)


def test_home_is_the_flag_then_the_environment_then_fdl_yml_then_the_user_default(project, monkeypatch, tmp_path):
    write_fdl(project, "  home: ./h\n")
    assert settings.resolve("/flag").home == Home(Path("/flag"))
    monkeypatch.setenv("FLODL_HOME", "/env")
    assert settings.resolve().home == Home(Path("/env"))
    monkeypatch.delenv("FLODL_HOME")
    assert settings.resolve().home == Home(project / "h")
    (project / "fdl.yml").unlink()
    assert settings.resolve().home == Home(tmp_path / "user" / ".flodl")


def test_mirrors_are_fdl_yml_with_each_flag_over_it_and_the_locks_are_one_view_in_order(project):
    write_fdl(project, "  mirrors:\n    a: file:///a\n    b: file:///b\n")
    s = settings.resolve(mirrors=["b=file:///cli-b"])
    assert dict(s.mirrors) == {"a": "file:///a", "b": "file:///cli-b"}
    view = s.view(project / "src")
    assert view.near == [project / "conda-lock.yml", project / "src" / "conda-lock.yml"]
    assert view.far == [s.home.root / "lockfiles" / "conda-lock.yml", shipped_lock()]
    (project / "other.yml").write_text("")
    assert settings.resolve(lock="other.yml").view().near[0] == project / "other.yml"
    with pytest.raises(Fail):
        settings.resolve(lock="missing.yml").view().holder("cpu", "linux-64")


def test_frozen_is_the_flag_else_the_environment_else_fdl_yml(project, monkeypatch):
    assert settings.resolve().frozen is False and settings.resolve(frozen=True).frozen is True
    monkeypatch.setenv("FDLENV_FROZEN", "1")
    assert settings.resolve().frozen is True
    monkeypatch.delenv("FDLENV_FROZEN")
    write_fdl(project, "  frozen: true\n")
    assert settings.resolve().frozen is True


def _cpu_env(project: Path) -> Path:
    envs = project / "envs"
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu"])
    return envs


def _lock_urls(lock: Path) -> list[str]:
    import yaml

    return [p["url"] for p in yaml.safe_load(lock.read_text())["package"]]


def test_fdlenv_lock_solves_from_the_channel_of_fdl_yml_home(project):
    write_fdl(project, "  home: ./h\n")
    make_channel(Home(project / "h").channel, [Pkg("libtorch-cpu", "2.10.0")])
    _cpu_env(project)
    assert cli.main(["lock", "--envs", "envs", "--out", "conda-lock.yml"]) == 0
    assert all(u.startswith(channel_url(Home(project / "h").channel)) for u in _lock_urls(project / "conda-lock.yml"))


def test_fdlenv_lock_maps_channels_through_fdl_yml_mirrors(project, tmp_path):
    elsewhere = tmp_path / "mirror" / "flodl"
    make_channel(elsewhere, [Pkg("libtorch-cpu", "2.10.0")])
    write_fdl(project, f"  mirrors:\n    flodl: {channel_url(elsewhere)}\n")
    _cpu_env(project)
    assert cli.main(["lock", "--envs", "envs", "--out", "conda-lock.yml"]) == 0
    assert all(u.startswith(channel_url(elsewhere)) for u in _lock_urls(project / "conda-lock.yml"))


def test_fdlenv_pack_fills_the_channel_of_fdl_yml_home(project, tmp_path, capsys):
    write_fdl(project, "  home: ./h\n")
    rc = cli.main(["pack", "libtorch", "--variant", "cpu", "--from", str(official_zip(tmp_path, "cpu")), "--json"])
    assert rc == 0
    assert Path(json.loads(capsys.readouterr().out)["path"]).parent == Home(project / "h").channel / "linux-64"


def test_the_walkthrough_uses_fdl_yml_home_and_mirrors(project, tmp_path):
    url = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    write_wheel_env(tmp_path / "envs", "cu128")
    lock = tmp_path / "conda-lock.yml"
    lock_envs(tmp_path / "envs", lock, mirrors={"pypi": url}, home=Home(tmp_path / "lockhome"))
    write_fdl(project, f"  home: ./h\n  mirrors:\n    pypi: {url}\n")
    cxx = tmp_path / "fake-cxx"
    cxx.write_text(FAKE_CXX)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    res = subprocess.run([sys.executable, "-m", "fdlenv", "walkthrough", "--lock", str(lock), "--json"],
                         capture_output=True, text=True, env={**os.environ, "CXX": str(cxx)})
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["home"] == str(project / "h") and out["libtorch_root"].startswith(str(project / "h" / "envs"))
