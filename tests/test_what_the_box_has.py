"""What the box has, everywhere (docs/ROUTING.md): a GPU-less box uses a realised GPU build
under `auto`, and `join`, `prepare` and `run` use one rule for which env a variant names when
the lock seen at boot names another build than the realised one, with the index up and down.

End to end, as a user runs it: fdlenv in child processes (`helpers_store.fdlenv`), envs
realised from the suite's loopback index shaped like PyTorch's (`helpers_pytorch_index`; a
second one serves another build of cu126's torch, so its lock names another env key), the box
spoofed through FLODL_TESTING_GPU_JSON. "Down" is an index nothing listens on; a test that says
"no index request" reads the servers' logs.
"""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from helpers_cli import fdlenv
from sshd import free_port

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
NO_GPU = "[]"
GTX1080 = json.dumps([{"vendor": "nvidia", "arch": "6.1", "vram_mb": 8192, "name": "GTX 1080"}])
CPU_LINE = "auto: cu126 (realised, runs on the CPU; routing would pick cpu: no usable GPU)"
BAKED, REBUILT = "libtorch cu126", "libtorch cu126 rebuilt"
SHOW = ("sh", "-c", 'cat "$LIBTORCH_PATH/lib/libtorch.so"')


@pytest.fixture(scope="module")
def indexes(tmp_path_factory):
    """(the index the image was baked from, one serving another build of cu126's torch)."""
    with serve(tmp_path_factory.mktemp("pt-a")) as a, \
            serve(tmp_path_factory.mktemp("pt-b"), torch_files={"cu126": {"lib/libtorch.so": REBUILT}}) as b:
        yield a, b


def mirrors(index=None) -> list[str]:
    """`--mirror`s to `index`, or (None) to an index nothing listens on: the index is down."""
    if index is None:
        dead = f"http://127.0.0.1:{free_port()}"
        return ["--mirror", f"pytorch={dead}/whl", "--mirror", f"pypi={dead}/simple"]
    return ["--mirror", f"pytorch={index.url}", "--mirror", f"pypi={index.simple}"]


@pytest.fixture(scope="module")
def baked(tmp_path_factory, indexes):
    """A home with cu126 realised from index A (its on-demand lock in the home, as README line 1
    leaves one), and a lock of cu126 from index B: the same release, another build."""
    a, b = indexes
    tmp = tmp_path_factory.mktemp("baked")
    home = tmp / "home"
    res = fdlenv("env", "realize", "--libtorch", "cu126", *mirrors(a), "--home", str(home), "--json",
                 env={"FLODL_TESTING_GPU_JSON": NO_GPU})
    assert res.returncode == 0, res.stderr
    other = tmp / "other"
    res = fdlenv("env", "realize", "--libtorch", "cu126", *mirrors(b), "--home", str(other),
                 env={"FLODL_TESTING_GPU_JSON": NO_GPU})
    assert res.returncode == 0, res.stderr
    lock = tmp / "boot-lock" / "conda-lock.yml"
    lock.parent.mkdir()
    shutil.copyfile(other / "lockfiles" / "cu126.conda-lock.yml", lock)
    return home, lock


@pytest.fixture
def box(tmp_path, baked):
    """A copy of the baked home, and a working directory with no project in it."""
    home, lock = baked
    mine = tmp_path / "home"
    shutil.copytree(home, mine, symlinks=True)
    (tmp_path / "work").mkdir()
    return tmp_path, mine, lock


def cli(tmp: Path, home: Path, gpus: str, *args: str):
    return fdlenv(*args, env={"FLODL_TESTING_GPU_JSON": gpus, "FLODL_HOME": str(home)}, cwd=tmp / "work",
                  timeout=300)


# ------------------------------------------------------------------ a GPU-less box, auto

def test_a_gpu_less_box_with_only_cu126_realised_uses_it_under_auto_with_the_index_down(box, indexes):
    tmp, home, _lock = box
    before = [len(i.requests) for i in indexes]
    got = cli(tmp, home, NO_GPU, "env", "realize", "--libtorch", "auto", *mirrors(None))
    assert got.returncode == 0, got.stderr
    assert CPU_LINE in got.stderr and got.stdout.startswith("cu126: ")
    hook = cli(tmp, home, NO_GPU, "shell-hook", "--libtorch", "auto", *mirrors(None))
    assert hook.returncode == 0 and "error" not in hook.stderr and "LIBTORCH_PATH" in hook.stdout, hook.stderr
    run = cli(tmp, home, NO_GPU, "run", "--libtorch", "auto", *mirrors(None), *SHOW)
    assert (run.returncode, run.stdout) == (0, BAKED), run.stderr
    prep = cli(tmp, home, NO_GPU, "prepare", "--libtorch", "auto", "--frozen", "--json")
    assert prep.returncode == 0, prep.stderr
    out = json.loads(prep.stdout)
    assert out["variant"] == "cu126" and CPU_LINE in out["notes"]
    assert out["auto"]["routing"]["variant"] == "cpu" and out["auto"]["realised"] == ["cu126"]
    detect = cli(tmp, home, NO_GPU, "detect")
    assert CPU_LINE in detect.stdout.splitlines(), detect.stderr
    assert not (home / "lockfiles" / "cpu.conda-lock.yml").exists()
    assert [len(i.requests) for i in indexes] == before


