"""What an operator's first day meets (issue 50): each mistake gets the hint that fixes it.

Every case runs `fdlenv` as a user would (the CLI in-process, `run` of test_home_permission)
and reads the one `error:` line or note it prints.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

from helpers_user import unprivileged, world_dir
from test_home_permission import run


def _errors(err: str) -> list[str]:
    return [ln for ln in err.splitlines() if ln.startswith("error: ")]


def test_a_url_given_as_the_controller_names_the_scheme_and_keeps_its_secret(tmp_path):
    rc, _, err = run(["join", "http://op:s3cret@ctrl.example:1337/x?token=t0k"], tmp_path, {})
    (line,) = _errors(err)
    assert rc == 2 and "http://" in line and "not a URL" in line and "ctrl.example:1337" in line
    assert "IPv6" not in line and "s3cret" not in err and "t0k" not in err


def test_a_missing_controller_says_it_dials_the_default_and_how_to_name_one(tmp_path):
    rc, _, err = run(["join", "--bin", str(tmp_path / "nothing-here")], tmp_path, {})
    assert rc == 2      # the missing binary stops it before any dial
    note = next(ln for ln in err.splitlines() if "no controller named" in ln)
    assert "the default, 127.0.0.1:1337" in note
    assert "fdlenv join HOST[:PORT]" in note and "--ssh" in note and "join: {controller:" in note


@pytest.mark.parametrize("argv", [["env", "list"], ["env", "list", "--json"]])
def test_a_home_under_a_file_is_an_error_naming_the_home_not_an_empty_listing(tmp_path, argv):
    (tmp_path / "passwd").write_text("root:x:0:0\n")
    home = tmp_path / "passwd" / "x"
    rc, out, err = run(argv, tmp_path, {"FLODL_HOME": str(home)})
    (line,) = _errors(err)
    assert rc == 2 and "$FLODL_HOME" in line and str(home) in line and "is a file" in line
    assert "no environments" not in err and '"envs"' not in out


def test_a_home_this_user_may_not_read_is_an_error_naming_it():
    if os.geteuid() != 0:
        pytest.skip("needs root: the home is root's 0700 and the command runs as nobody")
    d = world_dir()
    home = d / "home"
    home.mkdir(mode=0o700)
    rc, out, err = unprivileged(run, ["env", "list"], d, {"FLODL_HOME": str(home)})
    (line,) = _errors(err)
    assert rc == 2 and str(home) in line and "cannot be read" in line and "no environments" not in err


@pytest.mark.parametrize("text,where", [
    ("join:\n\tcontroller: ctrl:1337\n", "line 2: a tab at column 1"),
    ("join:\n  controller: ctrl:1337\n  \tbin: ./train\n", "line 3: a tab at column 3"),
])
def test_a_tab_in_fdl_yml_is_named_as_a_tab_with_its_line_and_column(tmp_path, text, where):
    (tmp_path / "fdl.yml").write_text(text)
    rc, _, err = run(["join"], tmp_path, {})
    (line,) = _errors(err)
    assert rc == 2 and where in line and "spaces" in line and "cannot start any token" not in line


def test_a_tab_inside_quotes_is_a_value_not_a_mistake():
    from fdlenv.base import yamlfile
    assert yamlfile.loads("a: 'x\ty'\nb: \"\\t\"\n") == {"a": "x\ty", "b": "\t"}


def test_verify_full_past_a_second_shows_one_line_with_files_bytes_and_ends_with_the_count(tmp_path, monkeypatch):
    from helpers_store import make_world, realise_json

    from fdlenv.base import progress
    from fdlenv.store.maintain import verify

    w = make_world(tmp_path, nfiles=300)
    env = realise_json(w, "cpu")
    seen: list[tuple[int, int, int, int]] = []
    verify(Path(env["path"]), full=True, progress=lambda *a: seen.append(a))
    of_files, of_bytes = seen[0][2], seen[0][3]
    assert of_files >= 300 and len(seen) == of_files + 1            # the totals, then one call per file
    assert sum(s[1] for s in seen) == of_bytes
    monkeypatch.setattr(progress.Tally, "SHOW_AFTER", 0.0)           # every job here is shorter than a second
    rc, out, err = run(["env", "verify", "--full", "--home", str(w.home.root)], tmp_path, {})
    assert rc == 0 and out.startswith("ok "), err
    name = Path(env["path"]).name
    assert f"fdlenv: verifying {name} ..." in err.splitlines()
    assert f"fdlenv: verifying {name}: {of_files} files, {of_bytes / 1e6:.1f} MB in " in err
    assert len(err.splitlines()) == 2, err                           # not a line per file
    monkeypatch.setattr(progress.Tally, "SHOW_AFTER", 3600.0)
    rc, out, err = run(["env", "verify", "--full", "--home", str(w.home.root)], tmp_path, {})
    assert rc == 0 and err == ""                                     # a short job says nothing


def test_no_shipped_config_has_an_empty_key():
    import yaml

    root = Path(__file__).resolve().parent.parent

    def empties(node, where=""):
        if isinstance(node, dict):
            for k, v in node.items():
                if v is None:
                    yield f"{where}{k}"
                yield from empties(v, f"{where}{k}.")
    for f in [root / "examples" / "fdl.yml", *sorted((root / "examples").rglob("*.yml"))]:
        assert list(empties(yaml.safe_load(f.read_text()))) == [], f


@pytest.mark.slow
def test_a_wheel_built_from_the_checkout_installs_with_uv_and_runs_from_a_fresh_home(tmp_path):
    """README's `pip wheel --no-deps -w dist .` then an install of that wheel, as a new user
    has it: uv (the test extra's) puts it into a venv with no pip, HOME empty; its `fdlenv`
    answers --help and detect. The dependencies come from this run's venv (no network)."""
    import shutil
    import subprocess

    from helpers_install import clean_environ, fdlenv_wheel, plain_venv

    uv = str(Path(sys.executable).with_name("uv")) if Path(sys.executable).with_name("uv").exists() else shutil.which("uv")
    if uv is None:
        pytest.skip("uv (the test extra) is not installed")
    wheel = fdlenv_wheel(tmp_path / "dist")
    py = plain_venv(tmp_path / "venv")
    home = tmp_path / "fresh-home"
    home.mkdir()
    env = clean_environ(HOME=str(home), UV_CACHE_DIR=str(tmp_path / "uv-cache"))
    res = subprocess.run([uv, "pip", "install", "--offline", "--no-deps", "--python", str(py), str(wheel)],
                         capture_output=True, text=True, env=env)
    assert res.returncode == 0, res.stderr
    exe = py.parent / "fdlenv"
    assert "usage: fdlenv" in subprocess.run([exe, "--help"], capture_output=True, text=True, env=env,
                                             cwd=home).stdout
    det = subprocess.run([exe, "detect", "--json"], capture_output=True, text=True, env=env, cwd=home)
    assert det.returncode in (0, 2) and '"schema": 1' in det.stdout, det.stderr
    assert not (home / ".flodl" / "envs").exists()   # nothing realised by asking
