"""A locked package (`Record`), and reading conda-lock v1 files without importing conda-lock.

Any import from conda_lock costs 0.7–1 s (it loads its whole command line),
so the store reads the YAML itself with PyYAML's C loader; the tests check
this reader against conda-lock's own parser on every lock they make.

A variant is category `main` plus category `<variant>` for one platform. A
single-variant lock (all in `main`, as `fdlenv lock --split` writes) is read
as that variant; it is refused for another variant when it names a
`libtorch-<other>` package. conda-lock keys entries by (manager, name,
platform); the same entry repeated under several categories is one record.

Sizes: conda-lock's models forbid unknown fields in an entry, so each file's
size in bytes is recorded once for the whole file, in the one free-form place
conda-lock keeps (`metadata.custom_metadata`, string to string): SIZES_KEY
holds space-separated `<sha256>=<bytes>` pairs, sorted by sha256. A lock
without it (any lock older than the field) reads as sizes unknown.
"""

from __future__ import annotations

from pathlib import Path

from ..names import variants
from ..base.errors import Fail
from ..base.record import Record as TypedRecord

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from typing import Any

    from ..base.hashing import Digest

    Doc = dict[str, Any]   # a YAML document: what PyYAML made of the file, checked where read

FORMS = "a conda-lock v1 file (version: 1, metadata, package: [...]) as `fdlenv lock` writes"
SIZES_KEY = "fdlenv.sizes"


class Record(TypedRecord):
    """One locked package of one platform: what a conda-lock entry holds, and all install and
    verify need. The one model of a locked package: the reader makes it from a lock
    (`read_variant`), the solvers from a solve (`lock.solve`, `lock.closure`), the writer
    writes it (`lock.write`), the store installs it and keeps it in each env's manifest
    (`to_json`). A typed record (`base.record`, a tuple at run time): immutable, hashable, equal field by field;
    dataclasses would cost the install path 10 ms of imports (inspect)."""

    manager: str            # conda | pip
    name: str
    version: str
    build: str              # "": none (a wheel; a conda entry without one takes its file name's)
    url: str
    sha256: str             # lowercase hex
    md5: str | None         # lowercase hex; None: not stated (a wheel resolved from an index)
    platform: str
    # (name, version constraint or ""), in the lock's order (sorted, as fdlenv writes them)
    depends: tuple[tuple[str, str], ...] = ()
    size: int | None = None  # bytes, as the lock records them (SIZES_KEY) or the index states; None: unknown

    @property
    def dependencies(self) -> dict[str, str]:
        """`depends` as conda-lock's mapping of name to constraint."""
        return dict(self.depends)

    @property
    def key(self) -> tuple[str, str, str]:
        """conda-lock's identity of an entry: one build per key per lock file."""
        return (self.manager, self.name, self.platform)

    @property
    def label(self) -> str:
        return f"{self.name}-{self.version}-{self.build}" if self.build else f"{self.name}-{self.version}"

    @property
    def filename(self) -> str:
        return self.url.rsplit("/", 1)[-1].split("#", 1)[0]

    @property
    def subdir(self) -> str:
        # conda URLs end in <channel>/<subdir>/<file>; pip wheels have no subdir.
        return self.url.rsplit("/", 2)[-2] if self.manager == "conda" else ""

    def to_json(self) -> dict[str, object]:
        return {
            "manager": self.manager, "name": self.name, "version": self.version,
            "build": self.build, "url": self.url, "sha256": self.sha256, "md5": self.md5,
            "platform": self.platform, "dependencies": self.dependencies,
        }   # no size: a manifest says what is installed, not how it was fetched

    @classmethod
    def from_json(cls, d: Mapping[str, object]) -> Record:
        """The record `to_json` wrote (an env's manifest)."""
        md5, deps = d.get("md5"), d.get("dependencies")
        return cls(str(d["manager"]), str(d["name"]), str(d["version"]), str(d["build"]), str(d["url"]),
                   str(d["sha256"]), None if md5 is None else str(md5), str(d["platform"]),
                   tuple((str(k), str(v)) for k, v in deps.items()) if isinstance(deps, dict) else ())


_LOADED: dict[bytes, Doc] = {}   # a lock's bytes -> its checked document: a realise reads it twice


def load_lock(path: Path, field: str = "--lock") -> Doc:
    """The lock at `path` as a document (the same object for the same bytes: read it, never
    change it), or one permanent `--lock:` error (never a traceback: nesting that would
    crash libyaml is refused first)."""
    try:
        raw = path.read_bytes()
    except FileNotFoundError:
        raise Fail.permanent(f"{field}: {path} does not exist; expected {FORMS}") from None
    if raw not in _LOADED:
        _LOADED.clear()
        _LOADED[raw] = _parse(raw, path, field)
    return _LOADED[raw]


