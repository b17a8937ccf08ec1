"""Resolving an env file's pip requirements into the libtorch closure, from the index itself.

PyTorch's own wheels are libtorch: `torch/lib`, `torch/include` and
`torch/share/cmake` form a complete libtorch, and its CUDA runtime comes as
`nvidia-*` wheels that `libtorch_cuda.so` finds through its RPATH when they
share one site-packages (ROCm wheels carry their HIP runtime inside
`torch/lib`). So a variant can be locked from wheels.

The resolver is fdlenv's own, so locking needs no pip and no extra (a plain
`pip install fdlenv` or `uv tool install fdlenv` locks a variant on demand)
and takes seconds: it reads project pages and PEP 658 metadata through
`fdlenv.simpleapi`, side by side, and never downloads a wheel. It resolves
for a fixed target, never this host: CPython `PYTHON` and the manylinux tags
of the env's platform, markers evaluated for that platform (so an x86_64 host
locks linux-aarch64 correctly). Order:
1. walk the requirements from the roots, picking for each project the
   highest non-yanked final version that satisfies what is known of it and
   has a wheel for the target (the best tag of that version);
2. check every pick against everything the walk asked of it; a pick that a
   later requirement excludes is re-picked under all of them and the walk
   runs again (bounded), so the result satisfies every requirement it holds;
3. keep the libtorch closure, not the whole install: the requested projects,
   plus every wheel reachable from them (markers and extras evaluated for the
   target) that ships platform code without a Python ABI (`py3-none-manylinux...`:
   `nvidia-cublas-cu12`, ...). Python packages (`sympy`: `none-any`) and
   Python extensions (`triton`, `pytorch-triton-rocm`: `cp312-cp312`) are
   walked through but not kept, because a metapackage may carry the runtime
   (torch 2.11 requires `cuda-toolkit[cublas,cudart,...]`, whose extras require
   the `nvidia-*` wheels). A kept wheel's dependencies are the kept wheels it reaches;
4. torch must be the variant's build (`variants.build_mismatch`: a `cpu` index that
   serves a CUDA torch is refused, exit 2, naming the mapping that served it), before
   anything is written.
An index that lags is transient (a missing page of a root, an empty page: `simpleapi`); an
index that cannot be read is transient and names the ways out (`pipindex.ways_out`).
"""

from __future__ import annotations

import dataclasses
from concurrent.futures import Future, ThreadPoolExecutor

from .. import pipindex, simpleapi
from ..errors import Fail
from ..progress import during
from .entry import Entry
from .envfile import EnvFile, requirement_problem

PYTHON = "3.12"
# The manylinux tags a wheel may carry for each platform (the whole ladder, newest first).
_MANYLINUX = {"linux-64": "x86_64", "linux-aarch64": "aarch64"}
ROUNDS = 8          # re-walks after a pick turned out excluded, before giving up
PARALLEL = 16       # page and metadata requests side by side


def platform_tags(platform: str) -> list[str]:
    arch = _MANYLINUX.get(platform)
    if arch is None:
        raise Fail.permanent(f"--platform: wheel variants lock for {', '.join(_MANYLINUX)} only, not {platform}")
    tags = [f"manylinux_2_{n}_{arch}" for n in range(39, 16, -1)]
    return tags + [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else []) + [f"linux_{arch}"]


def target_environment(platform: str) -> dict[str, str]:
    """PEP 508 marker values of the target (not this host)."""
    from packaging.markers import default_environment

    env: dict[str, str] = dict(default_environment())  # type: ignore[arg-type]  # its values are str
    env.update(python_version=PYTHON, python_full_version=f"{PYTHON}.0", implementation_name="cpython",
               platform_python_implementation="CPython", sys_platform="linux", os_name="posix",
               platform_system="Linux", platform_machine=_MANYLINUX[platform], platform_release="",
               platform_version="")
    return env


def _tag_ranks(platform: str) -> dict:
    """Every tag a target wheel may carry -> its preference (lower is better)."""
    from packaging import tags

    major, minor = (int(p) for p in PYTHON.split("."))
    plats = platform_tags(platform)
    ordered = list(tags.cpython_tags((major, minor), [f"cp{major}{minor}"], plats))
    ordered += list(tags.compatible_tags((major, minor), f"cp{major}{minor}", plats))
    return {t: i for i, t in enumerate(ordered)}


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
        from email.parser import BytesParser
        from email.policy import compat32

        msg = BytesParser(policy=compat32).parsebytes(body, headersonly=True)
        if not msg.get("Name") or not msg.get("Version"):
            raise Fail.permanent(f"wheel index: the metadata of {where} has no Name or Version")
        self.name, self.version = str(msg["Name"]).strip(), str(msg["Version"]).strip()
        self.requires_dist = [str(r) for r in msg.get_all("Requires-Dist") or []]
        self.requires_python = msg.get("Requires-Python")
        self.listing = listing or None   # the wheel's members, when it was read (no PEP 658 file)


