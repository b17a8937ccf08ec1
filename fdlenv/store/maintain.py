"""Looking after realised envs: list, verify (and repair), garbage-collect.

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
import shutil
from dataclasses import dataclass, field
from pathlib import Path

from .. import hashing
from ..home import Home
from ..filelocks import exclusive, held
from .leases import in_use, store_lock
from . import pointers
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


def _size(root: Path) -> int:
    """Bytes of the env's own inodes (hard links shared with the cache count once, here)."""
    total, seen = 0, set()
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            st = os.lstat(os.path.join(dirpath, name))
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
        out.append(EnvInfo(m["variant"], m["key"], d, _size(d), m["created"],
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
    return rep


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
    from ..filelocks import shared
    from .archives import evict_cache_entry
    from .records import Record
    from .install import build

    m = read_manifest(env_dir)
    records = [Record.from_json(r) for r in m["records"]]
    bad = {p.package for p in report.problems}
    with shared(store_lock(home.locks), f"repairing {m['variant']}"), \
            exclusive(home.locks / f"{m['key']}.lock", f"repairing {m['variant']}"):
        for r in records:
            if r.name in bad:
                evict_cache_entry(home, r)
        # Not `<key>-*`: the build sweeps those as debris of killed runs.
        trash = home.staging / f"trash-{m['key']}-{os.getpid()}"
        home.ensure(home.staging)
        os.rename(env_dir, trash)
        try:
            build(home, m["variant"], m["key"], records, env_dir, Path(m["lock"]["path"]),
                   m["lock"]["sha256"], m["platform"], mirrors or {})
        except BaseException:
            if not env_dir.exists():
                os.rename(trash, env_dir)  # keep the old env rather than none
            raise
        shutil.rmtree(trash, ignore_errors=True)


@dataclass
class GcPlan:
    envs: list[Path]
    cache_entries: list[Path]
    archives: list[Path]
    bytes: int

    def to_json(self) -> dict:
        return {"envs": [str(p) for p in self.envs], "cache_entries": [str(p) for p in self.cache_entries],
                "archives": [str(p) for p in self.archives], "bytes": self.bytes}


def collect(home: Home, dry_run: bool = False) -> GcPlan:
    """Plan and (unless `dry_run`) delete, holding the store lock exclusively: no realise is
    between finding an env and rooting it, no install links from the cache meanwhile."""
    with exclusive(store_lock(home.locks), "collecting garbage"):
        plan = gc_plan(home)
        if not dry_run:
            gc(home, plan)
    return plan


def gc_plan(home: Home) -> GcPlan:
    """Envs no root or pointer reaches, no realise is building and no process leases; cache
    entries only those envs link; archives no kept env names. Call it under `collect`'s lock."""
    live = pointers.live_targets(home)
    dead, kept = [], []
    for d in env_dirs(home):
        m = read_manifest(d)
        busy = held(home.locks / f"{m['key']}.lock") or in_use(d)
        (kept if Path(os.path.realpath(d)) in live or busy else dead).append(d)
    total = sum(_size(d) for d in dead)
    dead_inodes = {(st.st_dev, st.st_ino) for d in dead for st in _stats(d)}
    entries = []
    if home.pkgs.is_dir():
        for e in sorted(home.pkgs.iterdir()):
            if not e.is_dir() or e.name.startswith("."):
                continue
            stats = list(_stats(e))
            # An entry nothing links once the dead envs are gone: every file's other links are dead ones.
            if all(st.st_nlink == 1 or ((st.st_dev, st.st_ino) in dead_inodes and st.st_nlink <= 2)
                   for st in stats):
                entries.append(e)
                total += sum(st.st_size for st in stats)
    wanted = {r["sha256"] for d in kept for r in read_manifest(d)["records"]}
    archives = [a for a in sorted(home.archives.glob("*")) if a.is_file()
                and a.name.split(".", 1)[0] not in wanted] if home.archives.is_dir() else []
    total += sum(a.stat().st_size for a in archives)
    return GcPlan(dead, entries, archives, total)


def _stats(root: Path):
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            yield os.lstat(os.path.join(dirpath, name))


def gc(home: Home, plan: GcPlan) -> None:
    home.ensure(home.staging)
    for d in plan.envs:
        # Rename first: the env vanishes at once, deletion happens out of sight.
        key = read_manifest(d)["key"]
        trash = home.staging / f"gc-{d.name}-{os.getpid()}"
        os.rename(d, trash)
        shutil.rmtree(trash, ignore_errors=True)
        (home.cache / "activation" / f"{key}.json").unlink(missing_ok=True)
    for e in plan.cache_entries:
        shutil.rmtree(e, ignore_errors=True)
        e.with_name(e.name + ".lock").unlink(missing_ok=True)
    for a in plan.archives:
        a.unlink(missing_ok=True)
