"""The walk-through: wheel caching, and the real end-to-end run (slow)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest
from conda_lock.lockfile import parse_conda_lock_file

from fdlenv import cli, walkthrough
from fdlenv.errors import Fail
from fdlenv.home import Home


def test_cached_wheel_is_reused_without_pip(tmp_path, monkeypatch):
    cached = tmp_path / "torch-9.9.9+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
    cached.write_bytes(b"cached")
    monkeypatch.setattr(subprocess, "run", lambda *a, **k: pytest.fail("pip must not run"))
    assert walkthrough.obtain_wheel(tmp_path) == cached


def test_pip_failure_is_a_clear_transient_error(tmp_path, monkeypatch):
    calls = []

    def fake_run(cmd, **kwargs):
        calls.append(cmd)
        return subprocess.CompletedProcess(cmd, 1, "", "ERROR: No matching distribution found for torch\n")

    monkeypatch.setattr(subprocess, "run", fake_run)
    monkeypatch.setenv(walkthrough.TORCH_INDEX_ENV, "file:///nowhere/simple")
    with pytest.raises(Fail) as e:
        walkthrough.obtain_wheel(tmp_path / "wheels")
    assert e.value.transient and "No matching distribution" in str(e.value)
    assert calls[0][-1] == f"torch=={walkthrough.TORCH_WHEEL_VERSION}"
    assert calls[1][-3:] == ["torch", "--index-url", "file:///nowhere/simple"]
    assert not list((tmp_path / "wheels").iterdir())


@pytest.mark.slow
def test_walkthrough_end_to_end(tmp_path, capsys):
    home = Home(tmp_path / "home")
    try:
        wheel = walkthrough.obtain_wheel(home.root / "walkthrough" / "wheels")
    except Fail as e:
        pytest.skip(f"pip cannot obtain a torch wheel here: {e}")
    mtime = wheel.stat().st_mtime_ns

    # As the README runs it: its own process (the store may fork its worker there, after
    # earlier steps already started rattler's runtime in that process).
    res = subprocess.run([sys.executable, "-m", "fdlenv", "walkthrough", "--home", str(home.root), "--json"],
                         capture_output=True, text=True, timeout=900)
    assert res.returncode == 0, res.stderr
    first = json.loads(res.stdout)

    # The lock is conda-lock's, with the packed archive's real hashes.
    (entry,) = parse_conda_lock_file(home.root / "walkthrough" / "conda-lock.yml").package
    assert entry.name == "libtorch-cpu" and entry.url.endswith("/" + first["package"].rsplit("/", 1)[1])
    # The binary ran against the packed libtorch and computed the right thing.
    version = entry.version
    a, b = [[1, 2, 3], [4, 5, 6]], [[1, 0], [0, 1], [1, 1]]
    total = sum(sum(a[i][k] * b[k][j] for k in range(3)) for i in range(2) for j in range(2))
    lines = first["output"].splitlines()
    assert lines[0] == f"libtorch {version}"
    assert lines[-1] == f"sum = {total}"
    assert [s["title"] for s in first["steps"]][0] == "obtain a torch CPU wheel"
    assert len(first["steps"]) == 6 and all(s["seconds"] >= 0 for s in first["steps"])

    # A second run reuses the wheel, the package, the env and the build.
    assert cli.main(["walkthrough", "--home", str(home.root), "--json"]) == 0
    second = json.loads(capsys.readouterr().out)
    assert wheel.stat().st_mtime_ns == mtime
    assert "already" in second["steps"][1]["detail"] and "already realised" in second["steps"][3]["detail"]
    assert "reused" in second["steps"][4]["detail"]
    assert second["output"] == first["output"]
    assert sum(s["seconds"] for s in second["steps"]) < sum(s["seconds"] for s in first["steps"])
