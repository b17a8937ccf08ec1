"""cu130, the CUDA 13 variant: its token, where routing lets it run, what a cu130 torch is, and
its env, a whole CUDA 13.0 toolkit, locked on demand and realised from a loopback index laid out
like PyTorch's (`helpers_pytorch_index`: torch 2.10.0+cu130 requiring unsuffixed `nvidia-*`
wheels under `nvidia/cu13/`, the toolkit wheels and PyPI's torch 2.11.0, which requires
`cuda-toolkit[cublas,cudart]==13.0.2`, on the default pip index). Each test has its own home.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_conda import make_wheel
from helpers_pytorch_index import PYDEPS, TORCH, Index, _torch_files, cu130_project_env, lay_out, serve
from helpers_cli import fdlenv

from fdlenv.base.errors import Fail
from fdlenv.hw.model import NVIDIA, Device, Survey
from fdlenv.hw.routing import route
from fdlenv.names import variants

# --- the token and its names ---


@pytest.mark.parametrize("token", ["cu130", "CU130", "13.0", " cu130 "])
def test_cu130_and_13_0_name_the_cuda_13_variant(token):
    v = variants.get(token)
    assert (v.name, v.vendor, v.cuda) == ("cu130", "nvidia", "13.0")
    assert (v.flodl_label, v.package) == ("precompiled/cu130", "libtorch-cu130")
    assert "`fdlenv lock --libtorch cu130`" in v.how_to_lock()


def test_a_wrong_token_is_one_error_line_that_lists_cu130(tmp_path):
    res = fdlenv("env", "realize", "--libtorch", "cu13", "--home", str(tmp_path / "h"))
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr
    assert "'cu13'" in errors[0] and "cu130 (13.0)" in errors[0]
    with pytest.raises(Fail, match="cu130"):
        variants.parse_token("13.1")


# --- routing: a candidate where the driver and the cards allow it, never the first choice ---

def nv(arch: str, i: int = 0) -> Device:
    return Device(NVIDIA, i, f"card {i}", arch, 1024)


def box(*devices: Device, cuda: str | None) -> Survey:
    return Survey(tuple(devices), (), None, cuda, None)


@pytest.mark.parametrize("devices,driver,expected", [
    ((nv("9.0"),), "12.8", ("cu128", "cu126")),               # a CUDA 12.8 driver runs no cu130
    ((nv("9.0"),), "13.0", ("cu128", "cu130", "cu126")),      # flodl's cu128 stays the first choice
    ((nv("12.0"),), "13.0", ("cu128", "cu130")),
    ((nv("7.5"),), "13.0", ("cu128", "cu130", "cu126")),      # sm_75: the oldest CUDA 13 compiles for
    ((nv("7.0"),), "13.0", ("cu128", "cu126")),               # Volta: CUDA 13 dropped it
    ((nv("6.1"),), "13.0", ("cu126",)),                       # Pascal: cu126 only
    ((nv("9.0"), nv("7.0", 1)), "13.0", ("cu128", "cu126")),  # cu130 would lose the V100
])
def test_cu130_is_a_candidate_only_on_a_cuda_13_driver_with_sm_75_or_newer(devices, driver, expected):
    assert route(box(*devices, cuda=driver)).candidates == expected


def test_a_realised_cu130_wins_on_a_cuda_13_driver_and_says_routing_would_pick_cu128():
    r = route(box(nv("9.0"), cuda="13.0"), realised={"cu130"})
    assert r.variant == "cu130" and r.routed is not None and r.routed.variant == "cu128"
    assert r.reason.startswith("realised; routing would pick cu128")


@pytest.mark.parametrize("devices,driver", [((nv("9.0"),), "12.8"), ((nv("6.1"),), "13.0"), ((nv("7.0"),), "13.0")])
def test_a_realised_cu130_does_not_win_where_it_cannot_run(devices, driver):
    r = route(box(*devices, cuda=driver), realised={"cu130"})
    assert r.variant != "cu130" and "cu130" not in r.candidates


# --- what a cu130 torch is (the identity check's CUDA 13 shapes) ---

CU13_REQS = {"nvidia-cuda-runtime": "==13.0.96", "nvidia-cublas": "==13.1.0.3", "nvidia-cudnn-cu13": "==9.15.1.9"}
TOOLKIT_REQS = {"cuda-toolkit": "==13.0.2", "nvidia-cudnn-cu13": "==9.19.0.56"}   # PyPI's torch 2.11.0
CU12_REQS = {"nvidia-cuda-runtime-cu12": "==12.8.90", "nvidia-cublas-cu12": "==12.8.4.1"}


@pytest.mark.parametrize("version,requires", [("2.10.0+cu130", CU13_REQS), ("2.11.0", TOOLKIT_REQS),
                                              ("2.10.0", CU13_REQS), ("2.12.0", {"nvidia-cublas": ">=13"})])
def test_cuda_13s_requirement_shapes_are_a_cu130_build(version, requires):
    assert variants.build_mismatch("cu130", version, requires) is None


@pytest.mark.parametrize("variant,version,requires,said", [
    ("cu130", "2.10.0+cu128", CU12_REQS, "its label is not +cu130"),
    ("cu130", "2.10.0", CU12_REQS, "the CUDA 12.8 build"),
    ("cu130", "2.10.0", {"nvidia-cublas-cu12": ""}, "a CUDA 12 build"),
    ("cu130", "2.10.0", {}, "a CPU build"),
    ("cu128", "2.11.0", TOOLKIT_REQS, "the CUDA 13.0 build"),
    ("cu128", "2.12.0", {"nvidia-cublas": "", "nvidia-cudnn-cu13": ""}, "a CUDA 13 build"),
    ("cu126", "2.10.0+cu130", CU13_REQS, "its label is not +cu126"),
    ("cpu", "2.11.0", TOOLKIT_REQS, "a CUDA build"),
])
def test_a_torch_of_another_cuda_is_not_a_cu130_build_nor_cu130s_one_a_cu12x_build(variant, version, requires, said):
    why = variants.build_mismatch(variant, version, requires)
    assert why is not None and said in why, why


# --- locked on demand and realised from the loopback index ---

@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


def realize(tmp: Path, index: Index, *extra: str, home: str = "h") -> subprocess.CompletedProcess[str]:
    return fdlenv("env", "realize", "--libtorch", "cu130", "--mirror", f"pytorch={index.url}",
                  "--mirror", f"pypi={index.simple}", "--home", str(tmp / home), "--json", *extra)


def run_in(tmp: Path, *cmd: str, env: dict | None = None, home: str = "h") -> subprocess.CompletedProcess[str]:
    return fdlenv("run", "--libtorch", "cu130", "--home", str(tmp / home), "--", *cmd, env=env)


@pytest.mark.slow
def test_cu130_locks_on_demand_from_pytorchs_cu130_index_and_its_env_is_a_cuda_13_toolkit(tmp_path, index):
    res = realize(tmp_path, index)
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["variant"] == "cu130" and out["active"] == "precompiled/cu130"
    assert "CMake builds:" not in res.stderr   # its own toolkit: no note about the host's
    lock = (tmp_path / "h" / "lockfiles" / "cu130.conda-lock.yml").read_text()
    assert "pip+index://pytorch/cu130/torch/torch-2.10.0+cu130-" in lock
    assert "pip+index://pypi/nvidia-cuda-nvcc/" in lock and "nvidia_cuda_nvcc-13.0.88" in lock
    env = Path(out["path"])
    cuda = env / "cuda"
    site = Path(out["libtorch_root"]).parent
    # nvcc and CMake's layout: bin/ (nvcc beside its profile), nvvm/, lib64/ with the static libs and
    # the linker's unversioned names, the headers merged, version.json
    assert (cuda / "bin" / "nvcc").resolve() == site / "nvidia" / "cu13" / "bin" / "nvcc"
    assert (cuda / "bin" / "nvcc.profile").is_file() and (cuda / "nvvm" / "bin" / "cicc").is_file()
    for lib in ("libcudart_static.a", "libcudadevrt.a", "libcudart.so", "libcudart.so.13", "libcublas.so",
                "libcudnn.so", "libnvvm.so"):
        assert (cuda / "lib64" / lib).exists(), lib
    assert (cuda / "include" / "crt" / "host_defines.h").read_text() == "#define CRT 13\n"
    assert (cuda / "include" / "cccl" / "cuda" / "std" / "version").is_file()
    facts = json.loads((cuda / "version.json").read_text())
    assert facts["cuda"]["version"] == "13.0.88" and facts["cuda_runtime"]["version"] == "13.0.96"
    arch = dict(line.split("=", 1) for line in (site / "torch" / ".arch").read_text().splitlines())
    assert arch["cuda"] == "13.0" and arch["archs"] == "7.5 8.0 8.6 9.0 10.0 12.0"

    probe = ("nvcc --version; command -v nvcc; printf '%s\\n' \"CUDACXX=$CUDACXX\" \"ROOT=$CUDAToolkit_ROOT\" "
             "\"HOME=$CUDA_HOME\" \"ARCHS=$TORCH_CUDA_ARCH_LIST\"")
    ran = run_in(tmp_path, "bash", "-c", probe, env={"CUDA_HOME": "/usr/local/cuda", "TORCH_CUDA_ARCH_LIST": ""})
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.splitlines() == ["Cuda compilation tools, release 13.0, V13.0.88", str(cuda / "bin" / "nvcc"),
                                       f"CUDACXX={cuda / 'bin' / 'nvcc'}", f"ROOT={cuda}", f"HOME={cuda}",
                                       "ARCHS=7.5;8.0;8.6;9.0;10.0;12.0"]
    mine = run_in(tmp_path, "bash", "-c", "echo $TORCH_CUDA_ARCH_LIST", env={"TORCH_CUDA_ARCH_LIST": "9.0"})
    assert mine.stdout.strip() == "9.0"   # the user's own arch list stands


@pytest.mark.slow
def test_shell_hook_of_cu130_puts_the_envs_nvcc_first_and_undoing_it_leaves_none(tmp_path, index):
    assert realize(tmp_path, index).returncode == 0
    script = (f'eval "$({sys.executable} -m fdlenv shell-hook --libtorch cu130 --home {tmp_path / "h"})"; '
              'command -v nvcc; echo "$CUDACXX"; '
              f'eval "$({sys.executable} -m fdlenv shell-hook --libtorch cpu --home {tmp_path / "h"} --deactivate)"; '
              'echo "after=${CUDACXX:-none}"')
    res = subprocess.run(["bash", "--noprofile", "--norc", "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PATH": "/usr/bin:/bin"})
    lines = res.stdout.splitlines()
    assert len(lines) >= 2 and lines[0].endswith("/cuda/bin/nvcc") and lines[1] == lines[0], res.stderr


@pytest.mark.slow
def test_frozen_without_cu130_in_the_lock_names_fdlenv_lock_libtorch_cu130(tmp_path, index):
    from fdlenv.lock.paths import shipped_lock

    res = realize(tmp_path, index, "--lock", str(shipped_lock()), "--frozen")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert "cu130" in errors[0] and "`fdlenv lock --libtorch cu130`" in errors[0]
    assert not (tmp_path / "h" / "envs").exists() or not list((tmp_path / "h" / "envs").glob("cu130-*"))


@pytest.mark.slow
def test_an_index_with_no_torch_2_10_0_for_cu130_is_one_error_line_saying_how_to_pin_another_torch(tmp_path):
    root = tmp_path / "idx"
    old = make_wheel(root / "build", "torch", "2.9.1+cu130", _torch_files("cu130"), tag=TORCH, requires=PYDEPS)
    lay_out(root, {"cu130": [old]})
    with Index(root) as idx:
        res = fdlenv("env", "realize", "--libtorch", "cu130", "--mirror", f"pytorch={idx.url}",
                     "--home", str(tmp_path / "h"), "--json")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode in (1, 2) and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert "torch==2.10.0" in errors[0] and "pin another torch for cu130" in errors[0]
    assert "`fdlenv lock --libtorch cu130 --envs DIR`" in errors[0]
    assert not list((tmp_path / "h").glob("lockfiles/cu130*"))


@pytest.mark.slow
def test_cu130_from_an_index_serving_a_cu12_torch_is_refused_and_nothing_is_locked(tmp_path, index):
    mapping = f"pytorch/cu130={index.url}/cu126"
    res = fdlenv("env", "realize", "--libtorch", "cu130", "--mirror", mapping, "--mirror", f"pypi={index.simple}",
                 "--home", str(tmp_path / "h"), "--json")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert "not the CUDA 13.0 build (torch 2.10.0+cu126" in errors[0] and mapping.split("=")[0] in errors[0]
    assert not list((tmp_path / "h").glob("lockfiles/cu130*"))


def lock_project(tmp_path: Path, index, variant: str):
    """`fdlenv lock` of the project's env file (PyPI's torch 2.11.0, cu130) for `variant`."""
    (tmp_path / "envs").mkdir()
    (tmp_path / "envs" / f"{variant}.yml").write_text(cu130_project_env("project-cu130"))
    return fdlenv("lock", "--libtorch", variant, "--envs", "envs", "--mirror", f"pypi={index.simple}",
                  "--out", "conda-lock.yml", "--home", str(tmp_path / "h"), cwd=tmp_path)


@pytest.mark.slow
def test_a_projects_env_file_pinning_pypis_torch_2_11_for_cu130_locks_and_realises_the_same_way(tmp_path, index):
    locked = lock_project(tmp_path, index, "cu130")
    assert locked.returncode == 0, locked.stderr
    text = (tmp_path / "conda-lock.yml").read_text()
    assert "torch-2.11.0-cp312" in text and "nvidia_cuda_runtime-13.0.96" in text   # cuda-toolkit's extras, walked
    assert "cuda_toolkit-" not in text                                             # a metapackage: not kept
    res = fdlenv("env", "realize", "--libtorch", "cu130", "--lock", "conda-lock.yml", "--mirror",
                 f"pypi={index.simple}", "--home", str(tmp_path / "h"), "--json", cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    env = Path(json.loads(res.stdout)["path"])
    site = Path(json.loads(res.stdout)["libtorch_root"]).parent
    assert (site / "torch" / "version.py").read_text() == "__version__ = '2.11.0'\n"
    assert (site / "torch" / "build-version").read_text() == "2.11.0+cu130\n"
    assert (env / "cuda" / "bin" / "nvcc").is_file() and (env / "cuda" / "lib64" / "libcudart_static.a").exists()


@pytest.mark.slow
def test_a_projects_env_file_pinning_pypis_torch_2_11_for_cu128_is_refused_as_the_cuda_13_build(tmp_path, index):
    res = lock_project(tmp_path, index, "cu128")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1, res.stderr
    assert "the CUDA 13.0 build (torch 2.11.0, requiring cuda-toolkit" in errors[0]
    assert not (tmp_path / "conda-lock.yml").exists()


@pytest.mark.slow
def test_detect_on_a_cuda_13_driver_routes_cu128_and_a_baked_cu130_wins(tmp_path, index):
    gpus = json.dumps({"devices": [{"vendor": "nvidia", "arch": "9.0", "name": "H100"}], "driver_cuda": "13.0"})
    env = {"FLODL_TESTING_GPU_JSON": gpus}
    before = fdlenv("detect", "--json", "--home", str(tmp_path / "h"), env=env)
    assert before.returncode == 0, before.stderr
    route_before = json.loads(before.stdout)["auto"]
    assert route_before["variant"] == "cu128" and route_before["candidates"] == ["cu128", "cu130", "cu126"]
    assert realize(tmp_path, index).returncode == 0
    after = fdlenv("detect", "--json", "--home", str(tmp_path / "h"), env=env)
    route_after = json.loads(after.stdout)["auto"]
    assert route_after["variant"] == "cu130" and route_after["routing"]["variant"] == "cu128"
    old = fdlenv("detect", "--json", "--home", str(tmp_path / "h"),
                 env={"FLODL_TESTING_GPU_JSON": gpus.replace('"13.0"', '"12.8"')})
    assert json.loads(old.stdout)["auto"]["variant"] == "cu128"   # a CUDA 12.8 driver: the baked cu130 cannot run


# --- the cu12 envs' CMake story: the note's flags work, Torch's version clash is permanent ---

needs_cmake = pytest.mark.skipif(not shutil.which("cmake"), reason="needs cmake")
HOST_TOOLKIT = next((p for p in sorted(Path("/usr/local").glob("cuda-*")) if (p / "bin" / "nvcc").is_file()), None)
HIDE = ";".join(["/usr/local/bin", "/usr/local/cuda/bin", *(f"{p}/bin" for p in Path("/usr/local").glob("cuda-*"))])
FINDCUDA = ("cmake_minimum_required(VERSION 3.18)\nproject(t CXX)\nfind_package(CUDA REQUIRED)\n"
            'message(STATUS "toolkit=${CUDA_TOOLKIT_ROOT_DIR} nvcc=${CUDA_NVCC_EXECUTABLE}")\n')


@needs_cmake
@pytest.mark.slow
@pytest.mark.skipif(HOST_TOOLKIT is None, reason="needs a CUDA toolkit to hand to the test")
def test_the_cu12_notes_flags_reach_findcuda_where_cuda_home_and_cudatoolkit_root_did_not(tmp_path, index):
    """The toolkit the test provides is a copy by link of this machine's (CUDA_HOME of the env
    stays the env's own, as activation sets it); what the note says reaches Caffe2's FindCUDA."""
    res = fdlenv("env", "realize", "--libtorch", "cu126", "--mirror", f"pytorch={index.url}",
                 "--mirror", f"pypi={index.simple}", "--home", str(tmp_path / "h"), "--json")
    assert res.returncode == 0, res.stderr
    toolkit = tmp_path / "toolkit"
    toolkit.symlink_to(HOST_TOOLKIT)
    (tmp_path / "src").mkdir()
    (tmp_path / "src" / "CMakeLists.txt").write_text(FINDCUDA)
    from fdlenv.source import nvcc

    assert nvcc.FLAGS == "CUDACXX=<toolkit>/bin/nvcc cmake -DCUDA_TOOLKIT_ROOT_DIR=<toolkit> ..."
    user = {"PATH": "/usr/bin:/bin", "CUDA_HOME": str(toolkit)}   # what the old note said: CUDA_HOME at it

    def configure(build: str, *flags: str, **env: str) -> subprocess.CompletedProcess[str]:
        return fdlenv("run", "--libtorch", "cu126", "--home", str(tmp_path / "h"), "--", "cmake", "-S", "src",
                      "-B", build, f"-DCMAKE_IGNORE_PATH={HIDE}", *flags, env={**user, **env}, cwd=tmp_path)

    old = configure("b-old", f"-DCUDAToolkit_ROOT={toolkit}")
    assert old.returncode != 0 and "Specify CUDA_TOOLKIT_ROOT_DIR" in old.stderr   # FindCUDA under REQUIRED
    assert "fdlenv run: CMake builds:" in old.stderr and nvcc.FLAGS in old.stderr   # the note, as CMD is CMake
    assert nvcc.FLAGS.split()[0].split("=")[0] == "CUDACXX"
    new = configure("b-new", f"-DCUDA_TOOLKIT_ROOT_DIR={toolkit}", CUDACXX=str(toolkit / "bin" / "nvcc"))
    assert new.returncode == 0, new.stdout + new.stderr
    assert f"toolkit={toolkit}" in new.stdout and f"nvcc={toolkit}/bin/nvcc" in new.stdout


@needs_cmake
@pytest.mark.slow
def test_run_says_the_note_each_time_its_command_is_cmake_and_never_for_a_toolkit_env(tmp_path, index):
    for variant in ("cu126", "cu130"):
        res = fdlenv("env", "realize", "--libtorch", variant, "--mirror", f"pytorch={index.url}",
                     "--mirror", f"pypi={index.simple}", "--home", str(tmp_path / "h"), "--json")
        assert res.returncode == 0, res.stderr
    hidden = {"CUDACXX": str(tmp_path / "none" / "nvcc"), "PATH": "/usr/bin:/bin", "FDLENV_NO_HOTPATH": ""}

    def said(variant: str, *cmd: str) -> bool:
        res = fdlenv("run", "--libtorch", variant, "--home", str(tmp_path / "h"), "--", *cmd, env=hidden)
        assert res.returncode == 0, res.stderr
        return "CMake builds:" in res.stderr

    assert not said("cu126", "true")   # said once per env already (at its realise)
    assert said("cu126", "cmake", "--version") and said("cu126", "cmake", "--version")   # every time for CMake
    assert not said("cu130", "cmake", "--version") and not said("cu130", "true")   # its own nvcc: nothing to say


TORCH_CLASH = """find_package(CUDA)
message(FATAL_ERROR "FindCUDA says CUDA version is 13.0 (usually determined by nvcc), "
  "but the CUDA headers say the version is 12.8.  This often occurs "
  "when you set both CUDA_HOME and CUDA_NVCC_EXECUTABLE to non-standard locations.")
