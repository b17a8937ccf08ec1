"""`fdlenv lock --check`: does the lock still satisfy the env files?

Satisfiability, not an input-hash comparison (conda-lock's content_hash
changes with any edit, even a harmless one). For each variant and platform,
the records of `main` + the variant's category must:
- satisfy every spec of the env file (name, version and build constraints,
  and an `alias::` channel pin);
- come only from channels the env file names (after the mirror map);
- be closed under their own dependencies, with virtual dependencies met by
  the variant's declared virtual packages;
- hold nothing the specs no longer reach;
- hold every `pip:` wheel with the sha256 of its current bytes, and no other.
Each failure is one line naming the variant, platform and package. A variant
(or a platform of one) that the lock does not hold is not stale, unless asked
for by name: it is locked on demand where it is first asked for.
"""

from __future__ import annotations

from pathlib import Path

from ..base.errors import Fail
from ..names.home import Home
from ..names.variants import VARIANTS
from ..index.mirrors import ChannelMap
from .envfile import EnvFile, channel_map, discover, load_layer, with_layer
from .extra import require
from .paths import split_path
from .solve import channel_urls, declared_virtual_packages, solver_spec
from .write import LAYERS_KEY, VARIANTS_KEY

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # conda-lock's models (it ships no type information: mypy reads them as Any)
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile
    from rattler import PackageRecord


def covered_variants(lockfile: Lockfile) -> list[str]:
    """The variants a parsed lock serves: fdlenv's metadata, else its non-main categories,
    else (an all-`main` lock of another writer) the variants whose libtorch package it holds."""
    custom = lockfile.metadata.custom_metadata or {}
    if VARIANTS_KEY in custom:
        return str(custom[VARIANTS_KEY]).split()
    categories = sorted({c for p in lockfile.package for c in p.categories} - {"main"})
    names = {p.name for p in lockfile.package}
    return categories or [v.name for v in VARIANTS.values() if v.package in names]


def _parse(path: Path, parse_conda_lock_file: Callable[[Path], Lockfile]) -> Lockfile:
    """conda-lock's own parse of `path`, after fdlenv's reader has refused what would crash it
    (nesting, non-UTF-8, not v1); what conda-lock still rejects is one permanent error."""
    from .file import load_lock

    load_lock(path, "--out")
    try:
        return parse_conda_lock_file(path)
    except (ValueError, TypeError, KeyError, RecursionError) as e:   # pydantic's errors are ValueErrors
        detail = " ".join(str(e).split())[:300]
        raise Fail.permanent(f"--out {path}: not a lock conda-lock reads ({type(e).__name__}: {detail}); "
                             "regenerate it with `fdlenv lock`") from None
    except Exception as e:   # noqa: BLE001 - conda-lock's own exception types (UnknownLockfileVersion)
        raise Fail.permanent(f"--out {path}: {e}; regenerate it with `fdlenv lock`") from None


def check_locks(envs_dir: Path, out: Path, *, variants: list[str] | None = None,
                platforms: list[str] | None = None, mirrors: dict[str, str] | None = None,
                home: Home) -> list[str]:
    """Problems that make the lock at `out` (or its `--split` files) stale; [] when none."""
    require("conda_lock")
    from conda_lock.lockfile import parse_conda_lock_file

    cmap = channel_map(home, mirrors)
    out = Path(out)
    parsed: dict[Path, Lockfile] = {}
    problems: list[str] = []
    for env in discover(Path(envs_dir), variants):
        lockfile = None
        for candidate in (out, split_path(out, env.variant)):
            if candidate.is_file():
                if candidate not in parsed:
                    parsed[candidate] = _parse(candidate, parse_conda_lock_file)
                if env.variant in covered_variants(parsed[candidate]):
                    lockfile = parsed[candidate]
                    break
        if lockfile is None:
            if variants:   # asked for by name; otherwise a variant no lock holds is locked on demand
                problems.append(f"{env.variant}: not locked in {out} nor {split_path(out, env.variant)}")
            continue
        for layer in (lockfile.metadata.custom_metadata or {}).get(LAYERS_KEY, "").split():
            env = with_layer(env, load_layer(Path(envs_dir), layer))
        held = {p.platform for p in lockfile.package if p.categories & {"main", env.variant}}
        # The platforms asked for, else those of the env file the lock holds (another one is
        # locked on demand where it is first asked for), else every one the env file names.
        wanted = platforms or [p for p in env.platforms if p in held] or env.platforms \
            or lockfile.metadata.platforms
        for platform in wanted:
            records = [p for p in lockfile.package
                       if p.platform == platform and p.categories & {"main", env.variant}]
            if not records:
                problems.append(f"{env.variant} ({platform}): the lock has no packages for this platform")
                continue
            problems += [f"{env.variant} ({platform}): {line}"
                         for line in _check_platform(env, platform, records, cmap)]
    return problems


