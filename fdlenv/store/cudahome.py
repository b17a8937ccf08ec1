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

A whole toolkit (CUDA 13's wheels, which share `nvidia/cu13/{bin,include,lib,nvvm}` and ship
nvcc, cicc and cudart's static libs) gets what nvcc and CMake look for beside that: `bin/`
(each tool linked: nvcc takes the directory it was started from, the link's, as `_HERE_`
and reads `nvcc.profile` there, so TOP is `cuda/`, and `-L$(TOP)/lib64` finds the links
here), `nvvm/` (cicc, libdevice), the static archives in `lib64/` (`libcudart_static.a`,
`libcudadevrt.a`: CMake's CUDA link wants them there, not in the wheels' `lib/`) and
`version.json` (the one real file, its content in the layout: `FILE` + the text), which
CMake's FindCUDAToolkit reads. A cu12 env (no nvcc in any wheel) keeps its layout as before.

In order: `plan` reads the wheels' listings into the layout (each path: a
directory, or a symlink's relative target), which depends only on their names;
`assemble` hard-links the layout's symlinks from a template built once per
layout in the package cache (`pkgs/cudahome-<digest of the layout>`): making a
symlink costs this file system as much as a directory (0.3-0.5 ms, 269 of
them), linking one a fiftieth of that. `env gc` keeps the template while a kept
env's `cuda/` links it (`store.gc.linked_templates`) and drops it once none does;
the next realise then builds it again.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

DIRNAME = "cuda"
FILE = "\0"   # a layout value starting with it is a real file's text, not a symlink's target
_VERSIONED = re.compile(r"^(lib[^/]+?\.so)\.\d+(\.\d+)*$")


def assemble(prefix: Path, libtorch_root: Path, templates: Path | None = None) -> Path | None:
    """Make `<prefix>/cuda` from the nvidia wheels beside `libtorch_root`; None when there are
    none. `templates`: the package cache, where the layout's template is kept (None: the
    symlinks are made in place)."""
    layout = plan(prefix, libtorch_root)
    if not layout:
        return None
    home = prefix / DIRNAME
    source = _template(templates, layout) if templates is not None else None
    home.mkdir()
    for rel, text in layout.items():
        if text is None:
            (home / rel).mkdir()
        elif source is not None:
            os.link(source / rel, home / rel, follow_symlinks=False)
        else:
            _make(home / rel, text)
    return home


def _make(path: Path, text: str) -> None:
    """One non-directory entry of the layout: a symlink, or (`FILE`) a real file."""
    if text.startswith(FILE):
        path.write_text(text[len(FILE):])
    else:
        os.symlink(text, path)


def plan(prefix: Path, libtorch_root: Path) -> dict[str, str | None]:
    """The layout of `<prefix>/cuda`, in the order it is made: relative path -> the symlink's
    target relative to it, or None for a real directory. Empty without nvidia wheels."""
    nvidia = libtorch_root.parent / "nvidia"
    wheels = sorted(d for d in nvidia.iterdir() if d.is_dir()) if nvidia.is_dir() else []
    if not wheels:
        return {}
    home = prefix / DIRNAME
    toolkit = any((w / "bin" / "nvcc").is_file() for w in wheels)   # a whole toolkit (CUDA 13's wheels)
    at: dict[str, Path | None] = {"include": None, "lib64": None}    # None: a directory
    if toolkit:
        at["bin"] = None
    for w in wheels:
        if (w / "include").is_dir():
            _merge(w / "include", "include", at)
    for w in wheels:
        libdir = w / "lib"
        for so in sorted(libdir.iterdir()) if libdir.is_dir() else ():
            wanted = ".so" in so.name or (toolkit and so.name.endswith(".a"))
            if wanted and f"lib64/{so.name}" not in at:
                at[f"lib64/{so.name}"] = so
        if toolkit:
            for tool in sorted((w / "bin").iterdir()) if (w / "bin").is_dir() else ():
                at.setdefault(f"bin/{tool.name}", tool)
            if (w / "nvvm").is_dir():
                at.setdefault("nvvm", w / "nvvm")
    layout = {rel: None if src is None else os.path.relpath(src, (home / rel).parent) for rel, src in at.items()}
    for rel in sorted(r for r in layout if r.startswith("lib64/")):
        m = _VERSIONED.match(rel[len("lib64/"):])
        if m and f"lib64/{m.group(1)}" not in layout:
            layout[f"lib64/{m.group(1)}"] = rel[len("lib64/"):]   # libcudart.so -> libcudart.so.12
    if toolkit:
        layout["version.json"] = FILE + _version_json(libtorch_root.parent)
    return layout


def _version_json(site: Path) -> str:
    """A toolkit's `version.json`, as NVIDIA's installer writes it, from the versions of the
    env's `nvidia-cuda-*` wheels (their dist-info names); `cuda` is nvcc's."""
    import json

    parts: dict[str, dict[str, str]] = {}
    for info in sorted(site.glob("nvidia_*.dist-info")):
        name, _, version = info.name[:-len(".dist-info")].partition("-")
        parts[name.removeprefix("nvidia_")] = {"name": name.replace("_", "-"), "version": version}
    nvcc = parts.get("cuda_nvcc", {}).get("version", "")
    return json.dumps({"cuda": {"name": "CUDA SDK", "version": nvcc}, **parts}, indent=3, sort_keys=True) + "\n"


_NOT_HEADERS = {"__init__.py", "__pycache__"}   # the wheels' Python package markers


def _merge(src: Path, rel: str, at: dict[str, Path | None]) -> None:
    """Add `src`'s entries under the directory `rel` of the layout, merging directories: one
    that two wheels share becomes a real directory holding both."""
    for entry in sorted(src.iterdir()):
        if entry.name in _NOT_HEADERS:
            continue
        here = f"{rel}/{entry.name}"
        if here not in at:
            at[here] = entry
        elif entry.is_dir() and ((first := at[here]) is None or first.is_dir()):
            if first is not None:   # so far a link to the first wheel's directory: make it real
                at[here] = None
                _merge(first, here, at)
            _merge(entry, here, at)


def _template(templates: Path, layout: dict[str, str | None]) -> Path | None:
    """The layout's symlinks made once in `templates/cudahome-<digest>`, published by rename;
    None when the cache cannot hold one (the env's symlinks are then made in place)."""
    from ..base.hashing import of_text

    digest = of_text("".join(f"{rel}\0{text or ''}\n" for rel, text in layout.items()))[:32]
    final = templates / f"cudahome-{digest}"
    if (final / ".complete").is_file():
        return final
    import shutil   # only to make one: a second env of the same layout links the one made
    tmp = templates / f".cudahome-{digest}.{os.getpid()}"
    try:
        shutil.rmtree(tmp, ignore_errors=True)
        tmp.mkdir(parents=True)
        for rel, text in layout.items():
            (tmp / rel).mkdir() if text is None else _make(tmp / rel, text)
        (tmp / ".complete").write_text("")
        try:
            os.rename(tmp, final)
        except OSError:     # another realise published it first, or a half one sits there
            if not (final / ".complete").is_file():
                return None
        return final
    except OSError:
        return None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
