"""The walk-through: the shipped lock's flow on a local index (fast), from a regular install
without pip (slow), and the real wheels (opt-in).

The fast test runs every step against a small index of wheels shaped like
PyTorch's, with a stand-in compiler (CXX) that writes a program printing what
the env gave it; the regular-install test does the same with fdlenv's own wheel
installed into a venv that has no pip and no `lock` extra, the index named only
by the user's pip.conf; the real test downloads PyTorch's 3.9 GB cu128 wheels and
compiles examples/agent with g++, so it runs only with FDLENV_REAL_WHEELS=1
(README line 1 runs the same path on every fresh machine).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_install import clean_environ, fdlenv_wheel, install_wheel, plain_venv
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

FAKE_CXX = """#!/bin/sh
# a stand-in compiler: the "binary" it writes prints what the build saw
out=""; while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
printf '#!/bin/sh\\necho "libtorch $(cat %s/build-version)"\\necho "sum = 30"\\n' "$LIBTORCH_PATH" > "$out"
chmod +x "$out"
"""


def local_lock(tmp_path: Path) -> tuple[str, Path, Path]:
    """(index URL, a cu128 lock of the small wheels on it, the stand-in compiler)."""
    url = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    lock = tmp_path / "conda-lock.yml"
    lock_envs(envs, lock, mirrors={"pypi": url}, home=Home(tmp_path / "lockhome"))
    cxx = tmp_path / "fake-cxx"
    cxx.write_text(FAKE_CXX)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
    return url, lock, cxx


def test_walkthrough_runs_every_step_and_a_second_run_reuses_them(tmp_path):
    url, lock, cxx = local_lock(tmp_path)
    cmd = [sys.executable, "-m", "fdlenv", "walkthrough", "--home", str(tmp_path / "home"), "--lock", str(lock),
           "--mirror", f"pypi={url}", "--json"]
    env = {**os.environ, "CXX": str(cxx)}
    first = subprocess.run(cmd, capture_output=True, text=True, env=env)
    assert first.returncode == 0, first.stderr
    one = json.loads(first.stdout)
    assert [s["title"] for s in one["steps"]] == [
        "find the lock shipped with fdlenv", "realise the locked cu128 env",
        "build examples/agent inside the env", "run it through `fdlenv run`"]
    assert one["output"].splitlines()[0] == "libtorch 2.10.0+cu128"
    assert one["libtorch_root"].endswith("site-packages/torch")
    second = json.loads(subprocess.run(cmd, capture_output=True, text=True, env=env, check=True).stdout)
    assert "already realised" in second["steps"][1]["detail"] and "reused" in second["steps"][2]["detail"]
    assert second["output"] == one["output"]


@pytest.mark.slow
def test_the_walkthrough_runs_from_a_regular_install_with_no_pip_and_no_lock_extra(tmp_path):
    """fdlenv's own wheel in a venv that has neither pip nor conda-lock, as `uv tool install
    fdlenv` leaves it: the index comes from the user's pip.conf (read without pip), the
    example from the wheel, and `fdlenv lock` names the extra it needs."""
    url, lock, cxx = local_lock(tmp_path)
    py = plain_venv(tmp_path / "venv")
    install_wheel(py, fdlenv_wheel(tmp_path / "dist"))
    user = tmp_path / "user"
    conf = user / ".config" / "pip" / "pip.conf"
    conf.parent.mkdir(parents=True)
    conf.write_text(f"[global]\nindex-url = {url}\n")
    env = clean_environ(HOME=str(user), CXX=str(cxx))
    cwd = tmp_path / "elsewhere"
    cwd.mkdir()
    assert subprocess.run([py, "-c", "import pip"], cwd=cwd, env=env, capture_output=True).returncode != 0
    probe = ("from fdlenv.app.walkthrough import example_dir; from fdlenv.lock.paths import shipped_lock; "
             "print(example_dir()); print(shipped_lock())")
    shipped = subprocess.run([py, "-c", probe], cwd=cwd, env=env, capture_output=True, text=True, check=True)
    for path in map(Path, shipped.stdout.split()):
        assert path.is_relative_to(tmp_path / "venv") and path.exists(), path
    fdlenv = py.parent / "fdlenv"
    res = subprocess.run([fdlenv, "walkthrough", "--home", str(tmp_path / "home"), "--lock", str(lock), "--json"],
                         cwd=cwd, env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    assert f"wheel index pypi: {url} (from {conf} [global])" in res.stderr
    out = json.loads(res.stdout)
    assert out["output"].splitlines() == ["libtorch 2.10.0+cu128", "sum = 30"]
    assert "already realised" not in out["steps"][1]["detail"]
    check = subprocess.run([fdlenv, "lock", "--check", "--out", str(lock), "--home", str(tmp_path / "home")],
                           cwd=cwd, env=env, capture_output=True, text=True)
    errors = [ln for ln in check.stderr.splitlines() if ln.startswith("error:")]
    assert check.returncode == 2 and len(errors) == 1 and "Traceback" not in check.stderr, check.stderr
    assert "conda-lock" in errors[0] and "pip install 'fdlenv[lock]'" in errors[0]


@pytest.mark.slow
@pytest.mark.optional   # README line 1 runs the same path on every fresh machine
@pytest.mark.skipif(os.environ.get("FDLENV_REAL_WHEELS") != "1",
                    reason="downloads PyTorch's 3.9 GB cu128 wheels; set FDLENV_REAL_WHEELS=1")
def test_walkthrough_on_the_real_cu128_wheels(tmp_path):
    home = tmp_path / "home"
    res = subprocess.run([sys.executable, "-m", "fdlenv", "walkthrough", "--home", str(home), "--json"],
                         capture_output=True, text=True, timeout=1800)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    lines = out["output"].splitlines()
    assert lines[0] == "libtorch 2.10.0" and lines[-1].startswith(("sum = 30", "cuda:"))
    ldd = subprocess.run(["ldd", out["binary"]], capture_output=True, text=True, check=True).stdout
    assert "not found" not in ldd and "libcudart.so.12" in ldd
