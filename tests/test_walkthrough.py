"""The walk-through: the shipped lock's flow on a local index (fast), and the real wheels (opt-in).

The fast test runs every step against a small index of wheels shaped like
PyTorch's, with a stand-in compiler (CXX) that writes a program printing what
the env gave it; the real test downloads PyTorch's 3.9 GB cu128 wheels and
compiles examples/agent with g++, so it runs only with FDLENV_REAL_WHEELS=1
(README line 1 runs the same path on every fresh machine).
"""

from __future__ import annotations

import json
import os
import stat
import subprocess
import sys

import pytest
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.home import Home
from fdlenv.lock import lock_envs

FAKE_CXX = """#!/bin/sh
# a stand-in compiler: the "binary" it writes prints what the build saw
out=""; while [ $# -gt 0 ]; do [ "$1" = "-o" ] && out="$2"; shift; done
printf '#!/bin/sh\\necho "libtorch $(cat %s/build-version)"\\necho "sum = 30"\\n' "$LIBTORCH_PATH" > "$out"
chmod +x "$out"
"""


def test_walkthrough_runs_every_step_and_a_second_run_reuses_them(tmp_path):
    url = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    lock = tmp_path / "conda-lock.yml"
    lock_envs(envs, lock, mirrors={"pypi": url}, home=Home(tmp_path / "lockhome"))
    cxx = tmp_path / "fake-cxx"
    cxx.write_text(FAKE_CXX)
    cxx.chmod(cxx.stat().st_mode | stat.S_IEXEC)
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
