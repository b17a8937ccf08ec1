"""Damage found before the agent starts, and healed (issue 45, point 1).

End to end, as an operator meets it: an env realised from the suite's loopback index shaped
like PyTorch's (`helpers_pytorch_index`), a file of it damaged by hand (truncated, deleted,
its pointer or `.arch` removed), then `fdlenv join` with the stand-in agent
(`join_standin.py`, which records the environment it started with), `prepare`, `run` and
`env verify`, each in a child process. The index's request log says when the heal fetched
again and when it needed no index.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from sshd import free_port

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
LIB = "lib/python3.12/site-packages/torch/lib/libtorch.so"
ARCH = "lib/python3.12/site-packages/torch/.arch"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


def fdlenv(tmp_path: Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True,
                          cwd=tmp_path / "work", timeout=300,
                          env={**os.environ, "FLODL_HOME": str(tmp_path / "home"), "FLODL_TESTING_GPU_JSON": "[]",
                               **(env or {})})


@pytest.fixture
def realised(tmp_path, index):
    """A home with cpu realised from the loopback index; (tmp_path, the env dir)."""
    (tmp_path / "work").mkdir()
    r = fdlenv(tmp_path, "prepare", "--libtorch", "cpu", "--mirror", f"pytorch={index.url}")
    assert r.returncode == 0, r.stderr
    env = next((tmp_path / "home" / "envs").glob("cpu-*"))
    assert (env / LIB).read_text() == "libtorch cpu"
    return tmp_path, env


def offline() -> str:
    return f"pytorch=http://127.0.0.1:{free_port()}/whl"   # nothing listens there


GPU = json.dumps([{"vendor": "nvidia", "arch": "8.0", "vram_mb": 40000, "name": "A100"}])   # join's gate


# The agent: as it starts, it reads the library through its LIBTORCH_PATH and writes what it read
# (size and bytes) beside the stand-in's own record of its environment.
READS = ("import os, runpy, sys; out = sys.argv[1]; os.makedirs(out, exist_ok=True); "
         "lib = open(os.environ['LIBTORCH_PATH'] + '/lib/libtorch.so', 'rb').read(); "
         "open(out + '/library', 'w').write(f'{len(lib)} {lib.decode()}'); "
         "sys.argv = sys.argv[2:]; runpy.run_path(sys.argv[0], run_name='__main__')")


def join(tmp_path: Path, mirror: str) -> subprocess.CompletedProcess:
    return fdlenv(tmp_path, "join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe", "--libtorch", "cpu",
                  "--mirror", mirror, "--", "-c", READS, str(tmp_path / "out"), STANDIN, str(tmp_path / "out"), "0",
                  env={"FLODL_TESTING_GPU_JSON": GPU})


def test_a_truncated_library_is_healed_before_the_agent_starts(realised, index):
    tmp_path, env = realised
    cached_before = os.stat(env / LIB).st_ino
    with open(env / LIB, "r+") as f:   # in place: the package cache's entry shares the inode
        f.truncate(0)
    asked = len(index.requests)
    r = join(tmp_path, f"pytorch={index.url}")
    assert r.returncode == 0, r.stderr
    assert f"{env.name} is damaged ({LIB}: 0 bytes, 12 when realised); fetching torch 2.10.0+cpu again" in r.stderr
    assert (tmp_path / "out" / "library").read_text() == "12 libtorch cpu", "the agent started on the healed file"
    agent = json.loads((tmp_path / "out" / "agent0.json").read_text())["env"]
    assert agent["LIBTORCH_PATH"].startswith(str(env))
    assert any(p.endswith(".whl") for p in index.requests[asked:]), "the wheel was fetched again"
    assert os.stat(env / LIB).st_ino != cached_before, "a new cache entry, not the old one edited"
    assert "bug" not in r.stderr
    again = fdlenv(tmp_path, "env", "verify")
    assert again.returncode == 0, again.stdout + again.stderr


def test_a_damaged_env_with_the_index_away_is_exit_1_naming_the_file_and_the_agent_does_not_start(realised):
    tmp_path, env = realised
    with open(env / LIB, "r+") as f:
        f.truncate(3)
    r = join(tmp_path, offline())
    assert r.returncode == 1, r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert line.startswith("error: ") and f"the env {env.name}" in line and f"{LIB}: 3 bytes, 12 when realised" in line
    assert "torch 2.10.0+cpu from its index again" in line and "bug" not in r.stderr
    assert not (tmp_path / "out").exists(), "the agent started on a damaged env"
    prep = fdlenv(tmp_path, "prepare", "--libtorch", "cpu", "--mirror", offline())
    assert prep.returncode == 1 and f"{LIB}: " in prep.stderr


def test_a_deleted_file_is_relinked_from_the_intact_cache_with_no_index_request(realised, index):
    tmp_path, env = realised
    (env / LIB).unlink()    # the env's link only: the cache entry still holds the file
    r = fdlenv(tmp_path, "run", "--libtorch", "cpu", "--mirror", offline(), "--",
               sys.executable, "-c", "import os,sys; print(open(os.environ['LIBTORCH_PATH'] + '/lib/libtorch.so').read())",
               env={"FDLENV_NO_HOTPATH": "1"})
    assert r.returncode == 0, r.stderr
    assert r.stdout.strip() == "libtorch cpu" and "relinking it from the package cache" in r.stderr


def test_env_verify_reports_the_damage_with_exit_2_and_repair_heals_pointer_arch_and_links_with_no_index(realised, index):
    tmp_path, env = realised
    home = tmp_path / "home"
    (env / ARCH).unlink()
    (home / "libtorch" / "precompiled" / "cpu").unlink()
    (env / LIB).unlink()
    r = fdlenv(tmp_path, "env", "verify")
    assert r.returncode == 2, r.stdout + r.stderr
    assert f"{ARCH}: missing" in r.stdout and f"torch: {LIB}: missing" in r.stdout
    assert "precompiled/cpu: missing (a root keeps" in r.stdout
    asked = len(index.requests)
    fixed = fdlenv(tmp_path, "env", "verify", "--repair", "--mirror", offline())
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert (env / ARCH).read_text().startswith("cuda=none\n") and (env / LIB).read_text() == "libtorch cpu"
    assert os.readlink(home / "libtorch" / "precompiled" / "cpu").endswith(f"envs/{env.name}/lib/python3.12/site-packages/torch")
    assert len(index.requests) == asked
    assert fdlenv(tmp_path, "env", "verify").returncode == 0


def test_a_deleted_pointer_is_found_again_from_the_root_that_keeps_its_env(realised):
    tmp_path, env = realised
    pointer = tmp_path / "home" / "libtorch" / "precompiled" / "cpu"
    pointer.unlink()
    r = fdlenv(tmp_path, "env", "path", "cpu")
    assert r.returncode == 0 and r.stdout.strip() == str(env), r.stderr
    assert pointer.is_symlink()


def test_an_env_realised_before_the_file_table_is_checked_by_its_records_sizes_and_recorded_again(realised, index):
    tmp_path, env = realised
    (env / ".fdlenv" / "files").unlink()   # as an older fdlenv left it
    with open(env / LIB, "r+") as f:
        f.truncate(1)
    r = fdlenv(tmp_path, "env", "verify")
    assert r.returncode == 2 and f"{LIB}: size differs" in r.stdout, r.stdout
    healed = fdlenv(tmp_path, "prepare", "--libtorch", "cpu", "--mirror", f"pytorch={index.url}")
    assert healed.returncode == 0, healed.stderr
    assert (env / LIB).read_text() == "libtorch cpu" and (env / ".fdlenv" / "files").is_file()
    (env / ".fdlenv" / "files").unlink()
    assert fdlenv(tmp_path, "env", "verify").returncode == 0
    assert (env / ".fdlenv" / "files").is_file(), "recorded again once its sizes matched"
