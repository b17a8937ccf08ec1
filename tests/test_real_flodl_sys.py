"""Opt-in: flodl's own `flodl-sys` built with `--features cuda` in the real cu128 env, on a
driver-only box, and its binary started under `fdlenv run` and as join's agent.

Run with `FDLENV_REAL_WHEELS=1 FDLENV_FLODL_SRC=<a flodl checkout>` (and, where
crates.io is not reachable, Debian's `librust-cc-dev`: the crate's one build
dependency, `cc`, is taken from /usr/share/cargo/registry through a cargo
source replacement; that `cc` is 1.0.73, which has no `Build::std`, so the copy
built here says `-std=c++17` as a flag instead). `FDLENV_REAL_HOME` reuses a
home where cu128 is realised already (3.9 GB otherwise). The host CUDA toolkit
is hidden with `unshare -m` and a bind mount over /usr/local/cuda, so the
build sees only the env's CUDA_HOME; `ldd` then resolves libcudart and
libnccl from the env's nvidia wheels.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

REAL = os.environ.get("FDLENV_REAL_WHEELS") == "1" and os.environ.get("FDLENV_FLODL_SRC")
pytestmark = [pytest.mark.slow, pytest.mark.optional,
              pytest.mark.skipif(not REAL, reason="opt-in: FDLENV_REAL_WHEELS=1 FDLENV_FLODL_SRC=<flodl checkout>")]

PROBE_TOML = """[package]
name = "flodl-probe"
version = "0.1.0"
edition = "2024"

[features]
cuda = ["flodl-sys/cuda"]

[dependencies]
flodl-sys = { path = "../flodl-sys" }
"""
PROBE_MAIN = r"""use flodl_sys::*;
use std::ptr;
fn main() {
    unsafe {
        let mut shape = [2i64, 3];
        let mut t: FlodlTensor = ptr::null_mut();
        assert!(flodl_ones(shape.as_mut_ptr(), 2, FLODL_FLOAT32, FLODL_CPU, 0, &mut t).is_null());
        let mut s: FlodlTensor = ptr::null_mut();
        assert!(flodl_sum(t, &mut s).is_null());
        let mut v = 0f32;
        assert!(flodl_copy_data(s, &mut v as *mut f32 as *mut _, 4).is_null());
        println!("cpu: sum of ones(2,3) = {v}");
        println!("cuda: available {} devices {}", flodl_cuda_is_available(), flodl_cuda_device_count());
        let (mut used, mut total) = (0u64, 0u64);
        let err = flodl_cuda_mem_info(0, &mut used, &mut total);
        println!("cuda: mem_info(0) {}", if err.is_null() { format!("{used}/{total}") } else { "no device".to_string() });
        flodl_free_tensor(s);
        flodl_free_tensor(t);
    }
}
"""
REGISTRY = """[source.crates-io]
replace-with = "vendored"
[source.vendored]
directory = "/usr/share/cargo/registry"
"""
WORKSPACE = {"version": '"0.5.3"', "edition": '"2024"', "rust-version": '"1.85"', "license": '"MIT"'}


def _tree(tmp: Path) -> Path:
    src = tmp / "src"
    shutil.copytree(Path(os.environ["FDLENV_FLODL_SRC"]) / "flodl-sys", src / "flodl-sys")
    toml = src / "flodl-sys" / "Cargo.toml"
    toml.write_text(re.sub(r"^([\w-]+)\.workspace = true$",
                           lambda m: f"{m.group(1)} = {WORKSPACE[m.group(1)]}" if m.group(1) in WORKSPACE else "",
                           toml.read_text(), flags=re.M))
    build_rs = src / "flodl-sys" / "build.rs"
    build_rs.write_text(build_rs.read_text().replace('.std("c++17")', '.flag("-std=c++17")'))
    (src / "probe" / "src").mkdir(parents=True)
    (src / "probe" / ".cargo").mkdir()
    (src / "probe" / "Cargo.toml").write_text(PROBE_TOML)
    (src / "probe" / "src" / "main.rs").write_text(PROBE_MAIN)
    (src / "probe" / ".cargo" / "config.toml").write_text(REGISTRY)
    return src


def _driver_only(argv: list[str], tmp: Path, env: dict) -> subprocess.CompletedProcess:
    empty = tmp / "no-toolkit"
    empty.mkdir(exist_ok=True)
    wrapped = ["unshare", "-m", "sh", "-c", 'mount --bind "$0" /usr/local/cuda && exec "$@"', str(empty), *argv]
    return subprocess.run(wrapped if Path("/usr/local/cuda").exists() else argv, capture_output=True,
                          text=True, env=env, cwd=tmp)


def test_flodl_sys_cuda_builds_in_the_real_cu128_env_and_starts_under_run_and_as_the_agent(tmp_path):
    home = os.environ.get("FDLENV_REAL_HOME") or str(tmp_path / "home")
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    env = {**os.environ, "PATH": f"{Path(cargo).parent}:{os.environ['PATH']}"}
    env.pop("CUDA_HOME", None)
    fdl = [sys.executable, "-m", "fdlenv"]
    src = _tree(tmp_path)
    built = _driver_only([*fdl, "build", "--libtorch", "cu128", "--home", home, "--source", f"file://{src}",
                          "--source-cwd", "probe", "--source-build", "cargo build --release --offline --features cuda",
                          "--source-bin", "target/release/flodl-probe", "--json"], tmp_path, env)
    assert built.returncode == 0, built.stderr[-3000:]
    binary = json.loads(built.stdout)["bin"]
    ran = _driver_only([*fdl, "run", "--libtorch", "cu128", "--home", home, binary], tmp_path, env)
    assert ran.returncode == 0 and "cpu: sum of ones(2,3) = 6" in ran.stdout, ran.stderr
    ldd = _driver_only([*fdl, "run", "--libtorch", "cu128", "--home", home, "ldd", binary], tmp_path, env)
    cudart = next(ln for ln in ldd.stdout.splitlines() if "libcudart.so.12" in ln)
    assert "/nvidia/cuda_runtime/lib/libcudart.so.12" in cudart and "not found" not in ldd.stdout
    assert "/usr/local/cuda" not in ldd.stdout
    gpu = '[{"vendor": "nvidia", "arch": "9.0", "name": "H200"}]'
    joined = _driver_only([*fdl, "join", "127.0.0.1:9", "--no-sig-probe", "--libtorch", "cu128", "--home", home,
                           "--bin", binary], tmp_path, {**env, "FLODL_TESTING_GPU_JSON": gpu})
    assert joined.returncode == 0 and "cpu: sum of ones(2,3) = 6" in joined.stdout + joined.stderr, joined.stderr
