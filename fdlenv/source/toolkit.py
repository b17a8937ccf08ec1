"""What this host lacks, said as the line that installs it.

Two uses: a missing host tool (rsync, git, cargo) and the one failure class
upgrade of the build step: a GPU build that fails while that vendor's toolkit
headers are missing is permanent, because retrying cannot install them. A
header counts as present under a toolkit include dir (the host toolkit root,
or the variant's env), `/usr/include`, `/usr/local/include`, or when the C++
compiler can preprocess `#include <h>`. Classed at failure time only: fdlenv
cannot know whether a recipe needed the toolkit.

The host nvcc, in order: `host_nvcc` finds it (`$CUDACXX` alone when set, as CMake
reads it; else nvcc on PATH; else `/usr/local/cuda/bin/nvcc`), `cmake_toolkit_note`
says when a CUDA env's CMake/Torch builds will not find one of its CUDA major (no
CUDA 12 nvcc ships as a wheel), `note_once` shows that note once per env (a marker
under the home's cache; a read-only home shows it every time), and
`cmake_cuda_gap` reads a failed build's output for CMake's own words for the same
gap (Caffe2's and FindCUDA's), which makes the failure permanent.
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
    """The host's nvcc and the CUDA release it reports ("13.0"), or None when there is none:
    `$CUDACXX` when set (CMake's own choice; an empty dir's path hides every toolkit, as the
    tests do), else nvcc on PATH, else /usr/local/cuda/bin/nvcc."""
    import os

    cand = environ.get("CUDACXX") or _on_path("nvcc", environ.get("PATH")) or "/usr/local/cuda/bin/nvcc"
    if not os.path.isfile(cand):
        return None
    if cand not in _RELEASES:   # asked once per process (detect's line and its note share it)
        release = _header_release(_wrapped(cand))
        if release is None:     # no cuda.h beside it: ask nvcc itself (10-30 ms)
            import re
            import subprocess

            try:
                out = subprocess.run([cand, "--version"], capture_output=True, text=True, timeout=30).stdout
            except (OSError, subprocess.SubprocessError):
                out = ""
            m = re.search(r"release (\d+\.\d+)", out)
            release = m.group(1) if m else None
        _RELEASES[cand] = release
    return cand, _RELEASES[cand]


def _on_path(name: str, path: str | None) -> str | None:
    """shutil.which for an executable `name` on `path` (os.defpath when None), without its import."""
    import os

    for d in (os.defpath if path is None else path).split(os.pathsep):
        f = os.path.join(d or ".", name)
        if os.path.isfile(f) and os.access(f, os.X_OK):
            return f
    return None


def _wrapped(nvcc: str) -> str:
    """The nvcc a small wrapper script execs (`exec /usr/local/cuda-13.0/bin/nvcc "$@"`, as
    alternatives and images install it), else `nvcc` itself."""
    try:
        with open(nvcc, "rb") as f:
            head = f.read(4097)
    except OSError:
        return nvcc
    if not head.startswith(b"#!") or len(head) > 4096:
        return nvcc
    for word in head.replace(b'"', b" ").replace(b"'", b" ").split():
        if word.startswith(b"/") and word.endswith(b"/bin/nvcc"):
            return word.decode("utf-8", "replace")
    return nvcc


def _header_release(nvcc: str) -> str | None:
    """The release of the toolkit `nvcc` belongs to, from its `include/cuda.h`'s CUDA_VERSION
    (13000 -> "13.0"), read instead of running nvcc; None when there is no such header."""
    import os

    header = os.path.join(os.path.dirname(os.path.dirname(os.path.realpath(nvcc))), "include", "cuda.h")
    try:
        with open(header, "rb") as f:
            head = f.read(1 << 16)
    except OSError:
        return None
    for line in head.splitlines():
        words = line.split()
        if words[:2] == [b"#define", b"CUDA_VERSION"] and len(words) > 2 and words[2].isdigit():
            n = int(words[2])
            return f"{n // 1000}.{n % 1000 // 10}"
    return None


_RELEASES: dict[str, str | None] = {}


def _has(found: tuple[str, str | None] | None) -> str:
    return f"found {found[0]} (CUDA {found[1] or 'unknown'})" if found else "none found"


def toolkit_advice(cuda: str, found: tuple[str, str | None] | None) -> str:
    """What a CMake user of a CUDA `cuda` env needs, and what a cargo user gets instead."""
    major = cuda.split(".")[0]
    pkg = f" (NVIDIA's package cuda-toolkit-{cuda.replace('.', '-')})" if "." in cuda else ""
    return (f"CMake builds: PyTorch's Torch config needs nvcc for a CUDA libtorch, and PyPI's CUDA {major} "
            f"wheels ship no nvcc (only ptxas, nvvm and the crt headers), so `find_package(Torch)` in a "
            f"CUDA {cuda} env needs a host CUDA {major}.x toolkit ({_has(found)}): install the CUDA {major}.x "
            f"toolkit{pkg} on the host or in the image and point CUDAToolkit_ROOT (or CUDA_HOME) at it; cargo "
            f"builds (flodl-sys's `cuda` feature) need no nvcc, only the env's CUDA_HOME (docs/CUDA.md)")


def cmake_toolkit_note(cuda: str, environ: dict) -> str | None:
    """A note when CMake's Torch config would not find a host nvcc of the env's CUDA major."""
    found = host_nvcc(environ)
    if found and found[1] and found[1].split(".")[0] == cuda.split(".")[0]:
        return None
    return toolkit_advice(cuda, found)


def note_once(home, env, environ: dict) -> str | None:
    """`cmake_toolkit_note` for `env` (key, path, variant) the first time it applies, else None
    (also for a variant without CUDA). Shown is remembered in `<home>/cache/notes/` (not in the
    env: its files are verified), keyed by the env's key and path; where that cannot be written
    the note is given every time."""
    from .. import variants

    v = env.variant if isinstance(env.variant, variants.Variant) else variants.VARIANTS.get(env.variant)
    cuda = v.cuda if v is not None else None
    if not cuda:
        return None
    from .. import hashing

    tag = hashing.of_text(str(Path(env.path).absolute()))[:12]
    marker = Path(home.cache) / "notes" / f"cmake-toolkit-{env.key}-{tag}"
    if marker.exists():
        return None
    note = cmake_toolkit_note(cuda, environ)
    if note is not None:
        from .. import atomic

        try:
            atomic.write_text(marker, note + "\n", durable=False)
        except OSError:
            pass   # a read-only home: said again next time
    return note


# CMake's words when a CUDA libtorch's config finds no CUDA toolkit: Caffe2's (TorchConfig ->
# Caffe2Config -> public/cuda.cmake), FindCUDA's, FindCUDAToolkit's, enable_language(CUDA)'s.
CMAKE_CUDA_SIGNS = (
    "Your installed Caffe2 version uses CUDA but I cannot find the CUDA libraries",
    "Could NOT find CUDA",
    "CUDA_TOOLKIT_ROOT_DIR not found",
    "Specify CUDA_TOOLKIT_ROOT_DIR",   # FindCUDA under REQUIRED
    "PyTorch: CUDA was explicitly requested",
    "Failed to find nvcc",
    "No CMAKE_CUDA_COMPILER could be found",
)


def cmake_cuda_gap(output: str, cuda: str, environ: dict) -> str | None:
    """The permanent failure's text when a failed build's `output` shows CMake finding no CUDA
    toolkit for a CUDA `cuda` env (retrying cannot install one), else None. CMake wraps its
    messages, so whitespace is folded first; `CUDA_NVCC_EXECUTABLE` counts with a NOTFOUND."""
    flat = " ".join(output.split())
    hit = next((s for s in CMAKE_CUDA_SIGNS if s in flat), None)
    if hit is None and "CUDA_NVCC_EXECUTABLE" in flat and "NOTFOUND" in flat:
        hit = "CUDA_NVCC_EXECUTABLE NOTFOUND"
    if hit is None:
        return None
    found = host_nvcc(environ)
    said = f"CMake found no CUDA toolkit (`{hit}`)"
    if found and found[1] and found[1].split(".")[0] == cuda.split(".")[0]:
        return (f"{said}, though {found[0]} is CUDA {found[1]}: the env's CUDA_HOME holds no nvcc, so "
                "point the recipe's CMake at the host toolkit (-DCUDAToolkit_ROOT=<toolkit>, "
                "-DCUDA_TOOLKIT_ROOT_DIR=<toolkit>, or CUDACXX=<toolkit>/bin/nvcc; docs/CUDA.md)")
    return f"{said}; " + toolkit_advice(cuda, found)
