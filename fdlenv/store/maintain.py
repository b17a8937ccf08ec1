"""Looking after realised envs: list, verify (and repair); gc is `store/gc.py`.

Everything here reads `.fdlenv/manifest.json` and `conda-meta/`, never the
lock: an env must stay checkable and repairable after its lock moved on.
Repair rebuilds the env from its manifest's records under the env's key lock
(evicting the package-cache entries whose files were bad, since envs
hard-link them) and swaps it in; gc removes only what no root, no flodl
pointer and no running realise (a held key lock) still uses.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path

from .. import hashing
from ..home import Home
from ..flocks import exclusive
from .leases import store_lock
from . import pointers, sizes
from .env import MANIFEST, moved_from, read_manifest


@dataclass
class EnvInfo:
    variant: str
    key: str
    path: Path
    size: int
    created: str
    active: bool
    rooted: bool

    def to_json(self) -> dict:
        return {"variant": self.variant, "key": self.key, "path": str(self.path), "size": self.size,
                "created": self.created, "active": self.active, "rooted": self.rooted}


def env_dirs(home: Home) -> list[Path]:
    if not home.envs.is_dir():
        return []
    return sorted(p for p in home.envs.iterdir() if (p / MANIFEST).is_file())


def file_stats(root: Path):
    if root.is_file() or root.is_symlink():
        yield os.lstat(root)
        return
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            yield os.lstat(os.path.join(dirpath, name))


def size_of(root: Path) -> int:
    """Bytes of the distinct inodes under `root` (hard links shared with the cache count once)."""
    seen, total = set(), 0
    for st in file_stats(root):
        if (st.st_dev, st.st_ino) not in seen:
            seen.add((st.st_dev, st.st_ino))
            total += st.st_size
    return total


def listing(home: Home) -> list[EnvInfo]:
    live = pointers.live_targets(home)
    label = pointers.active_label(home)
    active = Path(os.path.realpath(home.libtorch / label)) if label else None
    out = []
    for d in env_dirs(home):
        m = read_manifest(d)
        real = Path(os.path.realpath(d))
        out.append(EnvInfo(m["variant"], m["key"], d, sizes.total(home, [sizes.of_env(home, m, d)]), m["created"],
                           active is not None and (active == real or real in active.parents),
                           real in live))
    return out


@dataclass
class Problem:
    path: str
    what: str
    package: str


@dataclass
class Report:
    env: Path
    problems: list[Problem] = field(default_factory=list)
    moved_from: str | None = None       # where the env was built, when its home moved since
    # Files whose install wrote the env's path into them (a prefix placeholder): after a move they
    # still name the old path. Reported, not a failure: libtorch, its loader path and activation
    # do not depend on them; a fresh realise under the new home rewrites them.
    stale: list[str] = field(default_factory=list)

    def to_json(self) -> dict:
        return {"path": str(self.env), "ok": not self.problems, "moved_from": self.moved_from,
                "names_old_path": self.stale,
                "problems": [p.__dict__ for p in self.problems]}


def verify(env_dir: Path, full: bool = False) -> Report:
    """Record set vs manifest, every file present with its size; `full` re-hashes contents."""
    rep = Report(env_dir)
    manifest = read_manifest(env_dir)
    old = moved_from(env_dir, manifest)
    rep.moved_from = str(old) if old else None
    want = {r["name"]: r["sha256"] for r in manifest["records"] if r["manager"] == "conda"}
    have = {}
    for meta in (env_dir / "conda-meta").glob("*.json"):
        rec = json.loads(meta.read_text())
        have[rec["name"]] = rec.get("sha256")
        for p in rec.get("paths_data", {}).get("paths", []):
            path = env_dir / p["_path"]
            if p.get("path_type") == "softlink":
                if not path.is_symlink():
                    rep.problems.append(Problem(p["_path"], "missing symlink", rec["name"]))
                continue
            if not path.exists():
                rep.problems.append(Problem(p["_path"], "missing", rec["name"]))
                continue
            if old is not None and p.get("prefix_placeholder"):
                rep.stale.append(p["_path"])
            expected = p.get("sha256_in_prefix") or p.get("sha256")
            if p.get("size_in_bytes") is not None and not p.get("prefix_placeholder") \
                    and path.stat().st_size != p["size_in_bytes"]:
                rep.problems.append(Problem(p["_path"], "size differs", rec["name"]))
            elif full and expected and hashing.of_file(path).sha256 != expected:
                rep.problems.append(Problem(p["_path"], "content differs", rec["name"]))
    for name in sorted(set(want) | set(have)):
        if want.get(name) != have.get(name):
            rep.problems.append(Problem(f"conda-meta ({name})", "record set differs from the manifest", name))
    wheels = [r for r in manifest["records"] if r["manager"] == "pip"]
    if wheels:
        _verify_wheels(env_dir, wheels, full, rep)
    if full:
        rep.problems += _links_outside(env_dir)
    return rep


def _links_outside(env_dir: Path) -> list[Problem]:
    """Every symlink in the env resolves inside it (a package's link to /X would let a later
    write, or the trainer, reach outside the store)."""
    root = os.path.realpath(env_dir)
    out = []
    for dirpath, dirs, files in os.walk(env_dir):
        for name in dirs + files:
            path = os.path.join(dirpath, name)
            if os.path.islink(path):
                real = os.path.realpath(path)
                if real != root and not real.startswith(root + os.sep):
                    out.append(Problem(os.path.relpath(path, env_dir), f"symlink resolves outside the env ({real})",
                                       "(env)"))
    return out


def _verify_wheels(env_dir: Path, wheels: list[dict], full: bool, rep: Report) -> None:
    """Each wheel's files against its own RECORD (path, sha256, size), in the env's site-packages."""
    import base64
    import csv
    import re

    site = next(iter(sorted(env_dir.glob("lib/python*/site-packages"))), None)
    infos = {}
    for d in site.glob("*.dist-info") if site else []:
        name, _, version = d.name.removesuffix(".dist-info").rpartition("-")
        infos[(re.sub(r"[-_.]+", "-", name).lower(), version)] = d
    for w in wheels:
        dist = infos.get((w["name"], w["version"]))
        if dist is None or not (dist / "RECORD").is_file():
            rep.problems.append(Problem(f"{w['name']}-{w['version']}.dist-info", "missing", w["name"]))
            continue
        with open(dist / "RECORD", newline="") as f:
            for row in csv.reader(f):
                # an installer's own files (INSTALLER, REQUESTED, ...) are not the wheel's
                if len(row) < 3 or not row[1] or row[0].startswith("..") or ".data/" in row[0] \
                        or row[0].rsplit("/", 1)[-1] in ("INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
                assert site is not None   # a dist-info was found in it
                path = site / row[0]
                if not path.is_file():
                    rep.problems.append(Problem(row[0], "missing", w["name"]))
                elif row[2] and path.stat().st_size != int(row[2]):
                    rep.problems.append(Problem(row[0], "size differs", w["name"]))
                elif full and row[1].startswith("sha256="):
                    digest = base64.urlsafe_b64encode(bytes.fromhex(hashing.of_file(path).sha256)).rstrip(b"=").decode()
                    if digest != row[1][7:]:
                        rep.problems.append(Problem(row[0], "content differs", w["name"]))


def repair(home: Home, env_dir: Path, report: Report, mirrors: dict[str, str] | None = None) -> None:
    """Rebuild `env_dir` from its manifest; bad packages are re-extracted from their archives."""
    from ..flocks import shared
    from .archives import evict_cache_entry
    from ..lockfile import Record
    from .install import build

    m = read_manifest(env_dir)
    records = [Record.from_json(r) for r in m["records"]]
    bad = {p.package for p in report.problems}
    with shared(store_lock(home.locks), f"repairing {m['variant']}"), \
            exclusive(home.locks / f"{m['key']}.lock", f"repairing {m['variant']}"):
        for r in records:
            if r.name in bad:
                evict_cache_entry(home, r)
        # Built beside the old env and swapped in by one rename: a kill at any point leaves
        # the old env or the new one, and nothing running in it sees it missing.
        build(home, m["variant"], m["key"], records, env_dir, Path(m["lock"]["path"]),
              m["lock"]["sha256"], m["platform"], mirrors or {}, replace=True)