def _check_platform(env: EnvFile, platform: str, records: list[LockedDependency], cmap: ChannelMap) -> list[str]:
    import rattler

    conda = {p.name: p for p in records if p.manager == "conda"}
    pip = {p.name: p for p in records if p.manager == "pip"}
    bases = [rattler.Channel(url).base_url for url in channel_urls(env, cmap)]
    lines = [f"{p.name} comes from {p.url.rsplit('/', 2)[0]}, a channel {env.path} does not name"
             for p in conda.values() if not any(p.url.startswith(b) for b in bases)]

    reached: list[str] = []
    for spec in env.specs:
        pinned = rattler.MatchSpec(solver_spec(spec, cmap), strict=False)
        name = pinned.name.normalized
        locked = conda.get(name)
        if locked is None:
            lines.append(f"{spec!r}: nothing named {name} is locked")
            continue
        if not rattler.MatchSpec(spec.partition("::")[2] or spec, strict=False).matches(_record(locked)):
            lines.append(f"{spec!r}: the lock has {name} {locked.version} ({locked.build}), which does not satisfy it")
        if pinned.channel is not None and not locked.url.startswith(pinned.channel.base_url):
            lines.append(f"{spec!r}: the lock's {name} comes from {locked.url.rsplit('/', 2)[0]}")
        reached.append(name)

    virtual = dict(declared_virtual_packages(env.variant, platform))
    seen = set(reached)
    while reached:
        package = conda[reached.pop()]
        for dep, constraint in package.dependencies.items():
            if dep.startswith("__"):
                if dep not in virtual or not _satisfies(dep, constraint, _virtual(dep, virtual[dep], platform)):
                    declared = f"{dep} {virtual[dep]}" if dep in virtual else f"no {dep}"
                    lines.append(f"{package.name} needs {dep} {constraint}".rstrip()
                                 + f"; variant {env.variant} declares {declared}")
            elif dep not in conda:
                lines.append(f"{package.name} needs {dep}, which is not locked")
            elif not _satisfies(dep, constraint, _record(conda[dep])):
                lines.append(f"{package.name} needs {dep} {constraint}; the lock has {conda[dep].version}")
            elif dep not in seen:
                seen.add(dep)
                reached.append(dep)
    lines += [f"{name} is locked but nothing in {env.path} needs it" for name in sorted(set(conda) - seen)]

    wanted = {w.name: w for w in env.wheels}
    for name, wheel in sorted(wanted.items()):
        if name not in pip:
            lines.append(f"pip wheel {name} is not locked")
        elif pip[name].hash.sha256 != wheel.sha256:
            lines.append(f"pip wheel {name} changed (lock sha256 {pip[name].hash.sha256}, file {wheel.sha256})")
    reached_pip = set(wanted) | _check_requirements(env, pip, lines, platform)
    lines += [f"pip {name} is locked but {env.path} no longer needs it" for name in sorted(set(pip) - reached_pip)]
    return lines


def _check_requirements(env: EnvFile, pip: dict[str, LockedDependency], lines: list[str], platform: str) -> set[str]:
    """Requirement strings: each satisfied by a wheel of the named index, the closure intact.
    Offline: what the index serves today is `fdlenv lock`'s business, not `--check`'s."""
    from packaging.requirements import Requirement
    from packaging.specifiers import SpecifierSet

    from ..index import pipindex

    from .closure import target_environment

    target = target_environment(platform)
    todo = []
    for text in env.requirements:
        req = Requirement(text)
        if req.marker is not None and not req.marker.evaluate(target):
            continue   # not for this platform
        name = pipindex.normalize(req.name)
        if name not in pip:
            lines.append(f"pip {text!r}: nothing named {name} is locked")
        else:
            if not req.specifier.contains(pip[name].version, prereleases=True):
                lines.append(f"pip {text!r}: the lock has {name} {pip[name].version}, which does not satisfy it")
            todo.append(name)
    seen = set(todo)
    while todo:
        entry = pip[todo.pop()]
        index = env.index_of(entry.name, entry.platform)
        if not pipindex.is_entry_url(entry.url) or pipindex.parse_entry_url(entry.url)[0] != index:
            lines.append(f"pip {entry.name} does not come from the index {index} that {env.path} names")
        for dep, constraint in entry.dependencies.items():
            if dep not in pip:
                lines.append(f"pip {entry.name} needs {dep}, which is not locked")
            elif constraint and not SpecifierSet(constraint).contains(pip[dep].version, prereleases=True):
                lines.append(f"pip {entry.name} needs {dep} {constraint}; the lock has {pip[dep].version}")
            elif dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def _satisfies(name: str, constraint: str, record: PackageRecord) -> bool:
    import rattler

    return not constraint or rattler.MatchSpec(f"{name} {constraint}", strict=False).matches(record)


def _record(locked: LockedDependency) -> PackageRecord:
    """A rattler PackageRecord for matching a lock entry (build and subdir from its URL)."""
    import rattler

    head, subdir, filename = locked.url.rsplit("/", 2)
    stem = filename.removesuffix(".conda").removesuffix(".tar.bz2")
    build = locked.build or stem.rsplit("-", 2)[-1]
    return rattler.PackageRecord(locked.name, locked.version, rattler.BuildString(build), 0, subdir)


def _virtual(name: str, version: str, platform: str) -> PackageRecord:
    import rattler

    return rattler.PackageRecord(name, version, rattler.BuildString("0"), 0, platform)
