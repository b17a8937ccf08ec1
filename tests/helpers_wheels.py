"""Test helpers for wheel variants: a local PEP 503 index of small wheels shaped like PyTorch's.

`make_index` writes real wheels (zip, METADATA with Requires-Dist, WHEEL tags,
RECORD) and a PEP 503 `simple` tree (`<root>/<project>/index.html` whose links
carry `#sha256=`), so pip resolves against it and the store looks files up in
it exactly as it would on a remote index. The shape mirrors torch 2.10's:
- `torch` (cp312-cp312-manylinux): torch/lib, include, share/cmake; requires
  native runtime wheels, Python-only packages, a Python extension and an extra;
- `nvidia-fake-cu12` / `nvidia-dep-cu12` (py3-none-manylinux): native libs
  under nvidia/<lib>/lib, the first requiring the second;
- `cuda-meta-fake[rt]` (none-any, as torch 2.11's `cuda-toolkit[...]`): not
  kept, but its `rt` extra requires the native `nvidia-rt-fake`, which is;
  its `other` extra (not asked for) requires `nvidia-unused-fake`, which is not;
- `sympy-fake` (none-any, requiring `mpmath-fake`) and `triton-fake`
  (cp312-cp312, a Python extension): not libtorch, not kept.
"""

from __future__ import annotations

import hashlib
import html
import io
from pathlib import Path

from helpers_conda import make_wheel, write_env

TORCH_TAG = "cp312-cp312-manylinux_2_28_x86_64"
NATIVE_TAG = "py3-none-manylinux2014_x86_64"
CLOSURE = {"torch", "nvidia-fake-cu12", "nvidia-dep-cu12", "nvidia-rt-fake"}


def torch_files(label: str) -> dict:
    return {"lib/libtorch.so": f"libtorch {label}", "lib/libc10.so": "c10",
            "include/torch/torch.h": "// torch", "share/cmake/Torch/TorchConfig.cmake": "# cmake",
            "__init__.py": "", "version.py": f"__version__ = {label!r}\n"}


def make_wheels(directory: Path, version: str = "2.10.0", label: str = "cu128") -> list[Path]:
    return [
        make_wheel(directory, "torch", version, torch_files(label), tag=TORCH_TAG, requires=(
            'nvidia-fake-cu12==1.0; platform_system == "Linux"', "sympy-fake>=1", "triton-fake==3.0",
            'cuda-meta-fake[rt]==1.0; platform_system == "Linux"',
            'optree-fake>=0.13; extra == "optree"', 'winonly-fake; sys_platform == "win32"')),
        make_wheel(directory, "nvidia-fake-cu12", "1.0", {"__init__.py": "", "fake/lib/libfake.so.12": "fake"},
                   tag=NATIVE_TAG, requires=("nvidia-dep-cu12>=2",), top="nvidia"),
        make_wheel(directory, "nvidia-dep-cu12", "2.1", {"__init__.py": "", "dep/lib/libdep.so.2": "dep"},
                   tag="py3-none-manylinux_2_17_x86_64", top="nvidia"),
        make_wheel(directory, "sympy-fake", "1.5", requires=("mpmath-fake",)),
        make_wheel(directory, "mpmath-fake", "1.0"),
        make_wheel(directory, "triton-fake", "3.0", tag=TORCH_TAG, requires=("mpmath-fake",)),
        make_wheel(directory, "cuda-meta-fake", "1.0", requires=(
            'nvidia-rt-fake==1.0; extra == "rt"', 'nvidia-unused-fake; extra == "other"')),
        make_wheel(directory, "nvidia-rt-fake", "1.0", {"__init__.py": "", "rt/lib/librt.so.1": "rt"},
                   tag=NATIVE_TAG, top="nvidia"),
        make_wheel(directory, "nvidia-unused-fake", "1.0", {"__init__.py": "", "un/lib/libun.so": "un"},
                   tag=NATIVE_TAG, top="nvidia"),
    ]


def make_index(root: Path, wheels: list[Path]) -> str:
    """A PEP 503 index at `root` (files under root/files/); returns its file:// URL."""
    from fdlenv.index.pipindex import normalize

    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    by_project: dict[str, list[Path]] = {}
    for w in wheels:
        target = files / w.name
        target.write_bytes(w.read_bytes())
        by_project.setdefault(normalize(w.name.split("-")[0]), []).append(target)
    for project, paths in by_project.items():
        page = root / project
        page.mkdir(parents=True, exist_ok=True)
        links = "".join(f'<a href="../files/{html.escape(p.name)}#sha256={sha256(p)}">{html.escape(p.name)}</a><br>\n'
                        for p in sorted(paths))
        (page / "index.html").write_text(f"<!DOCTYPE html><html><body>\n{links}</body></html>\n")
    (root / "index.html").write_text("".join(f'<a href="{p}/">{p}</a>\n' for p in sorted(by_project)))
    return root.resolve().as_uri()


def sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def write_wheel_env(envs: Path, variant: str, requirement: str = "torch ==2.10.0", index: str = "pypi") -> Path:
    path = write_env(envs, variant, [], [{"pip": [requirement]}])
    path.write_text(path.read_text() + f"pip-index: {index}\n")
    return path


class Pipe(io.RawIOBase):
    """A non-seekable sink: zipfile then writes each member's sizes after its data."""

    def __init__(self):
        self.data = bytearray()

    def writable(self):
        return True

    def write(self, b):
        self.data += b
        return len(b)
