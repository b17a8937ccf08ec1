"""Resolving an env file's pip requirements into the libtorch closure.

PyTorch's own wheels are libtorch: `torch/lib`, `torch/include` and
`torch/share/cmake` form a complete libtorch, and its CUDA runtime comes as
`nvidia-*` wheels that `libtorch_cuda.so` finds through its RPATH when they
share one site-packages. So a variant can be locked from wheels.

The resolver is pip (`pip install --dry-run --report`): it is installed beside
fdlenv wherever fdlenv is, it reads PEP 658 metadata without downloading the
multi-GB wheels, and its report carries each file's sha256 and metadata.
It runs for a fixed target, never this host's Python: CPython `PYTHON` and
the manylinux tags of the env's platform (the libtorch inside is the same for
every Python; only the tag must be fixed for the lock to be stable). pip sees
only the named index: its config files and `PIP_*` settings (find-links,
extra indexes, constraints) are left out, so nothing local leaks into a lock.

The libtorch closure, not the whole install: the requested projects, plus
every wheel reachable from them through requirements (markers and extras
evaluated for the target) that ships platform code without a Python ABI
(`py3-none-manylinux...`: `nvidia-cublas-cu12`, ...). Python packages
(`sympy`, `jinja2`: `none-any`) and Python extensions (`triton`,
`cuda-bindings`: `cp312-cp312`) are not libtorch and are not kept; the walk
goes through them, because a metapackage may carry the runtime (torch 2.11
requires `cuda-toolkit[cublas,cudart,...]`, whose extras require the
`nvidia-*` wheels). A kept wheel's dependencies are the kept wheels it reaches.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

from .. import pipindex
from ..errors import Fail
from ..progress import during
from .envfile import EnvFile
from .entry import Entry

PYTHON = "3.12"
# The manylinux tags a wheel may carry for each platform pip is asked about
# (pip matches --platform tags exactly, so the whole ladder is listed).
_MANYLINUX = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
# PIP_* settings that do not change what is resolved, only how it is reached.
_KEEP_ENV = {"PIP_CERT", "PIP_CLIENT_CERT", "PIP_PROXY", "PIP_TRUSTED_HOST", "PIP_DEFAULT_TIMEOUT", "PIP_RETRIES"}


def platform_tags(platform: str) -> list[str]:
    arch = _MANYLINUX.get(platform)
    if arch is None:
        raise Fail.permanent(f"--platform: wheel variants lock for {', '.join(_MANYLINUX)} only, not {platform}")
    tags = [f"manylinux_2_{n}_{arch}" for n in range(39, 16, -1)]
    return tags + [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else [])


def target_environment(platform: str) -> dict[str, str]:
    """PEP 508 marker values of the target (not this host)."""
    from packaging.markers import default_environment

    env = default_environment()
    env.update(python_version=PYTHON, python_full_version=f"{PYTHON}.0", implementation_name="cpython",
               platform_python_implementation="CPython", sys_platform="linux", os_name="posix",
               platform_system="Linux", platform_machine=_MANYLINUX[platform])
    return env


def _pip_report(env: EnvFile, platform: str, index_url: str) -> dict:
    host = os.uname().machine
    if sys.platform != "linux" or host != _MANYLINUX[platform]:
        # pip evaluates requirement markers (platform_machine == "x86_64") for the machine it
        # runs on: resolving another's would silently drop its CUDA runtime wheels.
        raise Fail.permanent(f"--platform: wheel variants for {platform} are locked on a Linux "
                             f"{_MANYLINUX[platform]} host; this one is {sys.platform} {host}")
    pyver = PYTHON.replace(".", "")
    with tempfile.TemporaryDirectory(prefix="fdlenv-pip-") as tmp:
        report = Path(tmp) / "report.json"
        cmd = [sys.executable, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet",
               "--disable-pip-version-check", "--report", str(report), "--only-binary", ":all:",
               "--python-version", PYTHON, "--implementation", "cp", "--abi", f"cp{pyver}",
               "--target", str(Path(tmp) / "target"), "--index-url", index_url]
        for tag in platform_tags(platform):
            cmd += ["--platform", tag]
        environ = {k: v for k, v in os.environ.items() if not k.startswith("PIP_") or k in _KEEP_ENV}
        environ["PIP_CONFIG_FILE"] = os.devnull
        with during(f"resolving {', '.join(env.requirements)} for {platform} through the index {env.pip_index}"):
            proc = subprocess.run(cmd + list(env.requirements), capture_output=True, text=True, env=environ)
        if proc.returncode != 0 or not report.is_file():
            lines = [ln for ln in (proc.stderr or proc.stdout).strip().splitlines() if ln.strip()]
            tail = " / ".join(lines[-3:]) or f"pip exited {proc.returncode}"
            unreachable = any(w in tail for w in ("NewConnectionError", "Temporary failure", "timed out",
                                                   "Max retries", "ProxyError", "SSLError"))
            msg = f"{env.path} ({platform}): pip cannot resolve {', '.join(env.requirements)} from {index_url}: {tail}"
            raise Fail.retry(msg) if unreachable else Fail.permanent(msg)
        return json.loads(report.read_text())


def is_native(filename: str) -> bool:
    """A wheel with platform code and no Python ABI: a native runtime library."""
    from packaging.utils import parse_wheel_filename

    _, _, _, tags = parse_wheel_filename(filename)
    return any(t.abi == "none" and t.platform != "any" for t in tags)


def resolve(env: EnvFile, platform: str, mirrors: dict[str, str]) -> list[Entry]:
    """The libtorch closure of `env.requirements` on `platform`, as pip entries."""
    from packaging.requirements import Requirement

    if not env.requirements:
        return []
    platform_tags(platform)   # an unsupported platform fails before anything is asked of an index
    index_url = pipindex.base_url(env.pip_index, mirrors)
    report = _pip_report(env, platform, index_url)
    found = {}
    for item in report.get("install", []):
        meta, info = item["metadata"], item["download_info"]
        name = pipindex.normalize(meta["name"])
        hashes = (info.get("archive_info") or {}).get("hashes") or {}
        sha = hashes.get("sha256")
        if not sha and (h := (info.get("archive_info") or {}).get("hash", "")).startswith("sha256="):
            sha = h.split("=", 1)[1]
        found[name] = (meta, info["url"].rsplit("/", 1)[-1].split("#")[0], sha)
    marker_env = target_environment(platform)
    entries: dict[str, Entry] = {}
    depends: dict[str, dict[str, str]] = {}
    # (project, extras asked of it, nearest kept ancestor): the walk goes through Python-only
    # packages too (torch 2.11 names its CUDA runtime through `cuda-toolkit[cublas,...]`), but
    # only native wheels are kept, each edge recorded on the nearest kept ancestor.
    roots = [Requirement(r) for r in env.requirements]
    todo = [(pipindex.normalize(r.name), frozenset(r.extras), None) for r in roots]
    walked = set()
    while todo:
        name, extras, owner = todo.pop()
        if (name, extras, owner) in walked or name not in found:
            continue
        walked.add((name, extras, owner))
        meta, filename, sha = found[name]
        kept = owner is None or is_native(filename)
        if kept and name not in entries:
            if not sha:
                raise Fail.permanent(f"{env.path}: the index {env.pip_index} states no sha256 for {filename}; "
                                     "fdlenv locks only hashed wheels")
            entries[name] = Entry("pip", name, meta["version"], None, platform,
                                  pipindex.entry_url(env.pip_index, name, filename), "", sha.lower(), ())
            depends[name] = {}
        for raw in meta.get("requires_dist") or []:
            req = Requirement(raw)
            if req.marker is not None and not any(req.marker.evaluate(dict(marker_env, extra=e))
                                                  for e in {"", *extras}):
                continue
            dep = pipindex.normalize(req.name)
            if dep in found and is_native(found[dep][1]):
                depends[name if kept else owner][dep] = str(req.specifier)
            todo.append((dep, frozenset(req.extras), name if kept else owner))
    entries = {n: dataclasses.replace(e, depends=tuple(sorted(depends[n].items()))) for n, e in entries.items()}
    return sorted(entries.values(), key=lambda e: e.key)
