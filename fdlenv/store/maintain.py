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
from stat import S_ISREG
from pathlib import Path

from ..base import hashing
from ..base.record import Record
from ..names.home import Home
from ..base.deadlines import join
from ..base.flocks import exclusive
from .leases import store_lock
from . import pointers, sizes
from .env import MANIFEST, moved_from, read_manifest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any


# Records and a plain class: dataclasses (and with it inspect and ast) cost every
# `env list/gc/verify` about 10 ms to import.
class EnvInfo(Record):
    """One realised env, as `env list` shows it."""

    variant: str
    key: str
    path: Path
    size: int          # bytes it holds, each cache entry once (`store.sizes`)
    created: str       # ISO 8601, from its manifest
    active: bool       # `.active` names it
    rooted: bool       # a root or a pointer keeps it

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "key": self.key, "path": str(self.path), "size": self.size,
                "created": self.created, "active": self.active, "rooted": self.rooted}


def env_dirs(home: Home) -> list[Path]:
    if not home.envs.is_dir():
        return []
    return sorted(p for p in home.envs.iterdir() if not p.name.startswith(".") and (p / MANIFEST).is_file())


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


class Problem(Record):
    """What `verify` found wrong: a path in the env, what is wrong, and whose it is."""

    path: str
    what: str
    package: str       # a package's name, or `(env)`, `(libtorch)`


class Queued(Record):
    """A file `verify --full` re-hashes."""

    path: str | Path   # where it is (a str for a wheel's files: no Path object per RECORD row)
    shown: str         # as a Problem names it
    expected: str
    how: str           # `expected` in "hex" or "b64"
    package: str
    size: int


class Report:
    def __init__(self, env: Path):
        self.env = env
        self.problems: list[Problem] = []
        self.moved_from: str | None = None     # where the env was built, when its home moved since
        # Files whose install wrote the env's path into them (a prefix placeholder): after a move
        # they still name the old path. Reported, not a failure: libtorch, its loader path and
        # activation do not depend on them; a fresh realise under the new home rewrites them.
        self.stale: list[str] = []

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.env), "ok": not self.problems, "moved_from": self.moved_from,
                "names_old_path": self.stale,
                "problems": [p._asdict() for p in self.problems]}


def verify(env_dir: Path, full: bool = False,
           progress: Callable[[int, int, int, int], None] | None = None) -> Report:
    """By default what costs a few reads per env, not one per file: the manifest, the record set
    (conda-meta's files and the wheels' dist-infos against the manifest's records) and the
    libtorch root. `full` walks every file: present, its size, its content re-hashed on every
    core, and every symlink resolving inside the env. `progress(files, bytes, of_files,
    of_bytes)`: called once with the totals queued for hashing, then after each file hashed
    (from the hashing threads)."""
    rep = Report(env_dir)
    manifest = read_manifest(env_dir)
    old = moved_from(env_dir, manifest)
    rep.moved_from = str(old) if old else None
    conda = [r for r in manifest["records"] if r["manager"] == "conda"]
    wheels = [r for r in manifest["records"] if r["manager"] == "pip"]
    metas = sorted((env_dir / "conda-meta").glob("*.json"))
    want = {f"{r['name']}-{r['version']}-{r['build']}.json": r["name"] for r in conda}
    for name in sorted(set(want) ^ {m.name for m in metas}):
        pkg = want.get(name, name.removesuffix(".json"))
        rep.problems.append(Problem(f"conda-meta ({pkg})", "record set differs from the manifest", pkg))
    built = str(old or env_dir)        # where the env was built: its manifest's paths start there
    root = manifest.get("libtorch_root") or built
    if os.path.commonpath([root, built]) == built and not (env_dir / os.path.relpath(root, built) / "lib").is_dir():
        rep.problems.append(Problem(os.path.relpath(root, built) + "/lib", "missing", "(libtorch)"))
    hashes: list[Queued] = []
    if full or old is not None:
        _walk_conda(env_dir, metas, {r["name"]: r["sha256"] for r in conda}, old, full, rep, hashes)
    if wheels:
        _verify_wheels(env_dir, wheels, full, rep, hashes)
    if full:
        rep.problems += _hash_all(hashes, progress)
        rep.problems += _links_outside(env_dir)
    return rep


