"""Looking after realised envs: list, verify (and repair); gc is `store/gc.py`.

Everything here reads `.fdlenv/manifest.json` and `conda-meta/`, never the
lock: an env must stay checkable and repairable after its lock moved on.
Repair is `store.heal.repair`: it rebuilds the env from its manifest's records
under the env's key lock (evicting only the package-cache entries whose files
were bad, since envs hard-link them) and swaps it in; gc removes only what no
root, no flodl pointer and no running realise (a held key lock) still uses.
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
from . import pointers, sizes
from .env import Damaged, moved_from, read_manifest, variant_of_dir
from . import health
from .health import Damage, Problem

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
    damaged: str | None = None   # why its manifest is no record (`env.Damaged`)

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "key": self.key, "path": str(self.path), "size": self.size,
                "created": self.created, "active": self.active, "rooted": self.rooted, "damaged": self.damaged}


def env_dirs(home: Home) -> list[Path]:
    """Every env under `envs/`, whole or damaged (what a realise publishes by rename is all that
    lands there; a name without its manifest is a damaged env, not nothing)."""
    if not home.envs.is_dir():
        return []
    return sorted(p for p in home.envs.iterdir() if not p.name.startswith("."))


def variant_of(d: Path) -> str | None:
    """An env's variant: its manifest's, or its name's when the manifest is damaged."""
    try:
        return read_manifest(d)["variant"]
    except Damaged:
        return variant_of_dir(d)


def listing(home: Home) -> list[EnvInfo]:
    live = pointers.live_targets(home)
    label = pointers.active_label(home)
    active = Path(os.path.realpath(home.libtorch / label)) if label else None
    out = []
    for d in env_dirs(home):
        real = Path(os.path.realpath(d))
        on = active is not None and (active == real or real in active.parents)
        try:
            m = read_manifest(d)
        except Damaged as e:   # one damaged entry, named: the others are listed as ever
            out.append(EnvInfo(variant_of_dir(d) or "?", d.name.rpartition("-")[2], d, sizes.of_tree(d), "",
                               on, real in live, e.why))
            continue
        out.append(EnvInfo(m["variant"], m["key"], d, sizes.total(home, [sizes.of_env(home, m, d)]), m["created"],
                           on, real in live))
    return out


class Queued(Record):
    """A file `verify --full` re-hashes."""

    path: str | Path   # where it is (a str for a wheel's files: no Path object per RECORD row)
    shown: str         # as a Problem names it
    expected: str
    how: str           # `expected` in "hex" or "b64"
    package: str
    size: int


class Listed(Record):
    """What the wheels' RECORDs list, per top-level package directory of site-packages."""

    site: Path
    files: dict[str, set[str]]     # a package dir -> the RECORD paths under it
    owners: dict[str, str]         # a package dir -> the wheel that owns it


class Report:
    def __init__(self, env: Path):
        self.env = env
        self.problems: list[Problem] = []
        self.moved_from: str | None = None     # where the env was built, when its home moved since
        # Files whose install wrote the env's path into them (a prefix placeholder): after a move
        # they still name the old path. Reported, not a failure: libtorch, its loader path and
        # activation do not depend on them; a fresh realise under the new home rewrites them.
        self.stale: list[str] = []
        self.damaged: str | None = None        # why the manifest is no record
        self.files: list[Damage] = []          # what the quick check found (`store.health`)

    def to_json(self) -> dict[str, Any]:
        return {"path": str(self.env), "ok": not self.problems, "moved_from": self.moved_from, "damaged": self.damaged,
                "names_old_path": self.stale,
                "problems": [p._asdict() for p in self.problems]}