def _parse(raw: bytes, path: Path, field: str) -> Doc:
    import yaml

    from ..base.yamlfile import YamlError, check_nesting

    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise Fail.permanent(f"{field}: {path} is not UTF-8 text (byte {e.start}); expected {FORMS}") from None
    try:
        check_nesting(text, path)
    except YamlError as e:
        raise Fail.permanent(f"{field}: {path} does not parse as YAML ({e.where}); expected {FORMS}") from None
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as e:
        where = getattr(e, "problem_mark", None)
        at = f" at line {where.line + 1}" if where else ""
        what = " ".join(str(getattr(e, "problem", "") or "").split())
        raise Fail.permanent(f"{field}: {path} does not parse as YAML{at}" + (f" ({what})" if what else "")
                             + f"; expected {FORMS}") from None
    if not isinstance(doc, dict) or doc.get("version") != 1 or not isinstance(doc.get("package"), list):
        raise Fail.permanent(f"{field}: {path} is not {FORMS}")
    for i, entry in enumerate(doc["package"]):
        for key in _SCALARS if isinstance(entry, dict) else ():
            if not isinstance(entry.get(key), (str, int, float, type(None))):
                label = entry["name"] if isinstance(entry.get("name"), str) else f"#{i}"
                raise Fail.permanent(f"{field}: {path}: package {label!r} has a malformed {key}; accepted: "
                                     "a string (regenerate the lock with `fdlenv lock`)")
    return doc


_SCALARS = ("name", "version", "manager", "platform", "url", "category", "build")


def _categories(entry: Doc) -> set[str]:
    cats = entry.get("categories")
    if cats is None:
        cats = [entry.get("category", "main")]
    if isinstance(cats, str) or not isinstance(cats, list):
        cats = [cats]
    return {str(c) for c in cats}


_HEX = frozenset("0123456789abcdef")


def _bad(path: Path, name: str, field: str, accepted: str) -> Fail:
    return Fail.permanent(f"--lock: {path}: package {name!r} has a malformed {field}; accepted: {accepted} "
                          "(regenerate the lock with `fdlenv lock`)")


def sizes(path: Path, doc: Doc) -> dict[str, int]:
    """sha256 -> bytes, from the lock's SIZES_KEY ({} when it has none); malformed: one
    permanent error naming the field."""
    meta = doc.get("metadata")
    custom = meta.get("custom_metadata") if isinstance(meta, dict) else None
    raw = custom.get(SIZES_KEY) if isinstance(custom, dict) else None
    if raw is None:
        return {}
    out = {}
    for word in raw.split() if isinstance(raw, str) else [raw]:
        sha, eq, size = str(word).partition("=")
        if not eq or len(sha) != 64 or not set(sha.lower()) <= _HEX or not size.isdigit():
            raise Fail.permanent(f"--lock: {path}: metadata.custom_metadata.{SIZES_KEY} has {str(word)[:90]!r}; "
                                 "accepted: space-separated <sha256>=<bytes> pairs (regenerate the lock "
                                 "with `fdlenv lock`)")
        out[sha.lower()] = int(size)
    return out


def _record(path: Path, i: int, e: Doc, sizes: dict[str, int] | None = None) -> Record:
    name = e.get("name")
    label = name if isinstance(name, str) else f"#{i}"

    def need(key: str) -> str:
        v = e.get(key)
        if v in (None, ""):
            raise Fail.permanent(f"--lock: {path}: package {label!r} has no {key}; "
                                 "every entry needs name, version, manager, platform, url and hash.sha256")
        if not isinstance(v, (str, int, float)) or isinstance(v, bool):
            raise _bad(path, label, key, "a string")
        return str(v)

    h = e.get("hash")
    if h is None:
        h = {}
    if not isinstance(h, dict):
        raise _bad(path, label, "hash", "a mapping with sha256 (and md5)")
    if not h.get("sha256"):
        raise Fail.permanent(f"--lock: {path}: package {label!r} has no hash.sha256; "
                             "fdlenv verifies every archive by sha256 (regenerate with `fdlenv lock`)")
    sha256, md5 = str(h["sha256"]).lower(), str(h["md5"]).lower() if h.get("md5") else None
    if len(sha256) != 64 or not set(sha256) <= _HEX:
        raise _bad(path, label, "hash.sha256", "64 hex digits")
    if md5 is not None and (len(md5) != 32 or not set(md5) <= _HEX):
        raise _bad(path, label, "hash.md5", "32 hex digits")
    deps = e.get("dependencies")
    if deps is None:
        deps = {}
    if not isinstance(deps, dict) or not all(isinstance(k, str) and isinstance(v, (str, int, float))
                                             for k, v in deps.items()):
        raise _bad(path, label, "dependencies", "a mapping of package name to version constraint")
    manager = need("manager")
    if manager not in ("conda", "pip"):
        raise Fail.permanent(f"--lock: {path}: package {e.get('name')!r} has manager {manager!r}; accepted: conda, pip")
    url = need("url")
    build = e.get("build")
    if build is None and manager == "conda":
        # conda-lock omits build for some writers; the file name carries it.
        stem = url.rsplit("/", 1)[-1].removesuffix(".conda").removesuffix(".tar.bz2")
        build = stem.rsplit("-", 1)[-1]
    return Record(manager, need("name"), need("version"), str(build or ""), url, sha256, md5,
                  need("platform"), tuple((k, str(v)) for k, v in deps.items()), (sizes or {}).get(sha256))


