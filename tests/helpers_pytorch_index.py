"""A loopback wheel index laid out exactly like PyTorch's, served over real HTTP.

PyTorch's index (`https://download.pytorch.org/whl/<variant>/<project>/`) differs
from a plain PEP 503 tree in ways a client must survive, and this one has them all:
- files live beside the project pages (`whl/<variant>/torch-...whl`, shared
  ones under `whl/`), linked by *absolute* hrefs (`/whl/rocm7.1/torch-2.10.0%2Brocm7.1-...`);
- the `+` of a local version label is percent-encoded in the href, the link
  text is the raw file name;
- `#sha256=` fragments, and PEP 658/714 metadata (`data-dist-info-metadata`,
  `data-core-metadata`, the `.metadata` file beside the wheel);
- other Pythons' files and an older release on the same page;
- `json=True` answers PEP 691 JSON instead (what PyPI-style indexes do).

Wheels are shaped like PyTorch 2.10's builds: `cpu` (no runtime wheels), `cu126`
(`nvidia-*-cu12` runtime wheels, `nvidia-cudnn-cu12` requiring `nvidia-cublas-cu12`,
and the `triton` extension), `cu130` (CUDA 13's runtime wheels: no suffix, or `-cu13`, all
under `nvidia/cu13/`; the toolkit wheels, nvcc a script that answers `--version` as 13.0's,
on the default pip index, which also serves PyPI's torch 2.11.0, the CUDA 13.0 build with no
label, requiring `cuda-toolkit[cublas,cudart]==13.0.2`, whose extras require the wheels), `rocm7.0`/`rocm7.1` (the HIP runtime inside
`torch/lib`, and `pytorch-triton-rocm`), plus the Python packages torch
requires (`sympy` -> `mpmath`, `filelock`, ...). The server records every
request path, so a test can say "no index request".
"""

from __future__ import annotations

import hashlib
import html
import http.server
import json
import threading
import urllib.parse
from pathlib import Path

from helpers_conda import make_wheel

TORCH = "cp312-cp312-manylinux_2_28_x86_64"
NATIVE = "py3-none-manylinux_2_27_x86_64"
LINUX_X86 = 'platform_system == "Linux" and platform_machine == "x86_64"'
PYDEPS = ('filelock', 'typing-extensions>=4.10.0', 'sympy>=1.13.3', 'networkx>=2.5.1', 'jinja2', 'fsspec>=0.8.5',
          'setuptools; python_version >= "3.12"')


def cu130_project_env(name: str) -> str:
    """A project's env file pinning PyPI's torch 2.11.0 (the CUDA 13.0 build) and the toolkit
    wheels of its runtime's version, which make the env a toolkit: the fake index serves them
    (test_cu130), and so does PyPI (test_real_cu130)."""
    return (f"name: {name}\nplatforms: [linux-64]\npip-index: pypi\ndependencies:\n  - pip:\n"
            "      - torch ==2.11.0\n      - nvidia-cuda-nvcc ==13.0.88\n      - nvidia-cuda-crt ==13.0.88\n"
            "      - nvidia-nvvm ==13.0.88\n      - nvidia-cuda-cccl ==13.0.85\n")


def _torch_files(variant: str, extra: dict | None = None) -> dict:
    return {"lib/libtorch.so": f"libtorch {variant}", "lib/libc10.so": "c10", "include/torch/torch.h": "// torch",
            "share/cmake/Torch/TorchConfig.cmake": "# cmake", "__init__.py": "",
            "version.py": f"__version__ = '2.10.0+{variant}'\n", **(extra or {})}