def verify(env_dir: Path, full: bool = False, home: Home | None = None,
           progress: Callable[[int, int, int, int], None] | None = None) -> Report:
    """By default a few reads per env and one lstat per file: the manifest, the record set
    (conda-meta's files and the wheels' dist-infos against the manifest's records), the
    libtorch root and every file's size and identity against the realise's table
    (`store.heal.check`). `full` walks every file: present, its size, its content re-hashed on
    every core, and every symlink resolving inside the env. `progress(files, bytes, of_files,
    of_bytes)`: called once with the totals queued for hashing, then after each file hashed
    (from the hashing threads)."""
    rep = Report(env_dir)
    try:
        manifest = read_manifest(env_dir)
    except Damaged as e:
        rep.damaged = e.why
        rep.problems.append(Problem(".fdlenv/manifest.json", e.why, "(env)"))
        return rep
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
    listed = _verify_wheels(env_dir, wheels, full, rep, hashes) if wheels else None
    if full:    # the tree walked (unlisted files, links out) in this thread while the lanes hash
        walked: list[tuple[list[Problem], list[Problem]]] = []
        hashed = _hash_all(hashes, progress, meanwhile=lambda: walked.append(_walk_env(env_dir, listed)))
        unlisted, outside = walked[0]
        rep.problems += unlisted + hashed + outside
    else:
        from .health import check_files, owner
        from ..lock.file import Record as Locked

        files = check_files(env_dir)
        if files is None:   # an env realised before the table: by its records' sizes, recorded when whole
            files = by_sizes(env_dir, manifest)
            if not files:
                health.rerecord(env_dir)
        rep.files = files
        records = [Locked.from_json(r) for r in manifest["records"]] if rep.files and home is not None else []
        for d in rep.files:
            r = owner(home.pkgs, records, d)[0] if home is not None else None
            rep.problems.append(Problem(d.path, d.what, r.name if r is not None else "(env)"))
    return rep


def by_sizes(env_dir: Path, m: Any) -> list[Damage]:
    """An env realised before the file table (`store.health`): every file its packages' own
    records name, by presence and size (no hashing), as damage the heal reads."""
    rep, hashes = Report(env_dir), list[Queued]()
    conda = [r for r in m["records"] if r["manager"] == "conda"]
    wheels = [r for r in m["records"] if r["manager"] == "pip"]
    _walk_conda(env_dir, sorted((env_dir / "conda-meta").glob("*.json")), {r["name"]: r["sha256"] for r in conda},
                None, True, rep, hashes)
    site = next(iter(sorted(env_dir.glob("lib/python*/site-packages"))), None)
    if wheels and site is not None:   # a wheel's RECORD names paths under site-packages
        at, rep.problems = len(rep.problems), rep.problems
        listed = _verify_wheels(env_dir, wheels, True, rep, hashes)
        rep.problems += _walk_env(env_dir, listed)[0]
        prefix = site.relative_to(env_dir).as_posix()
        rep.problems[at:] = [p._replace(path=f"{prefix}/{p.path}") for p in rep.problems[at:]]
    return [Damage(p.path, p.what, -1, -1) for p in rep.problems]


def _walk_conda(env_dir: Path, metas: list[Path], want_sha: dict[str, str], old: Path | None, full: bool,
                rep: Report, hashes: list[Queued]) -> None:
    """Each conda package's files as its conda-meta record lists them; what a move left naming
    the old path (`stale`); in `full`, sizes checked and contents queued for hashing."""
    for meta in metas:
        try:
            rec = json.loads(meta.read_text())
        except (OSError, ValueError):
            rec = None
        if not isinstance(rec, dict) or not isinstance(rec.get("name"), str):   # its package is damaged
            rep.problems.append(Problem(f"conda-meta/{meta.name}", "not a record", meta.stem.rsplit("-", 2)[0]))
            continue
        if full and rec.get("sha256") != want_sha.get(rec["name"]):
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


def _hash_all(hashes: list[Queued], progress: Callable[[int, int, int, int], None] | None = None,
              meanwhile: Callable[[], object] = lambda: None) -> list[Problem]:
    """Every queued file re-hashed on the cores this process may use (`usable_cpus`; hashlib
    lets go of the GIL while it hashes). One lane per core, each a thread that takes the next
    file, largest first, from one shared queue: a lane whose core is busy with other work takes
    fewer files and the others do not wait for it (files dealt ahead to fixed lanes made the
    busy core's lane the whole wall time under load). A lane maps one window of a file at a
    time (`hashing.WINDOW`), so the memory held is a window per lane, whatever the env's size.
    `meanwhile()` runs in this thread while the lanes hash (verify's walk of the tree, ~0.3 s
    of cu128's wall time when it ran before or after them), then this thread joins them.
    A failure in one lane (a stop signal in this thread) stops the others at their next file."""
    import base64
    import threading

    order = sorted(range(len(hashes)), key=lambda i: hashes[i].size, reverse=True)
    queue = iter(order)            # next() on it is atomic under the GIL: one file to one lane
    n = max(1, min(usable_cpus(), len(order)))
    found: list[tuple[int, Problem]] = []
    failed: list[BaseException] = []
    tell = progress or (lambda *_: None)
    tell(0, 0, len(hashes), sum(q.size for q in hashes))

    def lane() -> None:
        try:
            for i in queue:
                if failed:
                    return
                path, shown, expected, how, package, size = hashes[i]
                got = hashing.sha256_of_file(path, size=size)
                if how == "b64":
                    got = base64.urlsafe_b64encode(bytes.fromhex(got)).rstrip(b"=").decode()
                if got != expected:
                    found.append((i, Problem(shown, "content differs", package)))
                tell(1, size, 0, 0)
        except BaseException as e:   # noqa: BLE001 - raised again in the caller's thread
            failed.append(e)

    threads = [threading.Thread(target=lane, name="fdlenv-hash", daemon=True) for _ in range(n if order else 0)]
    for t in threads:
        t.start()
    try:
        meanwhile()
    except BaseException as e:   # noqa: BLE001 - the lanes stop at their next file, then it is raised
        failed.append(e)
    for t in threads:
        join(t)   # in slices: a stop signal landing now still stops `verify --full`
    if failed:
        raise failed[0]
    rank = {i: k for k, i in enumerate(order)}
    return [p for _, p in sorted(found, key=lambda f: rank[f[0]])]