def holds(path: Path, variant: str, platform: str) -> bool:
    """Does the lock at `path` hold `variant` for `platform`? (A lock that does not parse fails.)"""
    entries = load_lock(path)["package"]
    if not all(isinstance(e, dict) for e in entries):
        raise Fail.permanent(f"--lock: {path}: package entries must be mappings; expected {FORMS}")
    named = {c for e in entries for c in _categories(e) if c in variants.VARIANTS}
    here = [e for e in entries if e.get("platform") == platform]
    if named:
        if variant not in named:
            return False
        return any(_categories(e) & {variant, "main"} for e in here)
    packs = {variants.VARIANTS[v].package: v for v in variants.VARIANTS}
    present = {packs[e.get("name")] for e in entries if e.get("name") in packs}
    return bool(here) and (not present or variant in present)


def read_variant(path: Path, variant: str, platform: str) -> list[Record]:
    """The records of `variant` for `platform`, sorted by (manager, name)."""
    doc = load_lock(path)
    entries = doc["package"]
    cats = set()
    for e in entries:
        if not isinstance(e, dict):
            raise Fail.permanent(f"--lock: {path}: package entries must be mappings; expected {FORMS}")
        cats |= _categories(e)
    lock_variants = sorted(c for c in cats if c in variants.VARIANTS)
    if lock_variants:
        if variant not in lock_variants:
            raise Fail.permanent(f"--libtorch: variant {variant!r} is not in {path} (it has: "
                                 + ", ".join(lock_variants) + "); " + variants.VARIANTS[variant].how_to_lock())
        wanted = {"main", variant}
    else:
        _check_single(path, entries, variant)
        wanted = {"main"}
    out: dict[tuple[str, str], Record] = {}
    stated = sizes(path, doc)
    for i, e in enumerate(entries):
        if e.get("platform") != platform or not (_categories(e) & wanted):
            continue
        r = _record(path, i, e, stated)
        prev = out.get((r.manager, r.name))
        if prev and (prev.sha256 != r.sha256):
            raise Fail.permanent(f"--lock: {path}: two different {r.manager} entries for {r.name!r} "
                                 f"on {platform} (conda-lock allows one per manager, name, platform)")
        out[(r.manager, r.name)] = r
    if not out:
        plats = sorted({str(e.get("platform")) for e in entries})
        raise Fail.permanent(f"--lock: {path} has no packages for platform {platform}; it has: "
                             + (", ".join(plats) or "none"))
    return [out[k] for k in sorted(out)]


def _check_single(path: Path, entries: list[Doc], variant: str) -> None:
    """A single-variant lock names at most one libtorch-<variant> package; it must be ours."""
    packs = {variants.VARIANTS[v].package: v for v in variants.VARIANTS}
    present = sorted({packs[e["name"]] for e in entries if e.get("name") in packs})
    if present and variant not in present:
        raise Fail.permanent(f"--libtorch: variant {variant!r} is not in {path} (it has: " + ", ".join(present)
                             + "); " + variants.VARIANTS[variant].how_to_lock())


def mismatch(r: Record, where: str, d: Digest) -> Fail | None:
    """The error for bytes whose `hashing.Digest` `d` is not the record's (None: they match)."""
    sha, md5 = d.sha256, d.md5
    if sha != r.sha256:
        return Fail.permanent(f"archive {r.filename} ({where}) does not match the lock: "
                              f"sha256 {sha} != {r.sha256}; it was tampered with or the lock is stale")
    if r.md5 and md5 != r.md5:
        return Fail.permanent(f"archive {r.filename} ({where}) does not match the lock: md5 {md5} != {r.md5}")
    return None
