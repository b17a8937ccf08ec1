"""The lock's version walk: resolvelib (pip's resolver core) over `simpleapi`, for a fixed target.

resolvelib backtracks (roots `a`, `b` where `a 2.0` needs `c<2` and `b` needs
`c>=2` lock `a 1.0`), so the walk picks what pip and uv pick from the same
index; this module is its provider, and the selection policy lives in one
place (`candidates`), applied in this order to a project's page:
1. wheels only, with a tag of the target (CPython `PYTHON`, the platform's
   manylinux ladder); the best tag of each version is its one candidate;
2. a file whose `#sha256=` is not 64 hex digits is skipped, with a note;
3. `Requires-Python` from the page, else (lazily, as the candidate is tried)
   from the wheel's own metadata, must admit the target's Python;
4. a yanked file only under an `==`/`===` pin of its version (PEP 592);
5. versions resolvelib found incompatible are dropped;
6. newest first; where no specifier names a pre-release, every final before
   any pre-release, so a pre-release is picked only when no final left
   satisfies every requirement (backtracking included, as uv does).
A project's metadata (PEP 658/714 file checked against its sha256, else a
range read of the wheel) must name the file's project and version. Pages are
fetched side by side (`PARALLEL`) as soon as a requirement names them, and the
newest candidate's metadata as soon as its page arrives. Extras are their own
identifier (`name[x]`), pinned to the same version as the plain project, as
pip does. A non-root project the index does not carry, or carries with no
wheel for the target at all, ships no native code there: it resolves to an
empty candidate (the closure is libtorch's, not the install's).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from typing import NamedTuple

from resolvelib import AbstractProvider

from . import checked, pipindex, simpleapi
from ..base.deadlines import result as waited   # in slices: a stop handed to a reader is seen
from ..base.errors import Fail
from ..base.progress import say

TYPE_CHECKING = False
if TYPE_CHECKING:
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet
    from packaging.tags import Tag
    from packaging.utils import BuildTag
    from packaging.version import Version
    from resolvelib.structs import RequirementInformation

PYTHON = "3.12"
FULL = f"{PYTHON}.0"
# Each platform's machine: its marker value and the arch of its manylinux tags (`closure.platform_tags`).
MACHINES = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}


def target_environment(platform: str) -> dict[str, str]:
    """PEP 508 marker values of the target, every one of them (nothing of this host's)."""
    return dict(python_version=PYTHON, python_full_version=FULL, implementation_name="cpython",
                implementation_version=FULL, platform_python_implementation="CPython", sys_platform="linux",
                os_name="posix", platform_system="Linux", platform_machine=MACHINES[platform],
                platform_release="", platform_version="")


def is_native(filename: str) -> bool:
    """A wheel with platform code and no Python ABI: a native runtime library."""
    from packaging.utils import parse_wheel_filename

    _, _, _, tags = parse_wheel_filename(filename)
    return any(t.abi == "none" and t.platform != "any" for t in tags)


class NoWheel(Fail):
    """The index lists a project but no wheel of it that satisfies the requirement: permanent for
    an env file of the user's (`fdlenv lock`: the file or the index is wrong); lock on demand,
    whose env files are fdlenv's own, reads it as an index that lacks the release (transient)."""


class Meta:
    """What the walk reads of a wheel's core metadata."""

    __slots__ = ("name", "version", "requires_dist", "requires_python", "listing")

    def __init__(self, body: bytes, where: str, listing: list[str] | None = None):
        from email.parser import BytesParser   # its default policy, compat32: email.policy costs 2 ms more

        msg = BytesParser().parsebytes(body, headersonly=True)
        if not msg.get("Name") or not msg.get("Version"):
            raise Fail.permanent(f"wheel index: the metadata of {where} has no Name or Version")
        at = f"wheel index: the metadata of {where}"
        self.name = checked.text(str(msg["Name"]).strip(), "Name", at)
        self.version = checked.text(str(msg["Version"]).strip(), "Version", at)
        self.requires_dist = [checked.text(str(r), "Requires-Dist", at) for r in msg.get_all("Requires-Dist") or []]
        rp = msg.get("Requires-Python")
        self.requires_python = checked.text(str(rp).strip(), "Requires-Python", at) if rp else None
        self.listing = listing or None   # the wheel's members, when it was read (no PEP 658 file)


def requirements_of(meta: Meta, extras: Iterable[str], marker_env: dict[str, str]
                    ) -> Iterator[tuple[str, Requirement]]:
    """(normalised name, Requirement) of each requirement of `meta` that applies on the target
    with `extras` asked of it."""
    from packaging.requirements import InvalidRequirement, Requirement

    for raw in meta.requires_dist:
        try:
            req = Requirement(raw)
        except InvalidRequirement as e:
            raise Fail.permanent(f"wheel index: {meta.name} {meta.version} declares a malformed requirement "
                                 f"{raw!r} ({pipindex.requirement_problem(e)})") from None
        if req.marker is None or any(req.marker.evaluate(dict(marker_env, extra=e)) for e in {"", *extras}):
            yield pipindex.normalize(req.name), req


class Req(NamedTuple):
    name: str                 # normalised
    extras: frozenset[str]
    specifier: SpecifierSet
    pin: Version | None = None  # an extras identifier's plain project: exactly this version


class Cand(NamedTuple):
    name: str
    extras: frozenset[str]
    version: Version | None   # None: a project with no wheel for the target (see above), and no file
    file: simpleapi.IndexFile | None


if TYPE_CHECKING:
    Wheel = tuple[Version, simpleapi.IndexFile]   # a version and its one candidate file: its best tag
    Info = RequirementInformation[Req, Cand]


def ident(name: str, extras: Iterable[str]) -> str:
    return f"{name}[{','.join(sorted(extras))}]" if extras else name


def _hex64(h: str) -> bool:
    return len(h) == 64 and all(c in "0123456789abcdef" for c in h)


class Index:
    """The index's pages and metadata, each fetched once, side by side; `sources` sends some
    projects to another index's base URL. `ranks`: tag -> preference (lower is better)."""

    def __init__(self, base: str, platform: str, pool: ThreadPoolExecutor, ranks: dict[Tag, int],
                 sources: dict[str, str] | None = None):
        self.base, self.platform, self.pool, self.ranks = base, platform, pool, ranks
        self.sources = sources or {}
        self.pages: dict[str, Future[list[simpleapi.IndexFile]]] = {}
        self.metas: dict[str, Future[Meta]] = {}
        self.noted: set[str] = set()
        self.lock = threading.Lock()

    def url(self, name: str) -> str:
        return self.sources.get(name, self.base)

    def files(self, name: str) -> Future[list[simpleapi.IndexFile]]:
        with self.lock:
            if name not in self.pages:
                self.pages[name] = self.pool.submit(simpleapi.project_files, self.url(name), name)
            return self.pages[name]

    def meta(self, f: simpleapi.IndexFile) -> Future[Meta]:
        with self.lock:
            if f.url not in self.metas:
                self.metas[f.url] = self.pool.submit(self._read_meta, f)
            return self.metas[f.url]

    def _read_meta(self, f: simpleapi.IndexFile) -> Meta:
        from packaging.utils import canonicalize_version, parse_wheel_filename
        from packaging.version import InvalidVersion, Version

        listing: list[str] = []
        meta = Meta(simpleapi.core_metadata(f, listing), f.filename, listing)
        name, version, _, _ = parse_wheel_filename(f.filename)
        try:
            same = Version(meta.version) == version
        except InvalidVersion:
            same = False
        if pipindex.normalize(meta.name) != name or not same:
            raise Fail.permanent(f"wheel index: the metadata of {f.filename} states {meta.name} {meta.version}, "
                                 f"not the file's {name} {canonicalize_version(version)}; the index serves "
                                 "metadata of another wheel (broken or hostile)")
        return meta

    def wheels(self, name: str, required: bool) -> list[Wheel] | None:
        """(version, file) of every wheel of `name` with a tag of the target, best tag per
        version, newest first; None for a non-root project with no wheel for the target at all."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet
        from packaging.utils import InvalidWheelFilename, parse_wheel_filename

        try:
            files = waited(self.files(name))
        except simpleapi.Missing:
            if required:
                raise
            return None         # a project this index does not carry: no native code of it here
        if not files:           # an empty page (a cold mirror) would drop a runtime wheel: try again
            raise simpleapi.empty_page(self.url(name), name)
        best: dict[Version, tuple[tuple[int, BuildTag, bool], simpleapi.IndexFile]] = {}
        compatible = False
        for f in files:
            if not f.filename.endswith(".whl"):
                continue
            try:
                _, version, build, tags = parse_wheel_filename(f.filename)
            except (InvalidWheelFilename, ValueError):
                continue
            rank = min((self.ranks[t] for t in tags if t in self.ranks), default=None)
            if rank is None:
                continue
            compatible = True
            try:
                if f.requires_python and not SpecifierSet(f.requires_python).contains(FULL, prereleases=True):
                    continue
            except InvalidSpecifier:
                continue
            if f.sha256 is not None and not _hex64(f.sha256):
                self._note(f"wheel index {self.url(name)}: skipped {f.filename}: its sha256 {f.sha256[:80]!r} "
                           "is not 64 hex digits")
                continue
            key = (-rank, build, not f.yanked)
            if version not in best or key > best[version][0]:
                best[version] = (key, f)
        if not compatible and not required:
            return None         # no wheel for the target at all: it ships no native code here
        return [(v, best[v][1]) for v in sorted(best, reverse=True)]

    def _note(self, text: str) -> None:
        with self.lock:
            if text in self.noted:
                return
            self.noted.add(text)
        say(text)

    def python_ok(self, f: simpleapi.IndexFile) -> bool:
        """The target's Python admitted by `f`'s Requires-Python: the page's, else its metadata's."""
        from packaging.specifiers import InvalidSpecifier, SpecifierSet

        rp = f.requires_python if f.requires_python else waited(self.meta(f)).requires_python
        try:
            return not rp or SpecifierSet(rp).contains(FULL, prereleases=True)
        except InvalidSpecifier:
            return False


def candidates(wheels: list[Wheel], reqs: list[Req], bad: set[Version | None]) -> list[Wheel]:
    """The selection policy: which of `wheels` (newest first) may satisfy all of `reqs`, in order."""
    specs = [r.specifier for r in reqs]
    pins = {r.pin for r in reqs if r.pin is not None}
    exact = [s for spec in specs for s in spec if s.operator == "===" or (s.operator == "==" and "*" not in s.version)]
    explicit = any(spec.prereleases for spec in specs)
    ok = [(v, f) for v, f in wheels
          if all(spec.contains(v, prereleases=True) for spec in specs) and (not pins or v in pins)
          and (not f.yanked or any(s.contains(v, prereleases=True) for s in exact)) and v not in bad]
    if explicit:
        return ok
    return [c for c in ok if not c[0].is_prerelease] + [c for c in ok if c[0].is_prerelease]


class Provider(AbstractProvider[Req, Cand, str]):
    """resolvelib's provider: requirements and candidates over `Index`, for `marker_env`."""

    def __init__(self, index: Index, marker_env: dict[str, str], roots: set[str]):
        self.index, self.env, self.roots = index, marker_env, roots
        self.order: dict[str, int] = {}

    def identify(self, requirement_or_candidate: Req | Cand) -> str:
        return ident(requirement_or_candidate.name, requirement_or_candidate.extras)

    def get_preference(self, identifier: str, resolutions: Mapping[str, Cand],
                       candidates: Mapping[str, Iterator[Cand]], information: Mapping[str, Iterator[Info]],
                       backtrack_causes: Sequence[Info]) -> tuple[bool, int]:
        pinned = any(s.operator in ("==", "===") for i in information[identifier] for s in i.requirement.specifier)
        return (not pinned, self.order.setdefault(identifier, len(self.order)))

    def find_matches(self, identifier: str, requirements: Mapping[str, Iterator[Req]],
                     incompatibilities: Mapping[str, Iterator[Cand]]) -> list[Cand] | Callable[[], Iterator[Cand]]:
        reqs = list(requirements[identifier])
        name, extras = reqs[0].name, reqs[0].extras
        wheels = self.index.wheels(name, name in self.roots)
        if wheels is None:
            return [Cand(name, extras, None, None)]
        bad = {c.version for c in incompatibilities[identifier]}
        picked = candidates(wheels, reqs, bad)

        def lazily() -> Iterator[Cand]:   # Requires-Python of the metadata, read only for the candidates tried
            for v, f in picked:
                if self.index.python_ok(f):
                    yield Cand(name, extras, v, f)
        return lazily

    def is_satisfied_by(self, requirement: Req, candidate: Cand) -> bool:
        if candidate.version is None:
            return True
        if requirement.pin is not None and candidate.version != requirement.pin:
            return False
        return requirement.specifier.contains(candidate.version, prereleases=True)

    def get_dependencies(self, candidate: Cand) -> list[Req]:
        from packaging.specifiers import SpecifierSet

        if candidate.version is None or candidate.file is None:   # one is None only with the other
            return []
        deps = [Req(candidate.name, frozenset(), SpecifierSet(), candidate.version)] if candidate.extras else []
        for dep, req in requirements_of(waited(self.index.meta(candidate.file)), candidate.extras, self.env):
            deps.append(Req(dep, frozenset(pipindex.normalize(e) for e in req.extras), req.specifier))
            self.prefetch(deps[-1])
        return deps

    def prefetch(self, req: Req) -> None:
        """The page of `req` now, and its newest candidate's metadata once the page is in."""
        page = self.index.files(req.name)

        def newest(done: Future[list[simpleapi.IndexFile]]) -> None:
            try:
                picked = candidates(self.index.wheels(req.name, False) or [], [req], set())
                if picked:
                    self.index.meta(picked[0][1])
            except (Fail, RuntimeError, ValueError):   # reported when the walk asks for it
                pass
        page.add_done_callback(newest)

    def narrow_requirement_selection(self, identifiers: Iterable[str], resolutions: Mapping[str, Cand],
                                     candidates: Mapping[str, Iterator[Cand]],
                                     information: Mapping[str, Iterator[Info]],
                                     backtrack_causes: Sequence[Info]) -> Iterable[str]:
        return identifiers
