"""CMake in a CUDA env on a box with no host toolkit of its CUDA major: said once, and permanent.

No CUDA 12 nvcc ships as a wheel, so a cu126/cu128 env carries none, and
PyTorch's Torch config (TorchConfig -> Caffe2Config -> FindCUDA) stops a CMake
recipe there. A real cmake runs a recipe against a Torch config shaped like a
CUDA libtorch's (it calls CMake's own FindCUDA), with the host toolkit hidden
from cmake (CMAKE_IGNORE_PATH) and from fdlenv (CUDACXX naming an empty dir's
nvcc: fdlenv reads `$CUDACXX` alone when it is set, as CMake does). The note
itself is shown once per env by `env realize`, `run` and `shell-hook` (envs
realised from the suite's loopback index laid out like PyTorch's), and by
`detect` on any box.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from helpers_source import environ_for, fake_env, write_tree

from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.source import build, nvcc
from fdlenv.source.build import Recipe

# What a CUDA libtorch's config does on a box without nvcc (public/cuda.cmake, then Caffe2Config's check).
TORCH_CONFIG = """find_package(CUDA)
if(NOT CUDA_FOUND)
  message(WARNING "Caffe2: CUDA cannot be found.")
  message(FATAL_ERROR "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries. Please set the proper CUDA prefixes and / or install CUDA.")
