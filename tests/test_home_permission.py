"""A home this user may not write names its way out: which home, from where, whose, what to do.

`Permission denied: …/locks/store.lock` alone leaves an operator guessing which home a
command used and why. Each origin of the home (`--home`, `$FLODL_HOME`, fdl.yml's
`fdlenv: home:`, the default `~/.flodl`) is tried for real: a home owned by root, the
command run as `nobody` (helpers_user), once as root first so that every module it
imports lazily is loaded (nobody cannot read this interpreter's files), then as nobody
with and without `--json`: exit 2, one `error:` line naming the home, the origin, the
owner and `--home DIR`/FLODL_HOME, and the same message as the JSON object's `error`.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
from pathlib import Path

import pytest

from fdlenv.front import cli
from fdlenv.base import errors, output
from helpers_user import unprivileged, world_dir

ORIGINS = ["--home", "$FLODL_HOME", "fdl.yml", "default"]


def run(argv: list[str], cwd: Path, environ: dict[str, str]) -> tuple[int, str, str]:
    """`fdlenv ARGV` in-process from `cwd` with `environ` added; (rc, stdout, stderr)."""
    out, err = io.StringIO(), io.StringIO()
    saved, here = dict(os.environ), os.getcwd()
    os.environ.update(environ)
    os.chdir(cwd)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(argv)
    finally:
        output.set_json(False)
        # As nobody in a checkout only root may enter (CI clones into a 0700 mktemp dir), going
        # back is refused; that child ends right after, so nothing needs the old directory.
        with contextlib.suppress(PermissionError):
            os.chdir(here)
        os.environ.clear()
        os.environ.update(saved)
    return rc, out.getvalue(), err.getvalue()


def case(origin: str) -> tuple[list[str], Path, dict[str, str], Path, str]:
    """(argv, cwd, environ, the home, how the error names its origin) for `origin`."""
    d = world_dir()
    argv, environ = ["env", "gc"], {}
    if origin == "--home":
        home, named = d / "flaghome", "from --home"
        argv += ["--home", str(home)]
    elif origin == "$FLODL_HOME":
        home, named = d / "envhome", "from $FLODL_HOME"
        environ["FLODL_HOME"] = str(home)
    elif origin == "fdl.yml":
        home, named = d / "ymlhome", f"from fdl.yml's `fdlenv: home:` ({d / 'fdl.yml'})"
        (d / "fdl.yml").write_text("fdlenv:\n  home: ymlhome\n")
        (d / "fdl.yml").chmod(0o644)
    else:
        home, named = d / ".flodl", "from the default home (~/.flodl)"
        environ["HOME"] = str(d)
    home.mkdir()
    home.chmod(0o755)          # root's: others may read it, not write it
    return argv, d, environ, home, named


@pytest.mark.parametrize("origin", ORIGINS)
def test_a_home_this_user_may_not_write_exits_2_naming_the_home_its_origin_owner_and_way_out(origin):
    if os.geteuid() != 0:
        pytest.skip("needs root: the home is root's and the command runs as nobody")
    argv, cwd, environ, home, named = case(origin)
    assert run(argv, cwd, environ)[0] == 0              # as root: it works, and imports what it needs
    for extra in ([], ["--json"]):
        rc, out, err = unprivileged(run, argv + extra, cwd, environ)
        errs = [ln for ln in err.splitlines() if ln.startswith("error: ")]
        assert rc == 2 and len(errs) == 1, err
        line = errs[0]
        assert line.startswith(f"error: Permission denied: {home}/"), line
        assert f"the home {home}, {named}, is owned by root and is not writable by this user (nobody)" in line
        assert "choose another with --home DIR or FLODL_HOME=DIR" in line
        if extra:
            got = json.loads(out)
            assert got["error"] == line[len("error: "):] and got["exit"] == 2
        else:
            assert out == ""
    assert errors._HOME is not None


def test_a_permission_failure_outside_the_home_is_told_without_the_home(tmp_path):
    errors.record_home(str(tmp_path / "home"), "--home")
    f = errors.os_failure(PermissionError(13, "Permission denied", str(tmp_path / "elsewhere" / "x")))
    assert f.exit_code == 2 and f.message == f"Permission denied: {tmp_path / 'elsewhere' / 'x'}"
    f = errors.os_failure(OSError(30, "Read-only file system", str(tmp_path / "home" / "envs")))
    assert "is on a read-only filesystem; choose another with --home DIR" in f.message
    assert f"the home {tmp_path / 'home'} (its nearest existing directory {tmp_path}), from --home" in f.message
