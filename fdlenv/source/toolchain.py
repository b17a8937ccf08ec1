"""The toolchain's identity: the compilers and build tools a recipe will find, for the build key.

An artifact built by g++ 12 must not be reused after the host (or the env)
moved to g++ 13. The identity covers, on the recipe's own PATH (the activated
env's first, then the host's):
- the tools in TOOLS and whatever `CC`, `CXX`, `CUDACXX`, `HIPCXX` and
  `RUSTC` name (their first word), each by resolved path and content sha256;
- for a rustup proxy (`cargo`, `rustc` resolving to the `rustup` binary): the
  rustup settings file and every installed toolchain's `rustc` and `cargo`,
  since the proxy's own bytes do not change when the toolchain does.
Not in it: what a tool loads or runs itself (cc1plus, ld plugins, a compiler
wrapper's target), system headers and libraries. Those change with the
package that also replaces the driver binary, which is in it.

Cheap on a re-dial: a file is hashed only when its stat (size, mtime, ctime,
inode) differs from the one cached in `cache/toolchain.json`; the rest is a
PATH lookup per tool.
"""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

from ..base import hashing
from .state import State

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

TOOLS = ("cc", "c++", "gcc", "g++", "clang", "clang++", "ld", "ar", "rustc", "cargo", "nvcc", "hipcc",
         "cmake", "make", "ninja", "meson")
COMPILER_VARS = ("CC", "CXX", "CUDACXX", "HIPCXX", "RUSTC")


def _file_id(path: str, cache: Mapping[str, Any], fresh: dict[str, list[int | str]]) -> str | None:
    """`path`'s content sha256, from `cache` (the JSON of the last identity: path -> stat stamp
    + sha256) while its stat is unchanged; recorded in `fresh`; None when it cannot be read."""
    try:
        st = os.stat(path)
    except OSError:
        return None
    stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    hit = cache.get(path)
    sha: str
    if hit is not None and hit[:4] == stamp:
        sha = hit[4]
    else:
        try:
            sha = hashing.of_file(path).sha256
        except OSError:
            return None
    fresh[path] = [*stamp, sha]
    return sha


def _rustup_files(environ: Mapping[str, str]) -> list[str]:
    home = Path(environ.get("RUSTUP_HOME") or Path(environ.get("HOME") or Path.home()) / ".rustup")
    files = [str(home / "settings.toml")]
    try:
        for tc in sorted((home / "toolchains").iterdir()):
            files += [str(tc / "bin" / "rustc"), str(tc / "bin" / "cargo")]
    except OSError:
        pass
    return files


def identity(environ: Mapping[str, str], cache_file: Path) -> str:
    """sha256 over (name, resolved path, content sha256) of every tool the recipe can find."""
    path = environ.get("PATH", "")
    state = State.load(cache_file)
    cache = state.get("files") or {}
    fresh: dict[str, list[int | str]] = {}
    names = list(TOOLS) + [v.split()[0] for k in COMPILER_VARS if (v := (environ.get(k) or "").strip())]
    found = []
    rustup = False
    for name in names:
        where = shutil.which(name, path=path) if "/" not in name else name
        if where is None:
            continue
        real = os.path.realpath(where)
        rustup = rustup or os.path.basename(real).startswith("rustup")
        found.append((name, real, _file_id(real, cache, fresh)))
    if rustup:
        found += [("rustup:" + f, f, sha) for f in _rustup_files(environ)
                  if (sha := _file_id(f, cache, fresh)) is not None]
    state.put("files", fresh)
    try:
        state.save()
    except OSError:
        pass   # only a cache: the next build hashes again
    return hashing.of_text(json.dumps(sorted(found), separators=(",", ":")))