class _Index:
    """The index's pages and metadata, each fetched once, side by side; `sources` sends some
    projects to another index's base URL."""

    def __init__(self, base: str, platform: str, pool: ThreadPoolExecutor, sources: dict | None = None):
        self.base, self.platform, self.pool, self.sources = base, platform, pool, sources or {}
        self.ranks = _tag_ranks(platform)
        self.pages: dict[str, Future] = {}
        self.metas: dict[str, Future] = {}

    def files(self, name: str) -> Future:
        if name not in self.pages:
            self.pages[name] = self.pool.submit(simpleapi.project_files, self.sources.get(name, self.base), name)
        return self.pages[name]

    def meta(self, f: simpleapi.IndexFile) -> Future:
        if f.url not in self.metas:
            def read(listing: list[str]) -> Meta:
                return Meta(simpleapi.core_metadata(f, listing), f.filename, listing)

            self.metas[f.url] = self.pool.submit(read, [])
        return self.metas[f.url]

    def pick(self, name: str, spec, required: bool = True) -> simpleapi.IndexFile | None:
        """The best wheel of the highest version of `name` that `spec` allows on the target.
        None when `required` is false and no version has a wheel for the target at all: such a
        project ships no native code there, so it cannot be libtorch (a requirement that excludes
        every wheel the target has still fails)."""
        from packaging.specifiers import SpecifierSet
        from packaging.utils import InvalidWheelFilename, parse_wheel_filename
        from packaging.version import Version

        python = Version(f"{PYTHON}.0")
        best, best_key, compatible = None, None, False
        try:
            files = self.files(name).result()
        except simpleapi.Missing:
            if required:
                raise
            files = []      # a project this index does not carry: no native code of it here
        else:
            if not files:   # an empty page (a cold mirror) would drop a runtime wheel: try again
                raise simpleapi.empty_page(self.sources.get(name, self.base), name)
        for f in files:
            if f.yanked or not f.filename.endswith(".whl"):
                continue
            try:
                _, version, build, tags = parse_wheel_filename(f.filename)
                if f.requires_python and python not in SpecifierSet(f.requires_python):
                    continue
            except (InvalidWheelFilename, ValueError):
                continue
            rank = min((self.ranks[t] for t in tags if t in self.ranks), default=None)
            if rank is None:
                continue
            compatible = True
            if not spec.contains(version):
                continue
            key = (version, -rank, build)
            if best_key is None or key > best_key:
                best, best_key = f, key
        if best is None and not required and not compatible:
            return None
        if best is None:
            raise NoWheel(f"wheel index {self.sources.get(name, self.base)}: no wheel of {name}{spec or ' (any version)'} "
                          f"for CPython {PYTHON} on {self.platform}")
        return best


def requirements_of(meta: Meta, extras, marker_env: dict):
    """(normalised name, Requirement) of each requirement of `meta` that applies on the target
    with `extras` asked of it."""
    from packaging.requirements import InvalidRequirement, Requirement

    for raw in meta.requires_dist:
        try:
            req = Requirement(raw)
        except InvalidRequirement as e:
            raise Fail.permanent(f"wheel index: {meta.name} {meta.version} declares a malformed requirement "
                                 f"{raw!r} ({requirement_problem(e)})") from None
        if req.marker is None or any(req.marker.evaluate(dict(marker_env, extra=e)) for e in {"", *extras}):
            yield pipindex.normalize(req.name), req


def _walk(index: _Index, roots, marker_env: dict, pins: dict) -> tuple[dict, dict]:
    """One walk from the roots: (name -> (file, Meta), name -> SpecifierSet of everything asked)."""
    from packaging.specifiers import SpecifierSet

    needs: dict[str, SpecifierSet] = {}
    chosen: dict[str, tuple] = {}

    def reach(name: str, spec: SpecifierSet) -> None:
        needs[name] = needs.get(name, SpecifierSet()) & spec
        index.files(name)   # its page is fetched now, side by side; picked when it is walked

    todo = []
    required = set()
    for r in roots:
        name = pipindex.normalize(r.name)
        reach(name, r.specifier)
        todo.append((name, frozenset(r.extras)))
        required.add(name)
    seen = set()
    while todo:
        name, extras = todo.pop(0)
        if (name, extras) in seen:
            continue
        seen.add((name, extras))
        if name not in chosen:
            f = index.pick(name, needs[name] & pins.get(name, SpecifierSet()), name in required)
            if f is None:
                continue
            chosen[name] = (f, index.meta(f))
        for dep, req in requirements_of(chosen[name][1].result(), extras, marker_env):
            reach(dep, req.specifier)
            todo.append((dep, frozenset(req.extras)))
    return {n: (f, m.result()) for n, (f, m) in chosen.items()}, needs