def test_a_gpu_less_box_whose_driver_cannot_run_the_realised_build_says_so_and_asks_for_cpu(box):
    tmp, home, _lock = box
    gpus = json.dumps({"devices": [], "driver_cuda": "11.8"})
    detect = cli(tmp, home, gpus, "detect", "--json")
    auto = json.loads(detect.stdout)["auto"]
    assert auto["variant"] == "cpu" and auto["passed_over"] == [
        {"variant": "cu126", "why": "the NVIDIA driver supports CUDA 11.8 (< 12.0)"}]
    got = cli(tmp, home, gpus, "env", "realize", "--libtorch", "auto", *mirrors(None))
    assert got.returncode == 1, got.stderr
    assert "auto: cpu: No usable GPU" in got.stderr
    assert "Realised, passed over: cu126: the NVIDIA driver supports CUDA 11.8 (< 12.0)." in got.stderr


def test_auto_follows_a_cpu_env_realised_or_removed_beside_the_gpu_build(box, indexes):
    """`auto` is never answered from the hot memo, so each call sees the envs as they are now."""
    tmp, home, _lock = box
    hook = ("shell-hook", "--libtorch", "auto", "--json")

    def variant() -> str:
        res = cli(tmp, home, NO_GPU, *hook, *mirrors(None))
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)["variant"]

    assert [variant(), variant()] == ["cu126", "cu126"]   # a memo, were there one, is written by now
    got = cli(tmp, home, NO_GPU, "env", "realize", "--libtorch", "cpu", *mirrors(indexes[0]))
    assert got.returncode == 0, got.stderr
    assert variant() == "cpu"                               # routing's own choice, realised: it wins
    gone = cli(tmp, home, NO_GPU, "env", "remove", "cpu")
    assert gone.returncode == 0, gone.stderr
    assert variant() == "cu126"


# ------------------------------------------------------------------ the lock seen at boot

def _join(tmp: Path, home: Path, *args: str):
    out = tmp / f"agent-{len(list(tmp.glob('agent-*')))}"
    res = cli(tmp, home, GTX1080, "join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe", *args,
              "--", STANDIN, str(out), "0")
    agent = out / "agent0.json"
    lib = None
    if agent.exists():
        lib = (Path(json.loads(agent.read_text())["env"]["LIBTORCH_PATH"]) / "lib/libtorch.so").read_text()
    return res, lib


def _three(tmp: Path, home: Path, *args: str):
    """(exit code, the libtorch.so it used or None, stderr) of run, prepare and join."""
    run = cli(tmp, home, GTX1080, "run", *args, *SHOW)
    prep = cli(tmp, home, GTX1080, "prepare", *args, "--json")
    lib = None
    if prep.returncode == 0:
        lib = (Path(json.loads(prep.stdout)["env"]["libtorch_root"]) / "lib/libtorch.so").read_text()
    join, joined = _join(tmp, home, *args)
    return [(run.returncode, run.stdout if run.returncode == 0 else None, run.stderr),
            (prep.returncode, lib, prep.stderr), (join.returncode, joined, join.stderr)]


@pytest.mark.parametrize("up", [True, False], ids=["index up", "index down"])
def test_a_far_lock_naming_another_build_never_moves_run_prepare_or_join_off_the_realised_env(box, indexes, up):
    """The home's lock (like the one fdlenv ships) is a default: the realised env wins, online and
    offline, with no index request, and a note names the build the lock holds."""
    tmp, home, lock = box
    shutil.copyfile(lock, home / "lockfiles" / "cu126.conda-lock.yml")
    before = [len(i.requests) for i in indexes]
    seen = _three(tmp, home, "--libtorch", "cu126", *mirrors(indexes[1] if up else None))
    assert [(code, lib) for code, lib, _ in seen] == [(0, BAKED)] * 3, [e for *_, e in seen]
    for _, _, err in seen[1:]:
        assert "names another build (cu126-" in err and "`fdlenv env realize cu126` moves" in err
    assert [len(i.requests) for i in indexes] == before


def test_the_projects_lock_naming_another_build_decides_for_run_prepare_and_join_alike(box, indexes):
    """A lock the project gives (`--lock`, beside fdl.yml, in the source tree) pins its build:
    with the index down all three exit 1 (transient), say the realised env was not used in its
    place, and no agent starts; once the index is up, all three realise and use the lock's build."""
    tmp, home, lock = box
    seen = _three(tmp, home, "--libtorch", "cu126", "--lock", str(lock), *mirrors(None))
    assert [(code, lib) for code, lib, _ in seen] == [(1, None)] * 3, [e for *_, e in seen]
    for _, _, err in seen:
        assert "(the project's lock) names a build not realised here; the realised cu126-" in err, err
        assert err.count("error:") == 1
    seen = _three(tmp, home, "--libtorch", "cu126", "--lock", str(lock), *mirrors(indexes[1]))
    assert [(code, lib) for code, lib, _ in seen] == [(0, REBUILT)] * 3, [e for *_, e in seen]