def _walk_conda(env_dir: Path, metas: list[Path], want_sha: dict[str, str], old: Path | None, full: bool,
                rep: Report, hashes: list[Queued]) -> None:
    """Each conda package's files as its conda-meta record lists them; what a move left naming
    the old path (`stale`); in `full`, sizes checked and contents queued for hashing."""
    for meta in metas:
        rec = json.loads(meta.read_text())
        if full and rec.get("sha256") != want_sha.get(rec.get("name")):
            rep.problems.append(Problem(f"conda-meta ({rec.get('name')})", "record set differs from the manifest",
                                        str(rec.get("name"))))
        for p in rec.get("paths_data", {}).get("paths", []):
            if old is not None and p.get("prefix_placeholder"):
                rep.stale.append(p["_path"])
            if not full:
                continue
            path = env_dir / p["_path"]
            if p.get("path_type") == "softlink":
                if not path.is_symlink():
                    rep.problems.append(Problem(p["_path"], "missing symlink", rec["name"]))
                continue
            try:
                size = os.stat(path).st_size
            except OSError:
                rep.problems.append(Problem(p["_path"], "missing", rec["name"]))
                continue
            expected = p.get("sha256_in_prefix") or p.get("sha256")
            if p.get("size_in_bytes") is not None and not p.get("prefix_placeholder") \
                    and size != p["size_in_bytes"]:
                rep.problems.append(Problem(p["_path"], "size differs", rec["name"]))
            elif expected:
                hashes.append(Queued(path, p["_path"], expected, "hex", rec["name"], size))


def _hash_all(hashes: list[Queued], progress: Callable[[int, int, int, int], None] | None = None) -> list[Problem]:
    """Every queued file re-hashed on every core (hashlib lets go of the GIL while it hashes).
    The files are dealt once to one lane per core, largest first onto the lightest lane, so the
    lanes finish together; each lane is one thread looping over its files (a future per file and
    four stats per file cost ~0.6 s on the 13,800 files of a cu128 env: 3.00 s against 2.38 s)."""
    import base64
    import threading

    order = sorted(range(len(hashes)), key=lambda i: hashes[i].size, reverse=True)
    n = max(1, min(os.cpu_count() or 1, len(order)))
    lanes: list[list[int]] = [[] for _ in range(n)]
    loads = [0] * n
    for i in order:
        lightest = loads.index(min(loads))
        lanes[lightest].append(i)
        loads[lightest] += hashes[i].size + 4096     # a file costs its bytes and an open
    found: list[tuple[int, Problem]] = []
    failed: list[BaseException] = []
    tell = progress or (lambda *_: None)
    tell(0, 0, len(hashes), sum(q.size for q in hashes))

    def lane(items: list[int]) -> None:
        try:
            for i in items:
                path, shown, expected, how, package, _ = hashes[i]
                got = hashing.sha256_of_file(path)
                if how == "b64":
                    got = base64.urlsafe_b64encode(bytes.fromhex(got)).rstrip(b"=").decode()
                if got != expected:
                    found.append((i, Problem(shown, "content differs", package)))
                tell(1, hashes[i].size, 0, 0)
        except BaseException as e:   # noqa: BLE001 - raised again in the caller's thread
            failed.append(e)

    threads = [threading.Thread(target=lane, args=(items,), name="fdlenv-hash") for items in lanes[1:]]
    for t in threads:
        t.start()
    lane(lanes[0] if lanes else [])
    for t in threads:
        join(t)   # in slices: a stop signal landing on a lane still stops `verify --full`
    if failed:
        raise failed[0]
    rank = {i: k for k, i in enumerate(order)}
    return [p for _, p in sorted(found, key=lambda f: rank[f[0]])]


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


def _verify_wheels(env_dir: Path, wheels: list[dict[str, Any]], full: bool, rep: Report,
                   hashes: list[Queued]) -> None:
    """Each wheel's dist-info with its RECORD in the env's site-packages; in `full`, every file
    against its RECORD (present, size; the sha256 queued)."""
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
        if not full:
            continue
        assert site is not None   # a dist-info was found in it
        root = f"{site}/"
        with open(dist / "RECORD", newline="") as f:
            for row in csv.reader(f):
                # an installer's own files (INSTALLER, REQUESTED, ...) are not the wheel's
                if len(row) < 3 or not row[1] or row[0].startswith("..") or ".data/" in row[0] \
                        or row[0].rsplit("/", 1)[-1] in ("INSTALLER", "REQUESTED", "direct_url.json"):
                    continue
                path = root + row[0]     # a string: one stat per file, no Path objects (13,800 in cu128)
                try:
                    st = os.stat(path)
                except OSError:
                    st = None
                if st is None or not S_ISREG(st.st_mode):
                    rep.problems.append(Problem(row[0], "missing", w["name"]))
                elif row[2] and st.st_size != int(row[2]):
                    rep.problems.append(Problem(row[0], "size differs", w["name"]))
                elif row[1].startswith("sha256="):
                    hashes.append(Queued(path, row[0], row[1][7:], "b64", w["name"], st.st_size))


def repair(home: Home, env_dir: Path, report: Report, mirrors: dict[str, str] | None = None) -> None:
    """Rebuild `env_dir` from its manifest; bad packages are re-extracted from their archives."""
    from ..base.flocks import shared
    from .archives import evict_cache_entry
    from ..lock.file import Record
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