def build(root: Path, torch_files: dict[str, dict] | None = None) -> dict[str, list[Path]]:
    """Wheels per index folder ('' = shared under whl/, else the variant). `torch_files`: a
    variant's torch wheel with these files added or replaced (another build of the same release)."""
    more = torch_files or {}
    w = root / "build"
    shared = [
        make_wheel(w, "sympy", "1.14.0", requires=("mpmath<1.4,>=1.1.0",)),
        make_wheel(w, "mpmath", "1.3.0"), make_wheel(w, "filelock", "3.20.0"),
        make_wheel(w, "typing-extensions", "4.15.0"), make_wheel(w, "networkx", "3.5"),
        make_wheel(w, "jinja2", "3.1.6", requires=("MarkupSafe>=2.0",)),
        make_wheel(w, "markupsafe", "3.0.2", tag="cp312-cp312-manylinux_2_17_x86_64"),
        make_wheel(w, "fsspec", "2025.9.0"), make_wheel(w, "setuptools", "80.9.0"),
        make_wheel(w, "nvidia-cuda-runtime-cu12", "12.6.77", {"__init__.py": "", "cuda_runtime/lib/libcudart.so.12": "rt"},
                   tag=NATIVE, top="nvidia"),
        make_wheel(w, "nvidia-cublas-cu12", "12.6.4.1", {"__init__.py": "", "cublas/lib/libcublas.so.12": "blas"},
                   tag=NATIVE, top="nvidia"),
        make_wheel(w, "nvidia-cudnn-cu12", "9.10.2.21", {"__init__.py": "", "cudnn/lib/libcudnn.so.9": "dnn"},
                   tag=NATIVE, top="nvidia", requires=("nvidia-cublas-cu12",)),
        make_wheel(w, "triton", "3.6.0", {"__init__.py": ""}, tag=TORCH),
        make_wheel(w, "pytorch-triton-rocm", "3.6.0", {"__init__.py": ""}, tag=TORCH, requires=("filelock",)),
    ]
    out: dict[str, list[Path]] = {"": shared}
    old = make_wheel(w / "old", "torch", "2.9.1+cpu", _torch_files("cpu"), tag=TORCH, requires=PYDEPS)
    out["cpu"] = [
        make_wheel(w / "cpu", "torch", "2.10.0+cpu", _torch_files("cpu"), tag=TORCH, requires=PYDEPS),
        make_wheel(w / "cpu", "torch", "2.10.0+cpu", _torch_files("cpu"), tag="cp311-cp311-manylinux_2_28_x86_64",
                   requires=PYDEPS),
        make_wheel(w / "cpu", "torch", "2.10.0+cpu", _torch_files("cpu-aarch64"),
                   tag="cp312-cp312-manylinux_2_28_aarch64", requires=PYDEPS),
        old]
    out["cu126"] = [make_wheel(w / "cu126", "torch", "2.10.0+cu126", _torch_files("cu126", more.get("cu126")), tag=TORCH, requires=PYDEPS + (
        f"nvidia-cuda-runtime-cu12==12.6.77; {LINUX_X86}", f"nvidia-cudnn-cu12==9.10.2.21; {LINUX_X86}",
        f"nvidia-cublas-cu12==12.6.4.1; {LINUX_X86}", 'triton==3.6.0; platform_system == "Linux"'))]
    for v in ("rocm7.0", "rocm7.1"):
        hip = {"lib/libamdhip64.so": f"hip {v}", "lib/libMIOpen.so": "miopen"}
        out[v] = [make_wheel(w / v, "torch", f"2.10.0+{v}", _torch_files(v, hip), tag=TORCH, requires=PYDEPS + (
            'pytorch-triton-rocm==3.6.0; platform_system == "Linux"',))]
    cu13 = (f"nvidia-cuda-runtime==13.0.96; {LINUX_X86}", f"nvidia-cublas==13.1.0.3; {LINUX_X86}",
            f"nvidia-cudnn-cu13==9.15.1.9; {LINUX_X86}", 'triton==3.6.0; platform_system == "Linux"')
    out["cu130"] = [make_wheel(w / "cu130", "torch", "2.10.0+cu130", _torch_files("cu130"), tag=TORCH,
                               requires=PYDEPS + cu13)]
    runtime13 = [
        make_wheel(w / "cu13", "nvidia-cuda-runtime", "13.0.96", {
            "cu13/include/cuda_runtime.h": "#define CUDART_VERSION 13000\n", "cu13/lib/libcudart.so.13": "rt13",
            "cu13/lib/libcudart_static.a": "!<arch>\n", "cu13/lib/libcudadevrt.a": "!<arch>\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w / "cu13", "nvidia-cublas", "13.1.0.3", {"cu13/lib/libcublas.so.13": "blas13",
                   "cu13/include/cublas_v2.h": "// cublas\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w / "cu13", "nvidia-cudnn-cu13", "9.15.1.9", {"cudnn/lib/libcudnn.so.9": "dnn13"}, tag=NATIVE,
                   top="nvidia", requires=("nvidia-cublas",)),
        make_wheel(w / "cu13", "cuda-toolkit", "13.0.2", {"__init__.py": ""}, tag="py2.py3-none-any", requires=(
            "nvidia-cuda-runtime==13.0.96.*; extra == \"cudart\"", "nvidia-cublas==13.1.0.3.*; extra == \"cublas\"",
            "nvidia-cuda-nvcc==13.0.88.*; extra == \"nvcc\""))]
    shared += runtime13
    toolkit13 = [   # envs/cu130.yml's pip-sources: the toolkit from the default pip index
        make_wheel(w / "pypi", "nvidia-cuda-nvcc", "13.0.88", {
            "cu13/bin/nvcc": "#!/bin/sh\necho 'Cuda compilation tools, release 13.0, V13.0.88'\n",
            "cu13/bin/nvcc.profile": "TOP = $(_HERE_)/..\n", "cu13/bin/ptxas": "#!/bin/sh\n",
            "cu13/include/fatbinary_section.h": "// fatbin\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w / "pypi", "nvidia-cuda-crt", "13.0.88", {"cu13/include/crt/host_defines.h": "#define CRT 13\n"},
                   tag=NATIVE, top="nvidia"),
        make_wheel(w / "pypi", "nvidia-nvvm", "13.0.88", {"cu13/nvvm/bin/cicc": "#!/bin/sh\n",
                   "cu13/nvvm/libdevice/libdevice.10.bc": "bc", "cu13/lib/libnvvm.so.4": "nvvm"}, tag=NATIVE, top="nvidia"),
        make_wheel(w / "pypi", "nvidia-cuda-cccl", "13.0.85", {"cu13/include/cccl/cuda/std/version": "// cccl\n"},
                   tag=NATIVE, top="nvidia")]
    # PyPI's own torch 2.11.0 (no label: the CUDA 13.0 build), for a project's env file that pins it.
    torch211 = make_wheel(w / "pypi", "torch", "2.11.0", {**_torch_files("cu130"), "version.py": "__version__ = '2.11.0'\n"},
                          tag=TORCH, requires=PYDEPS + (
                              f"cuda-toolkit[cublas,cudart]==13.0.2; {LINUX_X86}", 'triton==3.6.0; platform_system == "Linux"'))
    # The default pip index (`--mirror pypi=`, `Index.simple`): the header wheels a cu12x env's
    # CUDA_HOME takes from it (`pip-sources:` in envs/cu126.yml), cu130's toolkit, and PyPI's torch 2.11.0
    # with what it requires.
    out["pypi"] = [*toolkit13, torch211, *runtime13, *(p for p in shared if "cu12" not in p.name and "rocm" not in p.name),
        make_wheel(w / "pypi", "nvidia-cuda-nvcc-cu12", "12.6.85", {"__init__.py": "",
                   "cuda_nvcc/include/crt/host_defines.h": "#define CRT 1\n"}, tag=NATIVE, top="nvidia"),
        make_wheel(w / "pypi", "nvidia-cuda-cccl-cu12", "12.6.77", {"__init__.py": "",
                   "cuda_cccl/include/nv/target": "#define NV 1\n"}, tag=NATIVE, top="nvidia")]
    return out


def _sha(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def lay_out(root: Path, wheels: dict[str, list[Path]], metadata: bool = True) -> Path:
    """Write `root/whl/...` as PyTorch's index is laid out; returns `root/whl`. `metadata=False`:
    no PEP 658 files or attributes (an index a client must read with range requests)."""
    import zipfile

    from helpers_wheels import make_index

    whl = root / "whl"
    make_index(root / "simple", wheels.pop("pypi", []))
    files: dict[str, list[tuple[str, Path]]] = {}   # project -> (href folder, file)
    for folder, paths in wheels.items():
        d = whl / folder if folder else whl
        d.mkdir(parents=True, exist_ok=True)
        for p in paths:
            target = d / p.name
            target.write_bytes(p.read_bytes())
            with zipfile.ZipFile(target) as z:
                meta = next(n for n in z.namelist() if n.endswith(".dist-info/METADATA"))
                if metadata:
                    (d / (p.name + ".metadata")).write_bytes(z.read(meta))
            files.setdefault(p.name.split("-")[0].replace("_", "-").lower(), []).append((folder, target))
    variants = [f for f in wheels if f]
    for variant in variants:   # the root page lists the projects, as PyTorch's does (a mirror reads it)
        served = sorted(p for p, entries in files.items() if any(f in ("", variant) for f, _ in entries))
        (whl / variant).mkdir(parents=True, exist_ok=True)
        (whl / variant / "index.html").write_text("<!DOCTYPE html>\n<html><body>\n" + "".join(
            f'<a href="/whl/{variant}/{p}/">{p}</a><br/>\n' for p in served) + "</body></html>\n")
        for project, entries in files.items():
            served = [(f, t) for f, t in entries if f in ("", variant)]
            if not served:
                continue
            page = whl / variant / project
            page.mkdir(parents=True, exist_ok=True)
            links, js = [], []
            for folder, t in sorted(served, key=lambda e: e[1].name):
                href = "/whl/" + (f"{folder}/" if folder else "") + urllib.parse.quote(t.name)
                sha = _sha(t.read_bytes())
                msha = _sha(Path(str(t) + ".metadata").read_bytes()) if metadata else None
                attrs = f' data-dist-info-metadata="sha256={msha}" data-core-metadata="sha256={msha}"' if msha else ""
                links.append(f'<a href="{href}#sha256={sha}"{attrs}>{html.escape(t.name)}</a><br/>')
                js.append({"filename": t.name, "url": href, "hashes": {"sha256": sha}, "size": t.stat().st_size,
                           **({"core-metadata": {"sha256": msha}} if msha else {})})
            (page / "index.html").write_text("<!DOCTYPE html>\n<html>\n  <body>\n    <h1>Links for "
                                              f"{project}</h1>\n    " + "\n    ".join(links) + "\n  </body>\n</html>\n")
            (page / "index.json").write_text(json.dumps({"meta": {"api-version": "1.1"}, "name": project,
                                                         "files": js}))
    return whl


class Index:
    """A running loopback server over `root`; `url` is the `--mirror pytorch=` value.
    `calls`: every request as (method, path), in the order they came; `head`: whether a HEAD is
    answered (else 405, as some servers do); `json_pages`: project pages as PEP 691 JSON where
    asked; `hold`: a whole-wheel GET is held until that many have come (a barrier: which
    downloads start first is then observed, not raced; 30 s at most, so a failure never hangs);
    `faults`: what goes wrong once per (fault, method, path), in this order: "stall" (the answer
    held `stall` s), "503" (with `retry_after` as Retry-After when set), "cut" (a GET's body sent
    half, under its full Content-Length, then the connection closed); `faulted` lists them."""

    def __init__(self, root: Path, *, json_pages: bool = False):
        self.requests: list[str] = []
        self.ranges: list[tuple[str, str]] = []
        self.calls: list[tuple[str, str]] = []
        self.root = root
        self.head, self.json_pages, self.hold = True, json_pages, 0
        self.gets = 0
        self.arrived = threading.Condition()
        self.faults: tuple[str, ...] = ()
        self.stall, self.retry_after = 0.5, None
        self.faulted: list[tuple[str, str, str]] = []
        served = self

        class Handler(http.server.SimpleHTTPRequestHandler):
            def __init__(self, *a, **k):
                super().__init__(*a, directory=str(root), **k)

            def log_message(self, *a):
                pass

            def send_head(self):
                served.requests.append(self.path)
                served.calls.append((self.command, self.path))
                path = urllib.parse.urlparse(self.path).path
                rng, local = self.headers.get("Range"), Path(self.translate_path(path))
                if served._fault(self, "stall"):
                    import time
                    time.sleep(served.stall)
                if served._fault(self, "503"):
                    self.send_response(503)
                    if served.retry_after is not None:
                        self.send_header("Retry-After", str(served.retry_after))
                    self.send_header("Content-Length", "0")
                    self.end_headers()
                    return None
                whole = local / "index.html" if local.is_dir() else local
                if self.command == "GET" and not rng and whole.is_file() and served._fault(self, "cut"):
                    data = whole.read_bytes()
                    self.send_response(200)
                    self.send_header("Content-Length", str(len(data)))
                    self.end_headers()
                    self.wfile.write(data[: len(data) // 2])
                    self.close_connection = True
                    return None
                if self.command == "HEAD" and not served.head:
                    self.send_error(405)
                    return None
                if self.command == "GET" and not rng and path.endswith(".whl"):
                    with served.arrived:
                        served.gets += 1
                        served.arrived.notify_all()
                        served.arrived.wait_for(lambda: served.gets >= served.hold, timeout=30)
                if rng and local.is_file():    # bytes=A-B or bytes=-N, as a lazy-wheel client asks
                    data = local.read_bytes()
                    first, _, last = rng.removeprefix("bytes=").partition("-")
                    start = len(data) - int(last) if not first else int(first)
                    end = len(data) - 1 if not first or not last else min(int(last), len(data) - 1)
                    start = max(start, 0)
                    served.ranges.append((local.name, rng))
                    self.send_response(206)
                    self.send_header("Content-Range", f"bytes {start}-{end}/{len(data)}")
                    self.send_header("Content-Length", str(end - start + 1))
                    self.end_headers()
                    import io
                    return io.BytesIO(data[start:end + 1])
                if served.json_pages and path.endswith("/"):
                    page = Path(self.translate_path(path)) / "index.json"
                    if page.is_file():
                        body = page.read_bytes()
                        self.send_response(200)
                        self.send_header("Content-Type", "application/vnd.pypi.simple.v1+json")
                        self.send_header("Content-Length", str(len(body)))
                        self.end_headers()
                        import io
                        return io.BytesIO(body)
                return super().send_head()

        self.server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}/whl"
        self.simple = f"http://127.0.0.1:{self.server.server_address[1]}/simple"   # the `pypi` stand-in

    def _fault(self, handler, fault: str) -> bool:
        """Whether `fault` strikes this request: it is on, and not yet struck its method and path."""
        key = (fault, handler.command, handler.path)
        with self.arrived:
            if fault not in self.faults or key in self.faulted:
                return False
            self.faulted.append(key)
            return True

    def close(self):
        self.server.shutdown()
        self.server.server_close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


def serve(tmp: Path, *, metadata: bool = True, torch_files: dict[str, dict] | None = None, **kw) -> Index:
    root = tmp / "pytorch-index"
    lay_out(root, build(root, torch_files), metadata)
    return Index(root, **kw)
