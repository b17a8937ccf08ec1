"""A CUDA_HOME inside every NVIDIA env, assembled from its own nvidia wheels.

flodl-sys's `build.rs` (and most CUDA C++ builds) include `$CUDA_HOME/include`
and link `-lcudart -lnccl ...` from `$CUDA_HOME/lib64`. An env realised from
PyTorch's wheels holds every CUDA library and header it needs, split over
`<site-packages>/nvidia/<lib>/{include,lib}` (the header-only pieces a host
compiler needs for ATen's CUDA headers, `crt/` and `nv/`/`cuda/std`, come from
the locked `nvidia-cuda-nvcc-cu12` and `nvidia-cuda-cccl-cu12` wheels). So a
box with nothing but the NVIDIA driver builds and runs flodl's `cuda` feature
from the env alone; a host toolkit is never mixed in (activation points
CUDA_HOME here, never at /usr/local/cuda).

Layout, made once at realise time, before the env is published (so the env
stays immutable): `<prefix>/cuda/include/` merges every wheel's `include/`
(directories present in several wheels become real directories, each file a
relative symlink; the first wheel in name order wins a clash), and
`<prefix>/cuda/lib64/` links every shared library, plus the unversioned name
a linker asks for (`libcudart.so` -> `libcudart.so.12`) where no wheel ships
one. Relative links: a moved home keeps working.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DIRNAME = "cuda"
_VERSIONED = re.compile(r"^(lib[^/]+?\.so)\.\d+(\.\d+)*$")


def assemble(prefix: Path, libtorch_root: Path) -> Path | None:
    """Make `<prefix>/cuda` from the nvidia wheels beside `libtorch_root`; None when there are none."""
    nvidia = libtorch_root.parent / "nvidia"
    wheels = sorted(d for d in nvidia.iterdir() if d.is_dir()) if nvidia.is_dir() else []
    if not wheels:
        return None
    home = prefix / DIRNAME
    include, lib64 = home / "include", home / "lib64"
    include.mkdir(parents=True)
    lib64.mkdir()
    for w in wheels:
        if (w / "include").is_dir():
            _merge(w / "include", include)
    for w in wheels:
        libdir = w / "lib"
        if not libdir.is_dir():
            continue
        for so in sorted(libdir.iterdir()):
            if ".so" in so.name and not (lib64 / so.name).exists():
                _link(so, lib64 / so.name)
    for so in sorted(lib64.iterdir()):
        m = _VERSIONED.match(so.name)
        if m and not os.path.lexists(lib64 / m.group(1)):
            os.symlink(so.name, lib64 / m.group(1))   # libcudart.so -> libcudart.so.12
    return home


def _link(target: Path, link: Path) -> None:
    os.symlink(os.path.relpath(target, link.parent), link)


_NOT_HEADERS = {"__init__.py", "__pycache__"}   # the wheels' Python package markers


def _merge(src: Path, dst: Path) -> None:
    """Link `src`'s entries into the real directory `dst`, merging directories."""
    for entry in sorted(src.iterdir()):
        if entry.name in _NOT_HEADERS:
            continue
        here = dst / entry.name
        if not os.path.lexists(here):
            _link(entry, here)
        elif entry.is_dir() and here.is_dir():
            if here.is_symlink():   # a directory two wheels share: make it real, relink both
                first = Path(os.path.realpath(here))
                here.unlink()
                here.mkdir()
                _merge(first, here)
            _merge(entry, here)
