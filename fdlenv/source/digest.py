"""Tree digest (the build key's content part) and the `.fdl-run.sha256` check.

The tree is every regular file and symlink under the root, skipping `target/`
and `.git/` at any depth, `/libtorch/` at the root (the rsync excludes) and
the two run files at the root (a re-publish with a new run nonce but the same
code must not rebuild). For a git checkout it is the tracked files only
(`scan(..., only=...)`): what the build writes into the tree (untracked
outputs git leaves in place) is not what the spec delivered. `sha256` is the reference's TreeDigest: the sha256 of
the `sha256sum`-format listing (`<hex>  <rel>\n`, sorted, `/`-joined);
`content` also covers symlinks and is what the build key uses.

Cheap when nothing changed: each file's sha256 is cached in the source's
state under (size, mtime_ns, ctime_ns, inode), so a re-dial only stats.
A file touched within RACY_NS before it was hashed is not cached: a second
write inside one timestamp tick would leave its stat unchanged.
"""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..base import hashing
from ..base.errors import Fail
from .state import State

if TYPE_CHECKING:
    from collections.abc import Iterable

MANIFEST = ".fdl-run.yml"
SIDECAR = ".fdl-run.sha256"
RACY_NS = 2_000_000_000
_SKIP_ANY = frozenset({"target", ".git"})
_SKIP_ROOT = frozenset({"libtorch", MANIFEST, SIDECAR})


class TreeDigest(NamedTuple):
    """A tree's digests and size (a NamedTuple: it is on the re-dial path, see variants)."""

    sha256: str    # reference-compatible: regular files only
    files: int
    bytes: int
    content: str   # sha256 + symlinks: the build key's input


class Scan(NamedTuple):
    """What a scan saw, per file (a NamedTuple: it is on the re-dial path, see variants)."""

    hashes: dict[str, str]     # rel -> sha256, regular files
    sizes: dict[str, int]
    links: dict[str, str]      # rel -> link target

    def digest(self) -> TreeDigest:
        listing = "".join(f"{self.hashes[r]}  {r}\n" for r in sorted(self.hashes)).encode()
        content = hashing.of_bytes(listing + "".join(
            f"link {self.links[rel]}  {rel}\n" for rel in sorted(self.links)).encode())
        return TreeDigest(hashing.of_bytes(listing), len(self.hashes), sum(self.sizes.values()), content)


def _walk(root: str, rel: str, out_files: list[tuple[str, os.stat_result]], out_links: dict[str, str]) -> None:
    with os.scandir(os.path.join(root, rel) if rel else root) as it:
        for e in it:
            name = e.name
            if name in _SKIP_ANY or (not rel and name in _SKIP_ROOT):
                continue
            r = f"{rel}/{name}" if rel else name
            if e.is_symlink():
                out_links[r] = os.readlink(e.path)
            elif e.is_dir():
                _walk(root, r, out_files, out_links)
            elif e.is_file():
                out_files.append((r, e.stat(follow_symlinks=False)))


def _listed(root: str, only: Iterable[str], out_files: list[tuple[str, os.stat_result]],
            out_links: dict[str, str]) -> None:
    """The entries named in `only` (relative paths) that exist, with the walk's skips."""
    for r in only:
        first = r.split("/", 1)[0]
        if set(r.split("/")) & _SKIP_ANY or ("/" not in r and first in _SKIP_ROOT) or first == "libtorch":
            continue
        p = os.path.join(root, r)
        try:
            st = os.lstat(p)
        except OSError:
            continue   # a tracked file deleted in the tree: absent from the digest
        if os.path.islink(p):
            out_links[r] = os.readlink(p)
        elif os.path.isfile(p):
            out_files.append((r, st))


def scan(tree: Path, state: State | None = None, only: Iterable[str] | None = None) -> Scan:
    """Hash the tree, re-reading only files whose stat tuple changed. `only`: the relative
    paths that count (a git checkout's tracked files); default: every file under the tree."""
    cache = (state.get("files") if state else None) or {}
    files: list[tuple[str, os.stat_result]] = []
    links: dict[str, str] = {}
    if only is None:
        _walk(str(tree), "", files, links)
    else:
        _listed(str(tree), only, files, links)
    fresh: dict[str, list[int | str]] = {}
    hashes: dict[str, str] = {}
    sizes: dict[str, int] = {}
    now = time.time_ns()
    for rel, st in files:
        key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = cache.get(rel)
        sha: str
        if hit is not None and hit[:4] == key:
            sha = hit[4]
        else:
            sha = hashing.of_file(os.path.join(tree, rel)).sha256
        if max(st.st_mtime_ns, st.st_ctime_ns) < now - RACY_NS:
            fresh[rel] = [*key, sha]
        hashes[rel], sizes[rel] = sha, st.st_size
    if state is not None:
        state.put("files", fresh)
    return Scan(hashes, sizes, links)


def sidecar_text(s: Scan) -> str:
    """`sha256sum -c`-compatible listing, as publish writes it."""
    return "".join(f"{s.hashes[r]}  {r}\n" for r in sorted(s.hashes))


def verify(tree: Path, expected_sha256: str, s: Scan, limit: int = 5) -> None:
    """Check the tree against the published sidecar; every deviation is transient."""
    path = tree / SIDECAR
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise Fail.retry(f"{path} is missing although the run manifest names a digest "
                         "(pulled mid-publish?); the next dial fetches a coherent tree") from None
    if hashing.of_bytes(raw) != expected_sha256:
        raise Fail.retry(f"{path} is not the one the run manifest names "
                         "(fetched across two different publishes); retrying")
    listed: dict[str, str] = {}
    for line in raw.decode(errors="replace").splitlines():
        sha, sep, rel = line.partition("  ")
        listed[rel] = sha if sep else ""
    problems = []
    for rel, sha in sorted(listed.items()):
        if rel not in s.hashes:
            problems.append(f"{rel} is missing")
        elif s.hashes[rel] != sha:
            problems.append(f"{rel} differs")
    problems += [f"{rel} is not in the published set" for rel in sorted(s.hashes) if rel not in listed]
    if problems:
        more = f" and {len(problems) - limit} more" if len(problems) > limit else ""
        raise Fail.retry(f"fetched tree {tree} does not match its published digest: "
                         f"{'; '.join(problems[:limit])}{more}")
