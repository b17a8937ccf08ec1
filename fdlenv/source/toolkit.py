"""What this host lacks, said as the line that installs it.

Two uses: a missing host tool (rsync, git, cargo) and the one failure class
upgrade of the build step: a GPU build that fails while that vendor's toolkit
headers are missing is permanent, because retrying cannot install them. A
header counts as present under a toolkit include dir (the host toolkit root,
or the variant's env), `/usr/include`, `/usr/local/include`, or when the C++
compiler can preprocess `#include <h>`. Classed at failure time only: fdlenv
cannot know whether a recipe needed the toolkit.

The host nvcc and CMake's words for its absence are `source/nvcc.py`.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

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


def _compiler_has(header: str, include_dirs: list[Path], environ: Mapping[str, str]) -> bool:
    import subprocess  # only after a failed build

    cmd = [environ.get("CXX") or "c++", "-E", "-x", "c++", "-"]
    cmd += [f"-I{d}" for d in include_dirs]
    try:
        return subprocess.run(cmd, input=f"#include <{header}>\n".encode(), env=environ,
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL).returncode == 0
    except OSError:
        return False  # no compiler: unanswerable, kept as missing


def toolkit_root(vendor: str, environ: Mapping[str, str]) -> Path:
    if vendor == "nvidia":
        return Path(environ.get("CUDA_HOME") or "/usr/local/cuda")
    return Path(environ.get("ROCM_PATH") or "/opt/rocm")


def missing_headers(vendor: str, include_dirs: list[Path], environ: Mapping[str, str]) -> dict[str, str]:
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
