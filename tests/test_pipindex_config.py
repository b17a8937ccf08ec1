"""Where the index name `pypi` points when no --mirror says: read from pip's and uv's settings,
never by running pip, so an install without pip (`uv tool install`) finds the same index.

Each test writes real config files under its own HOME and passes the environment it means;
PIP_CONFIG_FILE=os.devnull and UV_NO_CONFIG=1 shut out the machine's own files where a test
needs none. pip's default index is compared with pip's own constant, so no host is written here.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers_install import ROOT, clean_environ, plain_venv

from fdlenv.index import pipindex
from fdlenv.base.errors import Fail

A, B, C, D = (f"file:///srv/index-{x}/simple" for x in "abcd")


@pytest.fixture
def env(tmp_path):
    """HOME and the XDG dirs inside tmp_path, no index variables: the machine's settings stay out
    (its /etc/pip.conf aside, which names no index-url on a machine these tests run on)."""
    (tmp_path / "xdg-dirs").mkdir()
    return {"HOME": str(tmp_path / "home"), "XDG_CONFIG_DIRS": str(tmp_path / "xdg-dirs"),
            "UV_NO_CONFIG": "1"}


def write(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    return path


def pips_default() -> str:
    from pip._internal.models.index import PyPI

    return PyPI.simple_url


def test_pip_index_url_beats_uv_variables_and_every_config_file(env, tmp_path):
    write(Path(env["HOME"]) / ".config/pip/pip.conf", f"[install]\nindex-url = {C}\n")
    env.update(PIP_INDEX_URL=f"{A} ", UV_DEFAULT_INDEX=B, UV_INDEX_URL=D)
    assert pipindex.configured_index(env) == (A, "PIP_INDEX_URL")
    del env["PIP_INDEX_URL"]
    assert pipindex.configured_index(env) == (B, "UV_DEFAULT_INDEX")
    del env["UV_DEFAULT_INDEX"]
    assert pipindex.configured_index(env) == (D, "UV_INDEX_URL")


def test_pips_install_section_beats_global_whichever_file_holds_it(env):
    home = Path(env["HOME"])
    legacy = write(home / ".pip/pip.conf", f"[install]\nindex_url = {A}\n")
    write(home / ".config/pip/pip.conf", f"[global]\nindex-url = {B}\n[freeze]\nindex-url = {C}\n")
    assert pipindex.configured_index(env) == (A, f"{legacy} [install]")


def test_a_later_pip_config_file_overrides_an_earlier_one_in_the_same_section(env, tmp_path):
    home = Path(env["HOME"])
    write(home / ".pip/pip.conf", f"[global]\nindex-url = {A}\n")
    user = write(home / ".config/pip/pip.conf", f"[global]\nindex-url = {B}\n")
    assert pipindex.configured_index(env) == (B, f"{user} [global]")
    xdg = tmp_path / "xdg-home"
    env["XDG_CONFIG_HOME"] = str(xdg)
    moved = write(xdg / "pip/pip.conf", f"[global]\nindex-url = {C}\n")
    assert pipindex.configured_index(env) == (C, f"{moved} [global]")


def test_an_existing_pip_config_file_hides_the_users_and_devnull_hides_every_file(env, tmp_path):
    write(Path(env["HOME"]) / ".config/pip/pip.conf", f"[install]\nindex-url = {A}\n")
    given = write(tmp_path / "given.conf", f"[global]\nindex-url = {B}\n")
    env["PIP_CONFIG_FILE"] = str(given)
    assert pipindex.configured_index(env) == (B, f"{given} [global]")
    env["PIP_CONFIG_FILE"] = os.devnull
    assert pipindex.configured_index(env) == (pips_default(), "pip's default index")


def test_uv_toml_names_the_index_when_pip_names_none(env, tmp_path):
    env.pop("UV_NO_CONFIG")
    env["PIP_CONFIG_FILE"] = os.devnull
    user = write(Path(env["HOME"]) / ".config/uv/uv.toml",
                 f'index-url = "{A}"\n[[index]]\nname = "other"\nurl = "{C}"\n'
                 f'[[index]]\nname = "mine"\nurl = "{B}"\ndefault = true\n')
    assert pipindex.configured_index(env) == (B, f"{user} [[index]] default")
    given = write(tmp_path / "uv.toml", f'[pip]\nindex-url = "{D}"\n')
    env["UV_CONFIG_FILE"] = str(given)
    assert pipindex.configured_index(env) == (D, f"{given} [pip] index-url")
    env["UV_NO_CONFIG"] = "1"
    assert pipindex.configured_index(env)[1] == "pip's default index"


def test_python_3_10_reads_uv_toml_with_tomli_and_without_a_reader_says_so(env, tmp_path, monkeypatch):
    """Python 3.10 has no tomllib: hidden here, with pip's own copy of tomli standing in for the
    tomli fdlenv requires there, uv.toml still names the index; with neither, one line says why
    (a uv.toml is never skipped in silence)."""
    from pip._vendor import tomli

    env.pop("UV_NO_CONFIG")
    env["PIP_CONFIG_FILE"] = os.devnull
    given = write(tmp_path / "uv.toml", f'[pip]\nindex-url = "{D}"\n')
    env["UV_CONFIG_FILE"] = str(given)
    monkeypatch.setitem(sys.modules, "tomllib", None)
    monkeypatch.setitem(sys.modules, "tomli", tomli)
    assert pipindex.configured_index(env) == (D, f"{given} [pip] index-url")
    monkeypatch.setitem(sys.modules, "tomli", None)
    with pytest.raises(Fail) as e:
        pipindex.configured_index(env)
    assert str(given) in str(e.value) and "tomli>=1.1" in str(e.value) and "\n" not in str(e.value)


def test_a_pip_config_fdlenv_cannot_parse_fails_with_one_line_naming_the_file(env, tmp_path):
    bad = write(tmp_path / "bad.conf", "index-url = no section header\n")
    env["PIP_CONFIG_FILE"] = str(bad)
    with pytest.raises(Fail) as e:
        pipindex.configured_index(env)
    assert str(bad) in str(e.value) and "--mirror pypi=URL" in str(e.value)
    assert "\n" not in str(e.value) and not e.value.transient


def test_without_pip_the_default_comes_from_the_pip_wheel_python_bundles(tmp_path):
    """A venv with no pip in it: the child that reads pip's default imports the bundled wheel."""
    if not pipindex.bundled_pip_wheels():
        pytest.skip("this Python bundles no pip wheel for ensurepip (its distribution moved it out)")
    py = plain_venv(tmp_path / "venv")
    assert subprocess.run([py, "-c", "import pip"], capture_output=True).returncode != 0
    probe = ("import os, sys; from fdlenv.index import pipindex; "
             "print(*pipindex.configured_index({'HOME': sys.argv[1], 'PIP_CONFIG_FILE': os.devnull, "
             "'UV_NO_CONFIG': '1'}), sep='\\n')")
    out = subprocess.run([py, "-c", probe, str(tmp_path / "home")], capture_output=True, text=True,
                         env=clean_environ(PYTHONPATH=str(ROOT)))
    assert out.returncode == 0, out.stderr
    assert out.stdout.splitlines() == [pips_default(), "pip's default index"]


def test_with_no_index_anywhere_the_walkthrough_names_the_mirror_flag_and_pip_index_url(tmp_path):
    """No variable, no config file, no pip, and a Python whose distribution took ensurepip's
    wheels out (simulated in the child): one `error:` line, exit 2, nothing realised."""
    py = plain_venv(tmp_path / "venv")
    stripped = ("import sys, sysconfig; sys.modules['ensurepip'] = None; get = sysconfig.get_config_var; "
                "sysconfig.get_config_var = lambda n: None if n == 'WHEEL_PKG_DIR' else get(n); "
                "from fdlenv.front.cli import main; sys.exit(main())")
    env = clean_environ(PYTHONPATH=str(ROOT), PIP_CONFIG_FILE=os.devnull, UV_NO_CONFIG="1")
    home = tmp_path / "home"
    res = subprocess.run([py, "-c", stripped, "walkthrough", "--home", str(home), "--lock",
                          str(ROOT / "conda-lock.yml")], capture_output=True, text=True, env=env)
    assert res.returncode == 2, res.stderr
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "--mirror pypi=URL" in errors[0] and "PIP_INDEX_URL" in errors[0]
    assert not (home / "envs").is_dir() or not any((home / "envs").iterdir())