endif()
set(Torch_FOUND TRUE)
"""
HIDE = ("/usr/local/bin;/usr/local/cuda/bin;/usr/local/cuda/bin64;/opt/cuda/bin;"
        + ";".join(f"{p}/bin" for p in map(str, Path("/usr/local").glob("cuda-*"))))
RECIPE = f'cmake -S . -B "$FDLENV_BUILD_DIR" "-DCMAKE_IGNORE_PATH={HIDE}"'
needs_cmake = pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")


def no_toolkit(tmp: Path) -> dict:
    """What hides every host nvcc from fdlenv: CUDACXX naming one that is not there."""
    (tmp / "empty").mkdir(exist_ok=True)
    return {"CUDACXX": str(tmp / "empty" / "nvcc")}


def fake_nvcc(tmp: Path, release: str) -> dict:
    nvcc = tmp / f"nvcc-{release}" / "bin" / "nvcc"
    nvcc.parent.mkdir(parents=True)
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.1'\n")
    nvcc.chmod(0o755)
    return {"CUDACXX": str(nvcc)}


def cmake_build(tmp_path, variant: str, **extra):
    home = Home(tmp_path / "home")
    env = fake_env(tmp_path, variant)
    write_tree(env.libtorch_root / "share/cmake/Torch", {"TorchConfig.cmake": TORCH_CONFIG})
    tree = write_tree(tmp_path / "tree", {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\n"
                                          "project(t CXX)\nfind_package(Torch REQUIRED)\n"})
    environ = environ_for(env, CMAKE_PREFIX_PATH=str(env.libtorch_root), CUDA_PATH=str(tmp_path / "empty"),
                          **{**no_toolkit(tmp_path), **extra})
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, Recipe(RECIPE, "", "build/app", False))
    return e.value


@needs_cmake
def test_a_cmake_recipe_whose_torch_config_finds_no_cuda_in_a_cu128_env_is_permanent_and_names_the_toolkit(tmp_path, capfd):
    failure = cmake_build(tmp_path, "cu128")
    assert not failure.transient
    msg = failure.message
    assert "Your installed Caffe2 version uses CUDA" in msg or "Could NOT find CUDA" in msg
    assert "host CUDA 12.x toolkit (none found)" in msg and "ship no nvcc" in msg
    assert "`CUDACXX=<toolkit>/bin/nvcc cmake -DCUDA_TOOLKIT_ROOT_DIR=<toolkit> ...`" in msg   # the flags that work
    assert "flodl-sys" in msg and "next dial" not in msg
    assert "I cannot find the CUDA" in capfd.readouterr().err   # the recipe's output still streams


@needs_cmake
def test_the_same_cmake_failure_in_a_cpu_env_stays_transient(tmp_path):
    failure = cmake_build(tmp_path, "cpu")
    assert failure.transient and "next dial" in failure.message


@needs_cmake
def test_a_host_nvcc_of_the_envs_cuda_major_that_cmake_missed_is_named_and_the_failure_stays_permanent(tmp_path):
    failure = cmake_build(tmp_path, "cu126", **fake_nvcc(tmp_path, "12.9"))
    assert not failure.transient
    assert "is CUDA 12.9" in failure.message and "-DCUDA_TOOLKIT_ROOT_DIR=<toolkit>" in failure.message


@pytest.mark.parametrize("output", [
    "CMake Error at TorchConfig.cmake:5 (message):\n  Your installed Caffe2 version uses CUDA but I cannot find the CUDA\n  libraries.",
    "-- Could NOT find CUDA (missing: CUDA_TOOLKIT_ROOT_DIR CUDA_NVCC_EXECUTABLE)",
    "CUDA_TOOLKIT_ROOT_DIR not found or specified",
    "CMake Error at /usr/share/cmake-3.25/Modules/FindCUDA.cmake:861 (message):\n  Specify CUDA_TOOLKIT_ROOT_DIR",
    "PyTorch: CUDA was explicitly requested (USE_CUDA=1) but cannot be found.",
    "CMake Error at cuda.cmake:12 (message):\n  Failed to find nvcc",
    "CUDA_NVCC_EXECUTABLE:FILEPATH=CUDA_NVCC_EXECUTABLE-NOTFOUND",
    "set to NOTFOUND.\nPlease set them ...:\nCUDA_NVCC_EXECUTABLE\n",
    "No CMAKE_CUDA_COMPILER could be found.",
])
def test_each_of_cmakes_words_for_a_missing_toolkit_is_recognised_with_the_envs_cuda_major(tmp_path, output):
    gap = nvcc.cmake_cuda_gap(output, "12.6", no_toolkit(tmp_path))
    assert gap is not None and "CUDA 12.x toolkit" in gap and "CUDA 12.6 env" in gap


def test_a_failure_cmake_did_not_blame_on_cuda_is_not_recognised(tmp_path):
    assert nvcc.cmake_cuda_gap("error: expected ';' before '}'\nCUDA_HOME=/x\nmake: *** [all] Error 2",
                                  "12.8", no_toolkit(tmp_path)) is None


@pytest.mark.parametrize("release, shown", [("13.0", True), ("12.4", False)])
def test_the_note_weighs_a_host_nvcc_by_the_envs_cuda_major(tmp_path, release, shown):
    note = nvcc.cmake_toolkit_note("12.8", fake_nvcc(tmp_path, release))
    assert (note is not None) == shown
    if shown:
        assert f"CUDA {release}" in note and "CUDA 12.x toolkit" in note


def test_the_host_toolkits_release_is_read_from_its_cuda_h_without_running_nvcc(tmp_path):
    env = fake_nvcc(tmp_path, "13.0")
    real = Path(env["CUDACXX"])
    ran = tmp_path / "ran"
    real.write_text(f"#!/bin/sh\ntouch {ran}\necho 'Cuda compilation tools, release 13.0, V13.0.1'\n")
    (real.parent.parent / "include").mkdir()
    (real.parent.parent / "include" / "cuda.h").write_text("/* cuda.h */\n#define CUDA_VERSION 12080\n")
    assert nvcc.host_nvcc(env) == (str(real), "12.8")
    assert not ran.exists()
    assert nvcc.cmake_toolkit_note("12.8", env) is None
    wrapper = tmp_path / "wrapper" / "nvcc"   # as an image's /usr/local/bin/nvcc wraps the real one
    wrapper.parent.mkdir()
    wrapper.write_text(f'#!/bin/sh\ntouch {ran}\nexec {real} "$@"\n')
    wrapper.chmod(0o755)
    assert nvcc.host_nvcc({"PATH": str(wrapper.parent)}) == (str(wrapper), "12.8")
    assert not ran.exists()


# ------------------------------------------------------------------ the note, once per env

@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


def cli(tmp, index, *args, env=None):
    mirrors = ["--mirror", f"pytorch={index.url}", "--mirror", f"pypi={index.simple}"]
    head, cmd = (list(args[:1]), list(args[1:])) if args[0] != "env" else (list(args[:2]), list(args[2:]))
    (tmp / "cwd").mkdir(exist_ok=True)
    return subprocess.run([sys.executable, "-m", "fdlenv", *head, *mirrors, *cmd], capture_output=True, text=True,
                          cwd=tmp / "cwd", env={**os.environ, **no_toolkit(tmp), **(env or {})})


NOTE = "PyPI's CUDA 12 wheels ship no nvcc"


@pytest.mark.slow
@pytest.mark.parametrize("first", [("env", "realize"), ("run",), ("shell-hook",)])
def test_a_cu126_env_says_once_that_cmake_needs_a_host_toolkit_on_a_box_without_one(tmp_path, index, first):
    home = ["--libtorch", "cu126", "--home", str(tmp_path / "h")]
    tail = ["true"] if first == ("run",) else []
    seen = [cli(tmp_path, index, *first, *home, *tail) for _ in range(2)]
    assert [r.returncode for r in seen] == [0, 0], seen[0].stderr
    assert NOTE in seen[0].stderr and "CUDA 12.x toolkit (none found)" in seen[0].stderr
    assert NOTE not in seen[1].stderr
    for other in (("env", "realize"), ("run",), ("shell-hook",)):   # said once per env, by any of them
        res = cli(tmp_path, index, *other, *home, *(["true"] if other == ("run",) else []))
        assert res.returncode == 0 and NOTE not in res.stderr, res.stderr


@pytest.mark.slow
def test_a_home_that_cannot_record_the_note_says_it_every_time_and_goes_on(tmp_path, index):
    (tmp_path / "h" / "cache").mkdir(parents=True)
    (tmp_path / "h" / "cache" / "notes").write_text("a file where the notes dir would be")
    home = ["--libtorch", "cu126", "--home", str(tmp_path / "h")]
    seen = [cli(tmp_path, index, "env", "realize", *home) for _ in range(2)]
    assert [r.returncode for r in seen] == [0, 0] and all(NOTE in r.stderr for r in seen)


@pytest.mark.slow
def test_no_note_for_a_cpu_env_nor_where_the_host_has_a_toolkit_of_the_envs_major(tmp_path, index):
    cpu = cli(tmp_path, index, "env", "realize", "--libtorch", "cpu", "--home", str(tmp_path / "h"))
    assert cpu.returncode == 0 and NOTE not in cpu.stderr
    cu = cli(tmp_path, index, "env", "realize", "--libtorch", "cu126", "--home", str(tmp_path / "h"),
             env=fake_nvcc(tmp_path, "12.8"))
    assert cu.returncode == 0 and NOTE not in cu.stderr


def detect(tmp_path, gpus: str, **env):
    return subprocess.run([sys.executable, "-m", "fdlenv", "detect"], capture_output=True, text=True,
                          env={**os.environ, "FLODL_TESTING_GPU_JSON": gpus, **env})


@pytest.mark.parametrize("gpus", ["[]", '[{"vendor": "amd", "arch": "gfx942", "vram_mb": 196608, "name": "MI300X"}]',
                                  '[{"vendor": "nvidia", "arch": "9.0", "vram_mb": 143771, "name": "H200"}]'])
def test_detect_reports_the_host_toolkit_and_the_cmake_note_on_any_box(tmp_path, gpus):
    res = detect(tmp_path, gpus, **no_toolkit(tmp_path))
    assert res.returncode == 0, res.stderr
    assert "host CUDA toolkit: none" in res.stdout and NOTE in res.stdout
    ok = detect(tmp_path, gpus, **fake_nvcc(tmp_path, "12.8"))
    assert f"host CUDA toolkit: {tmp_path}/nvcc-12.8/bin/nvcc (CUDA 12.8)" in ok.stdout and NOTE not in ok.stdout


@needs_cmake
@pytest.mark.slow
@pytest.mark.parametrize("variant, code", [("cu126", 2), ("cpu", 1)])
def test_prepare_with_a_cmake_recipe_that_finds_no_cuda_exits_2_in_a_cuda_env_and_1_in_cpu(tmp_path, index, variant, code):
    src = write_tree(tmp_path / "src", {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\nproject(t CXX)\n"
                                        "find_package(Torch REQUIRED)\nfind_package(CUDA REQUIRED)\n"})
    res = cli(tmp_path, index, "prepare", "--libtorch", variant, "--home", str(tmp_path / "h"),
              "--source", f"file://{src}", "--source-build", RECIPE, "--source-bin", "build/app")
    errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == code and len(errors) == 1, res.stderr
    assert ("CUDA 12.x toolkit (none found)" in errors[0]) == (code == 2)
    assert ("next dial" in errors[0]) == (code == 1)


def test_a_recipe_on_a_terminal_keeps_cargos_colours_and_progress_through_the_pipe(tmp_path):
    import pty

    env = fake_env(tmp_path, "cpu")
    tree = write_tree(tmp_path / "tree", {"x": ""})
    code = (f"import sys; sys.path.insert(0, {str(Path(__file__).parent)!r})\n"
            "from pathlib import Path\nfrom fdlenv.names.home import Home\nfrom fdlenv.source import build\n"
            "from helpers_source import environ_for\nfrom fdlenv.store.env import Env\n"
            f"env = Env('cpu', 'e' * 64, Path({str(env.path)!r}), Path({str(env.libtorch_root)!r}))\n"
            "recipe = build.Recipe('mkdir -p out && echo \"tty=$CARGO_TERM_COLOR/$CARGO_TERM_PROGRESS_WHEN\" | "
            "tee out/app', '', 'out/app', False)\n"
            f"build.build(Home(Path({str(tmp_path / 'home')!r})), Path({str(tree)!r}), 'd' * 64, env, environ_for(env), recipe)\n")
    leader, follower = pty.openpty()
    res = subprocess.run([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=follower, text=True)
    os.close(follower)
    seen = os.read(leader, 65536).decode(errors="replace")
    os.close(leader)
    assert res.returncode == 0, seen
    assert "tty=always/always" in seen and "tty=always/always" in (tree / "out/app").read_text()
