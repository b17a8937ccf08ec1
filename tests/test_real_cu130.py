"""Opt-in: a project's own env file pinning PyPI's torch 2.11.0 (the CUDA 13.0 build) for cu130,
locked and realised from the real wheels, then a CMake project with a `.cu` kernel and
`find_package(Torch)` configured, built and run under `fdlenv run` with no host toolkit.

Run with `FDLENV_REAL_WHEELS=1` (a few GB from the configured pip index); `FDLENV_REAL_HOME`
keeps the home (so a second run downloads nothing). The host toolkit is hidden with `unshare -m`
and an empty bind mount over every `/usr/local/cuda*` and every `nvcc` on PATH, so CMake, nvcc
and the link see only the env's `cuda/` (what activation names: CUDACXX, CUDAToolkit_ROOT,
TORCH_CUDA_ARCH_LIST); the binary then starts with libtorch and cudart from the env.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
from helpers_pytorch_index import cu130_project_env

REAL = os.environ.get("FDLENV_REAL_WHEELS") == "1"
pytestmark = [pytest.mark.slow, pytest.mark.optional,
              pytest.mark.skipif(not REAL, reason="opt-in: downloads PyPI's torch 2.11.0 and CUDA 13 wheels; "
                                                  "set FDLENV_REAL_WHEELS=1")]

# What a fleet writes to pin its own libtorch for cu130 (docs/LOCK.md): PyPI's torch 2.11.0 is
# the CUDA 13.0 build, and the toolkit wheels of its runtime's version make the env a toolkit.
PROJECT_ENV = cu130_project_env("probe-cu130")

CMAKELISTS = """\
cmake_minimum_required(VERSION 3.18)
project(probe LANGUAGES CXX CUDA)
find_package(Torch REQUIRED)
add_executable(probe main.cpp kernel.cu)
target_link_libraries(probe "${TORCH_LIBRARIES}")
set_property(TARGET probe PROPERTY CXX_STANDARD 17)
"""

KERNEL = """\
#include <cuda_runtime.h>
__global__ void axpy(float a, const float* x, float* y, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n) y[i] = a * x[i] + y[i];
}
int cuda_runtime_version() { int v = 0; cudaRuntimeGetVersion(&v); return v; }
int cuda_devices() { int n = 0; return cudaGetDeviceCount(&n) == cudaSuccess ? n : 0; }
"""

MAIN = """\
#include <torch/torch.h>
#include <iostream>
int cuda_runtime_version();
int cuda_devices();
int main() {
  std::cout << "libtorch " << TORCH_VERSION << std::endl;
  std::cout << "cudart " << cuda_runtime_version() << std::endl;
  auto t = torch::arange(5, torch::kFloat);
  std::cout << "sum = " << (t * t).sum().item<float>() << std::endl;
  std::cout << "cuda devices: " << cuda_devices() << std::endl;
  return 0;
}
"""


def _fdlenv(*args: str, home: Path, cwd: Path, timeout: int = 3600) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "fdlenv", *args, "--home", str(home)], capture_output=True,
                          text=True, cwd=cwd, timeout=timeout)


def _hiding_the_host_toolkit(script: str, empty: Path) -> list[str]:
    """`script` in a private mount namespace where every host toolkit dir and nvcc is empty."""
    dirs = sorted(str(p) for p in Path("/usr/local").glob("cuda*"))
    nvccs = sorted({os.path.realpath(p) for d in os.environ.get("PATH", "").split(":") if d
                    for p in [os.path.join(d, "nvcc")] if os.path.isfile(p)})
    (empty / "dir").mkdir(parents=True, exist_ok=True)
    (empty / "file").write_text("")
    mounts = [f"mount --bind {empty / 'dir'} {d}" for d in dirs] + [f"mount --bind {empty / 'file'} {n}"
                                                                      for n in nvccs]
    return ["unshare", "-m", "bash", "-ec", " && ".join([*mounts, script])]


def test_a_project_pinning_torch_2_11_for_cu130_builds_a_cuda_cmake_project_with_no_host_toolkit(tmp_path):
    if shutil.which("unshare") is None or shutil.which("cmake") is None or shutil.which("g++") is None:
        pytest.skip("needs unshare, cmake and g++")
    home = Path(os.environ.get("FDLENV_REAL_HOME") or tmp_path / "home")
    project = tmp_path / "probe"
    (project / "envs").mkdir(parents=True)
    (project / "envs" / "cu130.yml").write_text(PROJECT_ENV)
    for name, text in (("CMakeLists.txt", CMAKELISTS), ("kernel.cu", KERNEL), ("main.cpp", MAIN)):
        (project / name).write_text(text)

    t0 = time.monotonic()
    lock = _fdlenv("lock", "--libtorch", "cu130", "--envs", "envs", "--out", "conda-lock.yml", home=home, cwd=project)
    assert lock.returncode == 0, lock.stderr
    text = (project / "conda-lock.yml").read_text()
    assert "torch-2.11.0-" in text and "nvidia_cuda_nvcc-13.0.88" in text, text[:2000]
    t1 = time.monotonic()
    real = _fdlenv("env", "realize", "--libtorch", "cu130", "--lock", "conda-lock.yml", "--json", home=home, cwd=project)
    assert real.returncode == 0, real.stderr
    env = Path(json.loads(real.stdout)["path"])
    t2 = time.monotonic()
    assert json.loads((env / "cuda" / "version.json").read_text())["cuda"]["version"].startswith("13.0.")

    (project / "build.sh").write_text(
        "set -e\nnvcc --version\ncommand -v nvcc\nb=build/fdlenv-$FDLENV_VARIANT\n"
        "cmake -S . -B $b -DCMAKE_BUILD_TYPE=Release > cmake.log 2>&1 || { tail -40 cmake.log; exit 1; }\n"
        "cmake --build $b -j2 > build.log 2>&1 || { tail -40 build.log; exit 1; }\n"
        "ldd $b/probe | grep -E 'libtorch_cuda|libcudart|libc10'\n$b/probe\n")
    inner = f"{sys.executable} -m fdlenv run --libtorch cu130 --lock conda-lock.yml --home {home} -- bash build.sh"
    res = subprocess.run(_hiding_the_host_toolkit(f"cd {project} && {inner}", tmp_path / "empty"),
                         capture_output=True, text=True, timeout=3600, env={**os.environ, "CUDA_HOME": "/usr/local/cuda"})
    t3 = time.monotonic()
    print(res.stdout, res.stderr[-3000:], sep="\n")
    print(f"lock {t1 - t0:.1f} s, realise {t2 - t1:.1f} s, nvcc + cmake configure/build/run {t3 - t2:.1f} s")
    assert res.returncode == 0, res.stdout + res.stderr
    out = res.stdout
    assert "release 13.0" in out and str(env / "cuda" / "bin" / "nvcc") in out
    assert "libtorch 2.11.0" in out and "cudart 130" in out and "sum = 30" in out
    ldd = [line for line in out.splitlines() if "=>" in line]
    assert ldd and all(str(env) in line for line in ldd), ldd
    cache = (project / "build" / "fdlenv-cu130" / "CMakeCache.txt").read_text()
    assert "/usr/local/cuda" not in cache and str(env / "cuda") in cache
