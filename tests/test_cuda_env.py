"""The cu126/cu128 envs are complete CUDA build-and-run environments, with real tools.

Wheels shaped like PyTorch's CUDA closure, with *real* shared libraries the
tests compile (`libcudart.so.12`, `libnccl.so.2`: a soname, one function each),
headers where the real wheels keep them (`nvidia/<lib>/include`, `crt/` in the
nvcc wheel, `nv/` and `cuda/std` in the cccl wheel), served from a local
index, locked and realised by the real store. Then g++, cmake and cargo build
inside the env through `fdlenv run` with the host toolkit hidden in a mount
namespace (`unshare -m` and a bind mount over /usr/local/cuda: the suite runs
as root), and the binaries start under `run` and as join's agent, `ldd`
resolving the CUDA libraries from the env alone.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_conda import make_wheel, write_env
from helpers_cli import fdlenv
from helpers_wheels import make_index

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.store.activation import host_rocm_lib

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

NATIVE = "py3-none-manylinux2014_x86_64"
C_DECL = '#ifdef __cplusplus\nextern "C" {{\n#endif\n{}\n#ifdef __cplusplus\n}}\n#endif\n'
HOST_TOOLKIT = Path("/usr/local/cuda")


def _so(tmp: Path, soname: str, body: str) -> bytes:
    src, out = tmp / f"{soname}.c", tmp / soname
    src.write_text(body)
    subprocess.run(["gcc", "-shared", "-fPIC", f"-Wl,-soname,{soname}", "-o", str(out), str(src)], check=True)
    return out.read_bytes()


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    if not shutil.which("gcc"):
        pytest.skip("needs gcc")
    tmp = tmp_path_factory.mktemp("cuda")
    build = tmp / "build"
    build.mkdir()
    cudart = _so(build, "libcudart.so.12", "int cudaRuntimeGetVersion(int *v) { *v = 12080; return 0; }\n")
    nccl = _so(build, "libnccl.so.2", "int ncclGetVersion(int *v) { *v = 22703; return 0; }\n")
    w = tmp / "wheels"
    torch_cmake = ('set(Torch_FOUND TRUE)\nset(TORCH_INCLUDE_DIRS "${CMAKE_CURRENT_LIST_DIR}/../../../include")\n'
                   'message(STATUS "fdlenv-test: Torch from ${CMAKE_CURRENT_LIST_DIR}")\n')
    wheels = [
        make_wheel(w, "torch", "2.10.0", {"lib/libtorch.so": "torch", "include/torch/torch.h": "#define TORCH 1\n",
                                          "share/cmake/Torch/TorchConfig.cmake": torch_cmake, "__init__.py": ""},
                   tag="cp312-cp312-manylinux_2_28_x86_64",
                   requires=("nvidia-cuda-runtime-cu12==12.8.90", "nvidia-nccl-cu12==2.27.3")),
        make_wheel(w, "nvidia-cuda-runtime-cu12", "12.8.90", {
            "__init__.py": "", "cuda_runtime/lib/libcudart.so.12": cudart,
            "cuda_runtime/include/cuda_runtime.h": C_DECL.format("int cudaRuntimeGetVersion(int *v);"),
            "cuda_runtime/include/cuda/runtime_extra.h": "#define RUNTIME_EXTRA 1\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w, "nvidia-nccl-cu12", "2.27.3", {
            "__init__.py": "", "nccl/lib/libnccl.so.2": nccl, "nccl/include/nccl.h": C_DECL.format("int ncclGetVersion(int *v);")},
            tag=NATIVE, top="nvidia"),
        make_wheel(w, "nvidia-cuda-nvcc-cu12", "12.8.93", {
            "__init__.py": "", "cuda_nvcc/include/crt/host_defines.h": "#define CRT 1\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w, "nvidia-cuda-cccl-cu12", "12.8.90", {
            "__init__.py": "", "cuda_cccl/include/nv/target": "#define NV_TARGET 1\n",
            "cuda_cccl/include/cuda/std/version": "#define CUDA_STD 1\n"}, tag=NATIVE, top="nvidia"),
    ]
    url = make_index(tmp / "simple", wheels)
    envs = tmp / "envs"
    path = write_env(envs, "cu128", [], [{"pip": ["torch ==2.10.0", "nvidia-cuda-nvcc-cu12 ==12.8.93",
                                                  "nvidia-cuda-cccl-cu12 ==12.8.90"]}])
    path.write_text(path.read_text() + "pip-index: pypi\n")
    lock = tmp / "conda-lock.yml"
    home = Home(tmp / "home")
    lock_envs(envs, lock, mirrors={"pypi": url}, home=home)
    base = ["--libtorch", "cu128", "--lock", str(lock), "--home", str(home.root)]
    res = fdlenv("env", "realize", *base, "--mirror", f"pypi={url}", "--json", check=True)
    return json.loads(res.stdout), base, tmp


def cargo() -> str | None:
    """A cargo that runs: on PATH, else rustup's (conftest keeps CARGO_HOME at the real one); None
    where there is none or rustup has no toolchain (a fresh machine: those tests are opt-in there)."""
    home = Path(os.environ.get("CARGO_HOME") or Path.home() / ".cargo")
    for cand in (shutil.which("cargo"), str(home / "bin" / "cargo")):
        if cand and Path(cand).exists():
            try:
                if subprocess.run([cand, "--version"], capture_output=True, timeout=60).returncode == 0:
                    return cand
            except (OSError, subprocess.SubprocessError):
                pass
    return None


# Where no cargo runs (a fresh machine without Rust), these skip even under CI=true: flodl's builds
# need Rust, which fdlenv does not install; on these machines rustup's cargo is there and they run.
def needs_cargo(test):
    return pytest.mark.optional(pytest.mark.skipif(cargo() is None, reason="needs a working cargo")(test))


def run_in_env(base, *cmd, cwd=None, env=None):
    """`fdlenv run CMD` with the host CUDA toolkit hidden, as on a driver-only box."""
    return on_a_driver_only_box([sys.executable, "-m", "fdlenv", "run", *base, *cmd], cwd, env)


def on_a_driver_only_box(argv, cwd=None, env=None):
    """`argv` in a mount namespace where /usr/local/cuda is empty; CUDA_HOME inherited pointing there."""
    if HOST_TOOLKIT.exists() and os.geteuid() == 0:   # a mount namespace needs root (the suite runs as root)
        empty = Path(cwd or ".").absolute() / ".empty-toolkit"
        empty.mkdir(exist_ok=True)
        argv = ["unshare", "-m", "sh", "-c", f'mount --bind "$0" {HOST_TOOLKIT} && exec "$@"', str(empty), *argv]
    return subprocess.run(argv, capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, "CUDA_HOME": str(HOST_TOOLKIT), "LD_LIBRARY_PATH": "/inherited",
                               **(env or {})})


def test_a_cuda_env_has_its_own_cuda_home_with_every_header_and_the_linkers_names(world):
    env, base, _ = world
    home = Path(env["path"]) / "cuda"
    inc, lib = home / "include", home / "lib64"
    for header in ("cuda_runtime.h", "nccl.h", "crt/host_defines.h", "nv/target", "cuda/std/version",
                   "cuda/runtime_extra.h"):   # cuda/ merges the runtime's and cccl's
        assert (inc / header).is_file(), header
    assert os.path.realpath(lib / "libcudart.so") == os.path.realpath(lib / "libcudart.so.12")
    assert (lib / "libnccl.so").resolve().name == "libnccl.so.2"
    assert not any(os.path.isabs(os.readlink(p)) for p in home.rglob("*") if p.is_symlink())   # relative links
    assert subprocess.run([sys.executable, "-m", "fdlenv", "env", "verify", "--libtorch", "cu128", "--home",
                           base[-1]], capture_output=True, text=True).returncode == 0


def test_cuda_home_is_its_layout_linked_from_one_template_in_the_package_cache(world, tmp_path):
    from fdlenv.store import cudahome

    env, base, _ = world
    prefix = Path(env["path"])
    layout = cudahome.plan(prefix, Path(env["libtorch_root"]))
    made = {str(p.relative_to(prefix / "cuda")): (os.readlink(p) if p.is_symlink() else None)
            for p in (prefix / "cuda").rglob("*")}
    assert made == layout and "lib64/libcudart.so" in layout
    (template,) = Path(base[-1], "pkgs").glob("cudahome-*")
    for rel, text in layout.items():
        if text is not None:   # the env's symlink is the template's, hard-linked
            assert os.lstat(prefix / "cuda" / rel).st_ino == os.lstat(template / rel).st_ino, rel
    # in place, with no cache to hold a template: the same tree
    fake = tmp_path / "fake"
    (fake / "lib" / "python3.12").mkdir(parents=True)
    site = Path(env["libtorch_root"]).parent
    (fake / "lib" / "python3.12" / "site-packages").symlink_to(site)
    cudahome.assemble(fake, fake / "lib" / "python3.12" / "site-packages" / "torch")
    assert {str(p.relative_to(fake / "cuda")): (os.readlink(p) if p.is_symlink() else None)
            for p in (fake / "cuda").rglob("*")} == cudahome.plan(fake, fake / "lib/python3.12/site-packages/torch")



def test_gc_keeps_the_cuda_home_template_a_kept_env_links_and_the_next_env_reuses_it(world, tmp_path):
    from fdlenv.store import cudahome

    env, base, _ = world
    home = base[-1]
    (template,) = Path(home, "pkgs").glob("cudahome-*")
    unused = template.with_name("cudahome-" + "0" * 32)     # a layout no env links (its own inodes)
    shutil.copytree(template, unused, symlinks=True)
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", "--home", home, check=True).stdout)
    assert str(template) not in plan["cache_entries"] and str(unused) in plan["cache_entries"]
    ino = template.stat().st_ino
    fdlenv("env", "gc", "--home", home, check=True)
    assert template.stat().st_ino == ino and (template / ".complete").is_file() and not unused.exists()
    # after gc the next env's CUDA_HOME is linked from the same template, not made again
    prefix = tmp_path / "next"
    (prefix / "lib" / "python3.12").mkdir(parents=True)
    (prefix / "lib" / "python3.12" / "site-packages").symlink_to(Path(env["libtorch_root"]).parent)
    cudahome.assemble(prefix, prefix / "lib/python3.12/site-packages/torch", Path(home, "pkgs"))
    assert list(Path(home, "pkgs").glob("cudahome-*")) == [template] and template.stat().st_ino == ino
    assert os.lstat(prefix / "cuda/lib64/libcudart.so").st_ino == os.lstat(template / "lib64/libcudart.so").st_ino

def test_activation_exports_the_envs_cuda_home_and_every_nvidia_lib_dir_never_the_hosts(world, tmp_path):
    env, base, _ = world
    res = run_in_env(base, "sh", "-c", 'printf "%s\\n" "$CUDA_HOME" "$CUDA_PATH" "$LD_LIBRARY_PATH" '
                     '"$CMAKE_PREFIX_PATH" "$Torch_DIR"', cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    cuda_home, cuda_path, ld, cmake, torch_dir = res.stdout.splitlines()
    root = Path(env["libtorch_root"])
    assert cuda_home == cuda_path == str(Path(env["path"]) / "cuda")
    nvidia = [str(root.parent / f"nvidia/{d}/lib") for d in ("cuda_runtime", "nccl")]   # header wheels: no lib/
    assert ld.split(":") == [str(root / "lib"), *nvidia, "/inherited"]
    assert cmake.split(":")[0] == str(root) and torch_dir == str(root / "share/cmake/Torch")


def test_gxx_builds_against_the_env_alone_and_the_binary_starts_with_cudart_from_the_env(world, tmp_path):
    env, base, _ = world
    (tmp_path / "main.cpp").write_text(
        '#include <cuda_runtime.h>\n#include <nccl.h>\n#include <crt/host_defines.h>\n#include <cstdio>\n'
        'int main() { int r = 0, n = 0; cudaRuntimeGetVersion(&r); ncclGetVersion(&n);\n'
        '  std::printf("cudart %d nccl %d\\n", r, n); return 0; }\n')
    build = run_in_env(base, "sh", "-c", 'g++ -I"$CUDA_HOME/include" main.cpp -L"$CUDA_HOME/lib64" -lcudart -lnccl '
                       '-o app', cwd=tmp_path)
    assert build.returncode == 0, build.stderr
    ran = run_in_env(base, "./app", cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout == "cudart 12080 nccl 22703\n", ran.stderr
    ldd = run_in_env(base, "ldd", "./app", cwd=tmp_path)
    lines = {ln.split()[0]: ln for ln in ldd.stdout.splitlines() if "=>" in ln}
    site = str(Path(env["libtorch_root"]).parent)
    assert f"{site}/nvidia/cuda_runtime/lib/libcudart.so.12" in lines["libcudart.so.12"]
    assert f"{site}/nvidia/nccl/lib/libnccl.so.2" in lines["libnccl.so.2"]
    assert str(HOST_TOOLKIT) not in ldd.stdout


@pytest.mark.optional   # cmake is the user's tool, not one the README installs
@pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
def test_cmake_find_package_torch_finds_the_envs_torch_with_nothing_passed(world, tmp_path):
    env, base, _ = world
    src = tmp_path / "src"
    src.mkdir()
    (src / "CMakeLists.txt").write_text("cmake_minimum_required(VERSION 3.18)\nproject(t NONE)\n"
                                        "find_package(Torch REQUIRED)\n")
    res = run_in_env(base, "cmake", "-S", "src", "-B", "build", cwd=tmp_path)
    assert res.returncode == 0, res.stdout + res.stderr
    assert f"fdlenv-test: Torch from {Path(env['libtorch_root'])}/share/cmake/Torch" in res.stdout


CARGO_TOML = '[package]\nname = "ffi"\nversion = "0.1.0"\nedition = "2021"\nbuild = "build.rs"\n\n[features]\ncuda = []\n'
# Shaped like flodl-sys's build.rs, with no crates (crates.io is not reachable): C++ compiled
# against $LIBTORCH_PATH/include and $CUDA_HOME/include, linked with -lcudart -lnccl from
# $CUDA_HOME/lib64 under the `cuda` feature.
BUILD_RS = r'''
use std::{env, path::PathBuf, process::Command};
fn main() {
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    let torch = PathBuf::from(env::var("LIBTORCH_PATH").expect("LIBTORCH_PATH"));
    let cuda = env::var("CARGO_FEATURE_CUDA").is_ok();
    let mut cc = Command::new("c++");
    cc.args(["-c", "-fPIC", "shim.cpp", "-o"]).arg(out.join("shim.o")).arg(format!("-I{}", torch.join("include").display()));
    let home = PathBuf::from(env::var("CUDA_HOME").unwrap_or_default());
    if cuda {
        cc.arg("-DWITH_CUDA").arg(format!("-I{}", home.join("include").display()));
    }
    assert!(cc.status().unwrap().success(), "c++ failed");
    assert!(Command::new("ar").args(["crs"]).arg(out.join("libshim.a")).arg(out.join("shim.o")).status().unwrap().success());
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=shim");
    if cuda {
        println!("cargo:rustc-link-search=native={}", home.join("lib64").display());
        println!("cargo:rustc-link-lib=dylib=cudart");
        println!("cargo:rustc-link-lib=dylib=nccl");
    }
    println!("cargo:rustc-link-lib=dylib=stdc++");
    println!("cargo:rerun-if-changed=shim.cpp");
}
'''
SHIM = ('#include <torch/torch.h>\n#ifdef WITH_CUDA\n#include <cuda_runtime.h>\n#include <nccl.h>\n#endif\n'
        'extern "C" int ffi_cuda_version() {\n#ifdef WITH_CUDA\n  int v = 0; cudaRuntimeGetVersion(&v); return v;\n'
        '#else\n  return -1;\n#endif\n}\n')
MAIN_RS = ('extern "C" { fn ffi_cuda_version() -> i32; }\n'
           'fn main() { println!("flodl-sys-shaped: cuda runtime {}", unsafe { ffi_cuda_version() }); }\n')


@needs_cargo
def test_a_crate_shaped_like_flodl_sys_builds_its_cuda_feature_and_starts_under_run_and_as_the_agent(world, tmp_path):
    found = cargo()
    env, base, _ = world
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(CARGO_TOML)
    (crate / "build.rs").write_text(BUILD_RS)
    (crate / "shim.cpp").write_text(SHIM)
    (crate / "src" / "main.rs").write_text(MAIN_RS)
    path = f"{Path(found).parent}:{os.environ['PATH']}"
    built = run_in_env(base, "cargo", "build", "--offline", "--release", "--features", "cuda", cwd=crate,
                       env={"PATH": path, "CARGO_TARGET_DIR": str(crate / "target")})
    assert built.returncode == 0, built.stderr
    binary = crate / "target" / "release" / "ffi"
    ran = run_in_env(base, str(binary), cwd=tmp_path)
    assert ran.returncode == 0 and ran.stdout == "flodl-sys-shaped: cuda runtime 12080\n", ran.stderr
    joined = on_a_driver_only_box([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--no-sig-probe",
                                   "--bin", str(binary), *base], tmp_path,
                                  {"FLODL_TESTING_GPU_JSON": '[{"vendor": "nvidia", "arch": "9.0", "name": "H200"}]'})
    assert joined.returncode == 0, joined.stderr
    assert "flodl-sys-shaped: cuda runtime 12080" in joined.stdout + joined.stderr


def test_the_host_rocm_lib_dir_is_found_through_rocm_path_hip_path_hsa_path_then_the_fallback(tmp_path):
    hip = tmp_path / "hip"
    (hip / "lib64").mkdir(parents=True)
    (hip / "lib64" / "libamdhip64.so.7").write_text("")
    assert host_rocm_lib({"HIP_PATH": str(hip)}) == hip / "lib64"
    assert host_rocm_lib({"ROCM_PATH": str(tmp_path / "none"), "HSA_PATH": str(hip)}) == hip / "lib64"
    assert host_rocm_lib({"ROCM_PATH": str(tmp_path / "none")}) in (tmp_path / "none" / "lib", Path("/opt/rocm/lib64"),
                                                                     Path("/opt/rocm/lib"))
    if not any(Path("/opt/rocm").glob("lib*/libamdhip64.so*")):
        assert host_rocm_lib({"ROCM_PATH": str(tmp_path / "none")}) == tmp_path / "none" / "lib"
        assert host_rocm_lib({}) == Path("/opt/rocm/lib")


SWITCH_RS = r'''
use std::{env, fs::OpenOptions, io::Write, path::PathBuf, process::Command};
fn main() {
    // stands for flodl-sys's C++ unity build over torch.h: it reruns when LIBTORCH_PATH changes
    println!("cargo:rerun-if-env-changed=LIBTORCH_PATH");
    println!("cargo:rerun-if-changed=ffi.cpp");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    assert!(Command::new("c++").args(["-c", "-fPIC", "ffi.cpp", "-o"]).arg(out.join("ffi.o")).status().unwrap().success());
    assert!(Command::new("ar").arg("crs").arg(out.join("libffi.a")).arg(out.join("ffi.o")).status().unwrap().success());
    let mut log = OpenOptions::new().create(true).append(true).open(env::var("FFI_BUILDS").unwrap()).unwrap();
    writeln!(log, "{}", env::var("LIBTORCH_PATH").unwrap()).unwrap();
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=ffi");
}
'''


@needs_cargo
def test_switching_variants_keeps_a_build_tree_per_variant_so_going_back_is_incremental(world, tmp_path):
    from helpers_store import make_world

    found = cargo()
    env, base, _ = world
    cpu = make_world(tmp_path / "cpu-world", variants=("cpu",))
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text('[package]\nname = "sw"\nversion = "0.1.0"\nedition = "2021"\n')
    (crate / "build.rs").write_text(SWITCH_RS)
    (crate / "ffi.cpp").write_text('extern "C" int ffi_answer() { return 42; }\n')
    (crate / "src" / "main.rs").write_text('extern "C" { fn ffi_answer() -> i32; }\n'
                                           'fn main() { println!("{}", unsafe { ffi_answer() }); }\n')
    log = tmp_path / "ffi-builds"
    cargo_bin = str(Path(found).parent)
    environ = {**os.environ, "FFI_BUILDS": str(log), "PATH": f"{cargo_bin}:{os.environ['PATH']}"}
    environ.pop("CARGO_TARGET_DIR", None)
    home = base[-1]

    def build(lock_args):
        res = subprocess.run([sys.executable, "-m", "fdlenv", "build", *lock_args, "--home", home,
                              "--source", f"file://{crate}", "--source-build", "cargo build --offline --release",
                              "--source-bin", "target/release/sw", "--json"], capture_output=True, text=True,
                             env=environ)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    a = ["--libtorch", "cu128", "--lock", base[3]]
    b = ["--libtorch", "cpu", "--lock", str(cpu.lock)]
    first = build(a)
    build(b)
    (crate / "src" / "main.rs").write_text((crate / "src" / "main.rs").read_text() + "// edited\n")
    again = build(a)
    assert again["built"] is True and again["build_key"] != first["build_key"]
    runs = log.read_text().splitlines()
    assert len(runs) == 2 and runs[0] != runs[1], runs     # A's C++ was not rebuilt on the way back
    assert subprocess.run([again["bin"]], capture_output=True, text=True).stdout == "42\n"
