"""A home that cannot be written (a baked image, a read-only mount) re-dials.

The env is realised into a writable home, then every command that changes nothing runs on
it mounted read-only for real (as root: `unshare -m` and a read-only bind mount over the
home, so only the child sees it read-only): `run`, `shell-hook`, `env realize` with and
without `--lock` (a project's conda-lock.yml beside its fdl.yml), `prepare` and `join`, each
through the memo's replay and through the slow path. Each exits 0 and the home is left byte
for byte as it was; `run`'s command holds a lease `env gc` sees, taken in the runtime
directory since the home cannot hold it.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_store import make_world, realise_json

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
GPU = json.dumps([{"vendor": "nvidia", "arch": "sm_90", "vram_mb": 80000, "name": "H100"}])

pytestmark = [pytest.mark.slow, pytest.mark.skipif(os.geteuid() != 0 or shutil.which("unshare") is None,
                                reason="needs root and unshare: the home is mounted read-only in a namespace")]


def read_only(home: Path, argv: list[str], cwd: Path, env: dict) -> subprocess.CompletedProcess:
    """`fdlenv ARGV` from `cwd` with `home` mounted read-only for it alone."""
    script = 'mount --bind "$0" "$0" && mount -o remount,bind,ro "$0" && exec "$@"'
    return subprocess.run(["unshare", "-m", "sh", "-c", script, str(home), sys.executable, "-m", "fdlenv", *argv],
                          capture_output=True, text=True, cwd=cwd, env={**os.environ, **env})


def snapshot(root: Path) -> dict[str, tuple]:
    out = {}
    for dirpath, dirs, files in os.walk(root):
        for name in dirs + files:
            p = os.path.join(dirpath, name)
            st = os.lstat(p)
            out[os.path.relpath(p, root)] = (st.st_mode, st.st_size, st.st_mtime_ns)
    return out


@pytest.fixture
def baked(tmp_path):
    """A home as an image bakes it: the env realised from the lock and from a project's copy."""
    world = make_world(tmp_path / "w")
    env = realise_json(world)
    project = tmp_path / "project"
    project.mkdir()
    shutil.copy(world.lock, project / "conda-lock.yml")
    (project / "fdl.yml").write_text(f"fdlenv:\n  home: {world.home.root}\n")
    subprocess.run([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "cpu"], cwd=project, check=True,
                   capture_output=True)
    return world, Path(env["path"]), project


@pytest.mark.parametrize("hot", ["slow path", "replay"])
def test_every_command_that_changes_nothing_exits_0_on_a_read_only_home(baked, tmp_path, hot):
    world, env_path, project = baked
    home, lock = world.home.root, str(world.lock)
    store = ["--libtorch", "cpu", "--lock", lock, "--home", str(home)]
    env = {"TMPDIR": str(tmp_path / "rt"), "FLODL_TESTING_GPU_JSON": GPU,
           **({"FDLENV_NO_HOTPATH": "1"} if hot == "slow path" else {})}
    (tmp_path / "rt").mkdir()
    check = ("import sys; from fdlenv.store.leases import in_use; "
             f"sys.exit(0 if in_use({str(env_path)!r}) else 9)")
    commands = {
        "run": ["run", *store, "--", sys.executable, "-c", check],
        "shell-hook": ["shell-hook", *store],
        "env realize --lock": ["env", "realize", *store],
        "env realize (project lock)": ["env", "realize", "--libtorch", "cpu"],
        "run (project lock)": ["run", "--libtorch", "cpu", "--", sys.executable, "-c", check],
        "prepare": ["prepare", *store],
        "join": ["join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe", *store, "--",
                 STANDIN, str(tmp_path / "agent"), "0"],
    }
    if hot == "replay":     # each run once on the writable home: its memo is there to replay
        for argv in commands.values():
            assert subprocess.run([sys.executable, "-m", "fdlenv", *argv], cwd=project, capture_output=True,
                                  env={**os.environ, **env}).returncode == 0
    before = snapshot(home)
    for name, argv in commands.items():
        res = read_only(home, argv, project, env)
        assert res.returncode == 0, (name, res.stderr)
        assert "error:" not in res.stderr and "Traceback" not in res.stderr, (name, res.stderr)
    assert snapshot(home) == before
    assert json.loads((tmp_path / "agent" / "agent0.json").read_text())["env"]["LIBTORCH_PATH"].startswith(str(env_path))
    spare = list((tmp_path / "rt").glob("fdlenv-leases-*/*/use-*.lock"))
    assert spare if hot == "slow path" else not spare     # the lease the home could not hold, taken aside
