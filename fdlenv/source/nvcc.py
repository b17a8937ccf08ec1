"""The host's nvcc, and what a CUDA env's CMake build needs of it.

No CUDA 12 nvcc ships as a wheel (PyPI's nvidia-cuda-nvcc-cu12 holds only ptxas, nvvm and
the crt headers; docs/CUDA.md), so a cu126/cu128 env carries none and CMake's Torch config
wants the host's; CUDA 13's wheels do ship nvcc, and a cu130 env is a whole toolkit
(`store.cudahome`: `cuda/bin/nvcc`, CUDACXX), which needs no note. In order: `host_nvcc`
finds it (`$CUDACXX` alone when set, as CMake reads it; else nvcc on PATH; else
`/usr/local/cuda/bin/nvcc`) and its release, from the toolkit's `include/cuda.h` (through a
wrapper script too) before running it; `cmake_toolkit_note` says when a CUDA env's CMake
builds will not find one of its CUDA major, naming the flags that work (CUDACXX and FindCUDA's
CUDA_TOOLKIT_ROOT_DIR: activation sets CUDA_HOME to the env's own, so pointing CUDA_HOME or
CUDAToolkit_ROOT at a toolkit does not reach Caffe2's FindCUDA); `note_once` shows that note
once per env (a marker under the home's cache; a read-only home shows it every time), and
every time the command is CMake (`runs_cmake`: `run` and `shell-hook` say it then too);
`cmake_cuda_gap` reads a failed build's output for CMake's own words for the same gap
(Caffe2's, FindCUDA's, and Torch's "FindCUDA says CUDA version is ..." when a host toolkit of
another CUDA major is the one CMake found), which makes the failure permanent. Imports only
os: `detect` asks it on any box.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path
    from typing import Protocol

    from ..names.home import Home
    from ..names.variants import Variant

    class BuildEnv(Protocol):
        """What a build keys on and runs in, and what `note_once` reads of it: an fdlenv env
        (`store.env.Env`), flodl's own libtorch (`store.active.OwnLibtorch`), or none settled;
        source never imports the store (`build` takes this one from here)."""

        @property
        def spec(self) -> Variant: ...
        @property
        def key(self) -> str: ...
        @property
        def path(self) -> Path: ...


def host_nvcc(environ: Mapping[str, str]) -> tuple[str, str | None] | None:
    """The host's nvcc and the CUDA release it reports ("13.0"), or None when there is none:
    `$CUDACXX` when set (CMake's own choice; an empty dir's path hides every toolkit, as the
    tests do), else nvcc on PATH, else /usr/local/cuda/bin/nvcc."""
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


FLAGS = "CUDACXX=<toolkit>/bin/nvcc cmake -DCUDA_TOOLKIT_ROOT_DIR=<toolkit> ..."   # what reaches FindCUDA


def toolkit_advice(cuda: str, found: tuple[str, str | None] | None) -> str:
    """What a CMake user of a CUDA `cuda` env needs, and what a cargo user gets instead."""
    major = cuda.split(".")[0]
    if major.isdigit() and int(major) >= 13:   # CUDA 13's wheels ship nvcc: the env's file lacks them
        return (f"CMake builds: a CUDA {cuda} env is its own toolkit when its env file adds CUDA {major}'s "
                f"toolkit wheels at the runtime's version (nvidia-cuda-nvcc, nvidia-cuda-crt, nvidia-nvvm, "
                f"nvidia-cuda-cccl, as fdlenv's envs/cu130.yml does); this env has no nvcc ({_has(found)} on "
                f"the host): add them and lock again (docs/LOCK.md), or point CMake at a host CUDA {major}.x "
                f"toolkit with `{FLAGS}`")
    pkg = f" (NVIDIA's package cuda-toolkit-{cuda.replace('.', '-')})" if "." in cuda else ""
    return (f"CMake builds: PyTorch's Torch config needs nvcc for a CUDA libtorch, and PyPI's CUDA {major} "
            f"wheels ship no nvcc (only ptxas, nvvm and the crt headers), so `find_package(Torch)` in a "
            f"CUDA {cuda} env needs a host CUDA {major}.x toolkit ({_has(found)}): install the CUDA {major}.x "
            f"toolkit{pkg} on the host or in the image and point CMake at it with `{FLAGS}` (CUDA_HOME is "
            f"the env's own); cargo builds (flodl-sys's `cuda` feature) need no nvcc, only the env's "
            f"CUDA_HOME (docs/CUDA.md)")


def _of_major(found: tuple[str, str | None] | None, cuda: str) -> bool:
    """Whether the nvcc `host_nvcc` found is of the CUDA major of `cuda` ("12.8")."""
    return bool(found and found[1] and found[1].split(".")[0] == cuda.split(".")[0])


def own_toolkit(env_path: str) -> bool:
    """Whether the env at `env_path` is its own CUDA toolkit (`store.cudahome`: `cuda/bin/nvcc`)."""
    return os.path.isfile(os.path.join(env_path, "cuda", "bin", "nvcc"))


def runs_cmake(argv: list[str] | tuple[str, ...]) -> bool:
    """Whether a command line starts CMake (`cmake`, `ccmake`, `cmake3`, by path too)."""
    words = [w for w in argv if w != "--"][:1]
    return bool(words) and os.path.basename(words[0]) in ("cmake", "ccmake", "cmake3")


def cmake_toolkit_note(cuda: str, environ: Mapping[str, str]) -> str | None:
    """A note when CMake's Torch config would not find a host nvcc of the env's CUDA major."""
    found = host_nvcc(environ)
    return None if _of_major(found, cuda) else toolkit_advice(cuda, found)


def note_once(home: Home, env: BuildEnv, environ: Mapping[str, str], always: bool = False) -> str | None:
    """`cmake_toolkit_note` for `env` (key, path, spec) the first time it applies, or every time
    with `always` (the command is CMake: `runs_cmake`), else None (also for a variant without
    CUDA, and for an env that is its own toolkit). Shown is remembered in `<home>/cache/notes/`
    (not in the env: its files are verified), keyed by the env's key and path; where that cannot
    be written the note is given every time."""
    cuda = env.spec.cuda
    if not cuda or own_toolkit(str(env.path)):
        return None
    from ..base import hashing

    tag = hashing.of_text(os.path.abspath(env.path))[:12]
    marker = str(home.notes(f"cmake-toolkit-{env.key}-{tag}"))
    if os.path.exists(marker) and not always:
        return None
    note = cmake_toolkit_note(cuda, environ)
    if note is not None:
        from ..base import atomic

        try:
            from pathlib import Path

            atomic.write_text(Path(marker), note + "\n", durable=False)
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
    "FindCUDA says CUDA version is",   # Torch's public/cuda.cmake: a host toolkit of another CUDA
    "Found two conflicting CUDA versions",   # ... and its nvcc against FindCUDAToolkit's headers
)


def cmake_cuda_gap(output: str, cuda: str, environ: Mapping[str, str]) -> str | None:
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
    home = environ.get("CUDA_HOME") or ""
    if found is not None and home and own_toolkit(os.path.dirname(home)) \
            and os.path.abspath(found[0]).startswith(os.path.join(os.path.abspath(home), "")):
        return (f"{said}, though the env is its own CUDA {found[1] or cuda} toolkit ({home}; CUDACXX and "
                "CUDAToolkit_ROOT name it): a recipe that points CMake elsewhere (-DCUDAToolkit_ROOT, "
                "-DCUDA_TOOLKIT_ROOT_DIR, CUDACXX, CUDA_HOME) or a host toolkit on its paths wins over it; "
                "docs/CUDA.md")
    if hit.startswith(("FindCUDA says", "Found two conflicting")):   # CMake took a host toolkit of another CUDA major
        return (f"CMake's FindCUDA took a CUDA toolkit of another version than the env's CUDA {cuda} "
                f"(`{hit} ...`: its nvcc and the env's headers disagree); " + toolkit_advice(cuda, found))
    if found is not None and _of_major(found, cuda):
        return (f"{said}, though {found[0]} is CUDA {found[1]}: the env's CUDA_HOME holds no nvcc, so "
                f"point the recipe's CMake at the host toolkit: `{FLAGS}` (docs/CUDA.md)")
    return f"{said}; " + toolkit_advice(cuda, found)
