"""What this host lacks, said as the line that installs it.

Two uses: a missing host tool (rsync, git, cargo) and the one failure class
upgrade of the build step: a GPU build that fails while that vendor's toolkit
headers are missing is permanent, because retrying cannot install them. A
header counts as present under a toolkit include dir (the host toolkit root,
or the variant's env), `/usr/include`, `/usr/local/include`, or when the C++
compiler can preprocess `#include <h>`. Classed at failure time only: fdlenv
cannot know whether a recipe needed the toolkit.
"""

from __future__ import annotations

from pathlib import Path

CUDA_HEADERS = {
    "cuda_runtime.h": "cuda-toolkit",
    "crt/host_config.h": "cuda-toolkit",
    "cublas_v2.h": "cuda-toolkit",
    "cusolverDn.h": "cuda-toolkit",
    "cusparse.h": "cuda-toolkit",
    "nccl.h": "libnccl-dev",
}
ROCM_HEADERS = {
    "hip/hip_runtime.h": "hip-dev",
    "rccl/rccl.h": "rccl-dev",
    "hipblas/hipblas.h": "hipblas-dev",
    "hipblas-common/hipblas-common.h": "hipblas-common-dev",
    "hipblaslt/hipblaslt.h": "hipblaslt-dev",
    "hipsolver/hipsolver.h": "hipsolver-dev",
    "hipsparse/hipsparse.h": "hipsparse-dev",
}


def _os_release() -> dict[str, str]:
    try:
        lines = Path("/etc/os-release").read_text().splitlines()
    except OSError:
        return {}
    pairs = (line.split("=", 1) for line in lines if "=" in line)
    return {k: v.strip().strip('"') for k, v in pairs}


def _rpm(name: str) -> str:
    """Debian package name -> its RHEL spelling."""
    name = name.replace("-dev-", "-devel-")
    name = name + "el" if name.endswith("-dev") else name
    return {"g++": "gcc-c++", "sshfs": "fuse-sshfs"}.get(name, name)


def install_hint(packages: list[str], os_release: dict[str, str] | None = None) -> str:
    """`apt-get install …` / `dnf install …` in this platform's spelling."""
    if not packages:
        return ""
    rel = _os_release() if os_release is None else os_release
    family = f"{rel.get('ID', '')} {rel.get('ID_LIKE', '')}"
    if any(d in family for d in ("rhel", "fedora", "centos")):
        return "install with: dnf install " + " ".join(_rpm(p) for p in packages)
    if any(d in family for d in ("debian", "ubuntu")):
        return "install with: apt-get install " + " ".join(packages)
    return "install " + ", ".join(packages) + " with your package manager"


def _compiler_has(header: str, include_dirs: list[Path], environ: dict) -> bool:
    import subprocess  # only after a failed build

    cmd = [environ.get("CXX") or "c++", "-E", "-x", "c++", "-"]
    cmd += [f"-I{d}" for d in include_dirs]
    try:
        return subprocess.run(cmd, input=f"#include <{header}>\n".encode(), env=environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False  # no compiler: unanswerable, kept as missing


def toolkit_root(vendor: str, environ: dict) -> Path:
    if vendor == "nvidia":
        return Path(environ.get("CUDA_HOME") or "/usr/local/cuda")
    return Path(environ.get("ROCM_PATH") or "/opt/rocm")


def missing_headers(vendor: str, include_dirs: list[Path], environ: dict) -> dict[str, str]:
    """Vendor headers found nowhere, mapped to the package that ships each."""
    table = {"nvidia": CUDA_HEADERS, "amd": ROCM_HEADERS}.get(vendor, {})
    dirs = list(include_dirs) + [Path("/usr/include"), Path("/usr/local/include")]
    return {h: pkg for h, pkg in table.items()
            if not any((d / h).is_file() for d in dirs)
            and not _compiler_has(h, include_dirs, environ)}


def gap_message(vendor: str, root: Path, missing: dict[str, str]) -> str:
    feature = {"nvidia": "cuda", "amd": "rocm"}[vendor]
    pkgs = list(dict.fromkeys(missing.values()))
    return (f"the `{feature}` build needs the {vendor.upper()} toolkit headers, and "
            f"{', '.join(missing)} are missing (toolkit root {root}, and the env's include dirs); "
            f"{install_hint(pkgs)}")


def host_nvcc(environ: dict) -> tuple[str, str | None] | None:
    """The host's nvcc (`$CUDACXX`, else nvcc on PATH, else /usr/local/cuda/bin/nvcc) and the CUDA
    release it reports ("13.0"), or None when there is none. No CUDA 12 nvcc exists as a wheel, so
    an env cannot carry one: PyTorch's Torch CMake config (which insists on nvcc for a CUDA
    libtorch) needs a host toolkit of the env's CUDA major; cargo builds do not."""
    import re
    import shutil
    import subprocess

    cand = environ.get("CUDACXX") or shutil.which("nvcc", path=environ.get("PATH")) or "/usr/local/cuda/bin/nvcc"
    if not Path(cand).is_file():
        return None
    try:
        out = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=30).stdout
    except (OSError, subprocess.SubprocessError):
        return cand, None
    m = re.search(r"release (\d+\.\d+)", out)
    return cand, m.group(1) if m else None


def cmake_toolkit_note(cuda: str, environ: dict) -> str | None:
    """A note when CMake's Torch config would not find a host nvcc of the env's CUDA major."""
    found = host_nvcc(environ)
    if found and found[1] and found[1].split(".")[0] == cuda.split(".")[0]:
        return None
    have = f"found {found[0]} (CUDA {found[1] or 'unknown'})" if found else "none found"
    return (f"CMake builds: PyTorch's Torch config needs nvcc for a CUDA libtorch, and no CUDA {cuda} nvcc "
            f"ships as a wheel, so `find_package(Torch)` for CUDA needs a host CUDA {cuda.split('.')[0]}.x "
            f"toolkit ({have}); cargo builds (flodl's `cuda` feature) need only the env's CUDA_HOME")
