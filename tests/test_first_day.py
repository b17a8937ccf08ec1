"""What an operator's first day meets (issue 50): each mistake gets the hint that fixes it.

Every case runs `fdlenv` as a user would (the CLI in-process, `run` of test_home_permission)
and reads the one `error:` line or note it prints.
"""

from __future__ import annotations

import os

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