"""


@needs_cmake
@pytest.mark.parametrize("variant, transient", [("cu128", False), ("cpu", True)])
def test_a_host_toolkit_of_another_cuda_major_that_cmake_took_is_permanent_with_the_note(tmp_path, variant, transient):
    from helpers_source import environ_for, fake_env, write_tree

    from fdlenv.names.home import Home
    from fdlenv.source import build
    from fdlenv.source.build import Recipe

    env = fake_env(tmp_path, variant)
    write_tree(env.libtorch_root / "share/cmake/Torch", {"TorchConfig.cmake": TORCH_CLASH})
    tree = write_tree(tmp_path / "tree", {"CMakeLists.txt": "cmake_minimum_required(VERSION 3.18)\n"
                                          "project(t CXX)\nfind_package(Torch REQUIRED)\n"})
    nvcc13 = tmp_path / "cuda-13.0" / "bin" / "nvcc"
    nvcc13.parent.mkdir(parents=True)
    nvcc13.write_text("#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n")
    nvcc13.chmod(0o755)
    environ = environ_for(env, CMAKE_PREFIX_PATH=str(env.libtorch_root), CUDACXX=str(nvcc13))
    with pytest.raises(Fail) as e:
        build.build(Home(tmp_path / "home"), tree, "d" * 64, env, environ,
                    Recipe('cmake -S . -B "$FDLENV_BUILD_DIR"', "", "build/app", False))
    assert e.value.transient == transient
    if not transient:
        msg = e.value.message
        assert "FindCUDA says CUDA version is" in msg and "another version than the env's CUDA 12.8" in msg
        assert f"found {nvcc13} (CUDA 13.0)" in msg and "-DCUDA_TOOLKIT_ROOT_DIR=<toolkit>" in msg


def test_pack_libtorch_cu130_makes_libtorch_cu130_for_a_cuda_13_driver_with_cuda_13s_archs(tmp_path):
    import zipfile

    from fdlenv.pack.libtorch import PACK_META, pack_libtorch

    src = tmp_path / "libtorch-shared-with-deps-2.10.0+cu130.zip"
    with zipfile.ZipFile(src, "w") as z:
        for name, text in (("libtorch/lib/libtorch.so", "\x7fELF cu130"), ("libtorch/build-version", "2.10.0+cu130\n"),
                           ("libtorch/share/cmake/Torch/TorchConfig.cmake", "set(TORCH_FOUND 1)\n")):
            z.writestr(name, text)
    packed = pack_libtorch("13.0", str(src), tmp_path / "channel")
    assert (packed.package, packed.version, packed.variant) == ("libtorch-cu130", "2.10.0", "cu130")
    record = json.loads((tmp_path / "channel" / "linux-64" / "repodata.json").read_text())["packages.conda"]
    assert "__cuda >=13.0" in record[packed.path.name]["depends"]
    from rattler.package_streaming import extract

    extract(packed.path, tmp_path / "x")
    meta = json.loads((tmp_path / "x" / "libtorch" / PACK_META).read_text())
    assert (meta["cuda"], meta["archs"]) == ("13.0", ["7.5", "8.0", "8.6", "9.0", "10.0", "12.0"])