def resolve_versions(requirements, base: str, platform: str, sources: dict | None = None) -> dict:
    """name -> (IndexFile, Meta) of every project the requirements reach on `platform`;
    `sources`: project -> the base URL serving it, where it is not `base`."""
    from packaging.requirements import Requirement
    from packaging.utils import parse_wheel_filename

    marker_env = target_environment(platform)
    roots = [r for r in map(Requirement, requirements) if r.marker is None or r.marker.evaluate(marker_env)]
    pins: dict = {}
    with ThreadPoolExecutor(PARALLEL) as pool:
        index = _Index(base, platform, pool, sources)
        for _ in range(ROUNDS):
            chosen, needs = _walk(index, roots, marker_env, pins)
            bad = {n: needs[n] for n, (f, _) in chosen.items()
                   if not needs[n].contains(parse_wheel_filename(f.filename)[1], prereleases=True)}
            if not bad:
                return chosen
            pins.update(bad)
    raise Fail.permanent(f"wheel index {base}: cannot find versions of "
                         + ", ".join(f"{n} {s}" for n, s in sorted(bad.items()))
                         + f" that satisfy every requirement of {', '.join(requirements)} together")


def resolve(env: EnvFile, platform: str, mirrors: dict[str, str], check: bool = True) -> list[Entry]:
    """The libtorch closure of `env.requirements` on `platform`, as pip entries. `check`: refuse a
    torch that is not the variant's build (`variants.build_mismatch`); off only in tests that
    need such a lock to prove the realise refuses it too."""
    from packaging.requirements import Requirement

    if not env.requirements:
        return []
    platform_tags(platform)   # an unsupported platform fails before anything is asked of an index
    index_name = env.index_for(platform)
    base = pipindex.base_url(index_name, mirrors)
    sources = {p: pipindex.base_url(i, mirrors) for p, i in env.pip_sources}
    try:
        with during(f"resolving {', '.join(env.requirements)} for {platform} from {base}"
                    + "".join(f" ({p} from {u})" for p, u in sources.items())):
            found = resolve_versions(env.requirements, base, platform, sources)
    except simpleapi.Unreachable as e:   # name the way out for the index that could not be read
        names = {base: index_name, **{pipindex.base_url(i, mirrors): i for _, i in env.pip_sources}}
        tried = max((u for u in names if e.url.startswith(u)), key=len, default=base)
        raise Fail.retry(e.message + pipindex.ways_out(names[tried], mirrors, env.variant)) from None
    marker_env = target_environment(platform)
    if check and "torch" in found:
        _check_torch(env, platform, found["torch"][1], marker_env, mirrors)
    entries: dict[str, Entry] = {}
    depends: dict[str, dict[str, str]] = {}
    # (project, extras asked of it, nearest kept ancestor): only native wheels are kept, each
    # edge recorded on the nearest kept ancestor.
    roots = [r for r in map(Requirement, env.requirements) if r.marker is None or r.marker.evaluate(marker_env)]
    todo: list[tuple[str, frozenset[str], str | None]] = [
        (pipindex.normalize(r.name), frozenset(r.extras), None) for r in roots]
    walked = set()
    while todo:
        name, extras, owner = todo.pop()
        if (name, extras, owner) in walked or name not in found:
            continue
        walked.add((name, extras, owner))
        f, meta = found[name]
        kept = owner is None or is_native(f.filename)
        if kept and name not in entries:
            if not f.sha256:
                raise Fail.permanent(f"{env.path}: the index {env.index_of(name, platform)} states no sha256 "
                                     f"for {f.filename}; fdlenv locks only hashed wheels")
            entries[name] = Entry("pip", name, meta.version, None, platform,
                                  pipindex.entry_url(env.index_of(name, platform), name, f.filename), "",
                                  f.sha256.lower(), ())
            depends[name] = {}
        for dep, req in requirements_of(meta, extras, marker_env):
            holder = name if kept else owner
            assert holder is not None   # a root is always kept
            if dep in found and is_native(found[dep][0].filename):
                depends[holder][dep] = str(req.specifier)
            todo.append((dep, frozenset(req.extras), holder))
    entries = {n: dataclasses.replace(e, depends=tuple(sorted(depends[n].items()))) for n, e in entries.items()}
    return sorted(entries.values(), key=lambda e: e.key)


def _check_torch(env: EnvFile, platform: str, meta: Meta, marker_env: dict, mirrors: dict[str, str]) -> None:
    """Refuse a torch that is not `env.variant`'s build, naming who served it; nothing is written."""
    from .. import variants

    requires = {name: str(req.specifier) for name, req in requirements_of(meta, (), marker_env)}
    why = variants.build_mismatch(env.variant, meta.version, requires, meta.listing)
    if why:
        index = env.index_of("torch", platform)
        raise variants.build_refusal(env.variant, why, pipindex.served_by(index, mirrors),
                                     f"nothing was locked ({platform})")