def usable_cpus() -> int:
    """The cores this process may run on: its affinity (a cpuset, `taskset`), not the
    machine's count, so a container given 4 of 64 cores runs 4 lanes."""
    try:
        return len(os.sched_getaffinity(0)) or 1
    except (AttributeError, OSError):
        return os.cpu_count() or 1


def _verify_wheels(env_dir: Path, wheels: list[dict[str, Any]], full: bool, rep: Report,
                   hashes: list[Queued]) -> Listed | None:
    """Each wheel's dist-info with its RECORD in the env's site-packages; in `full`, every file
    against its RECORD (present, size; the sha256 queued), and what the RECORDs list per
    package directory, for `_walk_env` (None when not `full` or there is no site-packages)."""
    import csv
    import re

    site = next(iter(sorted(env_dir.glob("lib/python*/site-packages"))), None)
    listed: dict[str, set[str]] = {}   # full: a wheel's top-level package dir -> its RECORD's files there
    infos = {}
    for d in site.glob("*.dist-info") if site else []:
        name, _, version = d.name.removesuffix(".dist-info").rpartition("-")
        infos[(re.sub(r"[-_.]+", "-", name).lower(), version)] = d
    owners: dict[str, str] = {}
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
                top, sep, _ = row[0].partition("/")
                if sep and not top.endswith(".dist-info"):
                    listed.setdefault(top, set()).add(row[0])
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
        for top in listed:
            owners.setdefault(top, w["name"])
    return Listed(site, listed, owners) if full and site is not None else None


def _walk_env(env_dir: Path, listed: Listed | None) -> tuple[list[Problem], list[Problem]]:
    """One walk of the env's tree (`os.scandir`: a symlink is told from its directory entry,
    no lstat per file), for two findings:
    - unlisted: a file in a wheel's package directory that no RECORD lists (planted, or from a
      wheel extracted before RECORD was checked both ways), a problem of that wheel, so a
      repair rebuilds it. Python's own byte-code caches are not the wheel's, nor fdlenv's own
      files in the libtorch root (`.arch`, `build-version`: store.ownfiles);
    - outside: a symlink that resolves outside the env (a package's link to /X would let a
      later write, or the trainer, reach outside the store)."""
    root = os.path.realpath(env_dir)
    tops: dict[str, tuple[str, set[str]]] = {}   # a wheel's package dir (absolute) -> its owner, RECORD's files
    site = ""
    if listed is not None:
        site = f"{listed.site}/"
        for top, files in listed.files.items():
            tops[site + top] = (listed.owners[top], files | {f"{top}/.arch", f"{top}/build-version"})
    unlisted: list[Problem] = []
    outside: list[Problem] = []
    stack: list[tuple[str, tuple[str, set[str]] | None]] = [(str(env_dir), None)]
    while stack:
        folder, within = stack.pop()
        with os.scandir(folder) as it:
            entries = sorted(it, key=lambda e: e.name)
        for e in entries:
            if e.is_symlink():
                real = os.path.realpath(e.path)
                if real != root and not real.startswith(root + os.sep):
                    outside.append(Problem(os.path.relpath(e.path, env_dir),
                                           f"symlink resolves outside the env ({real})", "(env)"))
            if e.is_dir(follow_symlinks=False):
                if within is None or e.name != "__pycache__":
                    stack.append((e.path, within or tops.get(e.path)))
            elif within is not None and not e.is_dir() and (rel := e.path[len(site):]) not in within[1]:
                unlisted.append(Problem(rel, "not in its wheel's RECORD", within[0]))
    return unlisted, outside
