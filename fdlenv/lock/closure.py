"""Resolving an env file's pip requirements into the libtorch closure, from the index itself.

PyTorch's own wheels are libtorch: `torch/lib`, `torch/include` and
`torch/share/cmake` form a complete libtorch, and its CUDA runtime comes as
`nvidia-*` wheels that `libtorch_cuda.so` finds through its RPATH when they
share one site-packages (ROCm wheels carry their HIP runtime inside
`torch/lib`). So a variant can be locked from wheels.

The resolver is fdlenv's own on resolvelib (pure Python), so locking needs no pip and no extra (a plain
`pip install fdlenv` or `uv tool install fdlenv` locks a variant on demand)
and takes seconds: it reads project pages and PEP 658 metadata through
`fdlenv.index.simpleapi`, side by side, and never downloads a wheel. It resolves
for a fixed target, never this host: CPython `PYTHON` and the manylinux tags
of the env's platform, markers evaluated for that platform (so an x86_64 host
locks linux-aarch64 correctly). Order:
1. resolve the versions with resolvelib, pip's own resolver core, over the
   index (`lock.provider`: its selection policy in one place: pre-releases
   only when asked or nothing else fits, yanked only under `==`, Requires-Python
   from the page else the metadata, the best tag of each version; metadata
   checked against the file's name), backtracking where a pick conflicts;
2. every marker is evaluated for the target's environment, every value of it
   the target's (`target_environment`: `implementation_version` too);
3. keep the libtorch closure, not the whole install: the requested projects,
   plus every wheel reachable from them (markers and extras evaluated for the
   target) that ships platform code without a Python ABI (`py3-none-manylinux...`:
   `nvidia-cublas-cu12`, ...). Python packages (`sympy`: `none-any`) and
   Python extensions (`triton`, `pytorch-triton-rocm`: `cp312-cp312`) are
   walked through but not kept, because a metapackage may carry the runtime
   (torch 2.11 requires `cuda-toolkit[cublas,cudart,...]`, whose extras require
   the `nvidia-*` wheels). A kept wheel's dependencies are the kept wheels it reaches;
   a kept wheel's size is what its page states (PEP 700), else what a HEAD answers
   (`simpleapi.sizes_of`), else left out (the lock records sizes, `lock.write`);
4. torch must be the variant's build (`variants.build_mismatch`: a `cpu` index that
   serves a CUDA torch is refused, exit 2, naming the mapping that served it), before
   anything is written.
An index that lags is transient (a missing page of a root, an empty page: `simpleapi`); an
index that cannot be read is transient and names the ways out (`pipindex.ways_out`).
"""

from __future__ import annotations

from ..index import pipindex, simpleapi
from ..base.deadlines import ROUNDS_VAR, resolve_rounds, result as waited, threads
from ..base.errors import Fail
from ..base.progress import during
from .file import Record
from ..index.provider import FULL, MACHINES, PYTHON, Index, Meta, NoWheel, Provider, Req, is_native, requirements_of, target_environment

TYPE_CHECKING = False   # the env-file reader (urllib) is the caller's: not imported for the realise's check
if TYPE_CHECKING:
    from collections.abc import Collection, Sequence

    from packaging.tags import Tag
    from resolvelib.structs import RequirementInformation

    from ..index.provider import Cand
    from ..index.simpleapi import IndexFile
    from .envfile import EnvFile

__all__ = ["FULL", "PYTHON", "Meta", "NoWheel", "is_native", "requirements_of", "resolve", "resolve_versions",
           "target_environment"]
PARALLEL = 16       # page and metadata requests side by side


def platform_tags(platform: str) -> list[str]:
    arch = MACHINES.get(platform)
    if arch is None:
        raise Fail.permanent(f"--platform: wheel variants lock for {', '.join(MACHINES)} only, not {platform}")
    tags = [f"manylinux_2_{n}_{arch}" for n in range(39, 16, -1)]
    return tags + [f"manylinux2014_{arch}"] + ([f"manylinux2010_{arch}", f"manylinux1_{arch}"] if arch == "x86_64" else []) + [f"linux_{arch}"]


def _tag_ranks(platform: str) -> dict[Tag, int]:
    """Every tag a target wheel may carry -> its preference (lower is better)."""
    from packaging import tags

    major, minor = (int(p) for p in PYTHON.split("."))
    plats = platform_tags(platform)
    ordered = list(tags.cpython_tags((major, minor), [f"cp{major}{minor}"], plats))
    ordered += list(tags.compatible_tags((major, minor), f"cp{major}{minor}", plats))
    return {t: i for i, t in enumerate(ordered)}


def resolve_versions(requirements: Sequence[str], base: str, platform: str, sources: dict[str, str] | None = None
                     ) -> dict[str, tuple[IndexFile, Meta]]:
    """name -> (IndexFile, Meta) of every project the requirements reach on `platform`;
    `sources`: project -> the base URL serving it, where it is not `base`. The walk is
    resolvelib's over `lock.provider` (its policy, in one place); a conflict is one permanent
    error naming the requirements that clash (every version of two roots clashing: found at
    the first backtrack, `index.conflicts`), a root nothing on the index satisfies `NoWheel`;
    the walk is bounded by rounds and a deadline (`base.deadlines`)."""
    from packaging.requirements import Requirement
    from resolvelib import ResolutionImpossible, ResolutionTooDeep, Resolver

    from ..index.conflicts import Learner

    marker_env = target_environment(platform)
    most = resolve_rounds()
    roots = [r for r in map(Requirement, requirements) if r.marker is None or r.marker.evaluate(marker_env)]
    reqs = [Req(pipindex.normalize(r.name), frozenset(pipindex.normalize(e) for e in r.extras), r.specifier)
            for r in roots]
    with threads(PARALLEL, "fdlenv-resolve") as pool:   # a stop leaves the page reads, never waits
        index = Index(base, platform, pool, _tag_ranks(platform), sources)
        provider = Provider(index, marker_env, {r.name for r in reqs})
        for r in reqs:
            provider.prefetch(r)
        try:
            learner = Learner(index, marker_env, reqs, ", ".join(requirements))
            result = Resolver(provider, learner).resolve(reqs, max_rounds=most)
        except ResolutionImpossible as e:
            raise _impossible(index, e.causes) from None
        except ResolutionTooDeep:
            raise Fail.permanent(f"wheel index {base}: no versions of {', '.join(requirements)} found together "
                                 f"within {most} resolution rounds ({ROUNDS_VAR} widens it)") from None
        picked = {n: c.file for n, c in result.mapping.items() if not c.extras and c.file is not None}
        return {n: (f, waited(index.meta(f))) for n, f in picked.items()}   # in slices: a stop is seen


def _impossible(index: Index, causes: Collection[RequirementInformation[Req, Cand]]) -> Fail:
    """A project no wheel of which satisfies what is asked (`NoWheel`), or requirements that clash."""
    names = {c.requirement.name for c in causes}
    if len(names) == 1 and all(c.parent is None for c in causes):
        name = names.pop()
        spec = ",".join(str(c.requirement.specifier) for c in causes if str(c.requirement.specifier))
        return NoWheel(f"wheel index {index.url(name)}: no wheel of {name}{spec or ' (any version)'} "
                       f"for CPython {PYTHON} on {index.platform}")
    said = sorted({f"{c.requirement.name}{c.requirement.specifier or ' (any version)'} (from "
                   + (f"{c.parent.name} {c.parent.version})" if c.parent else "the env file)") for c in causes})
    return Fail.permanent(f"wheel index {index.base}: no versions satisfy every requirement together: "
                          + "; ".join(said))


def resolve(env: EnvFile, platform: str, mirrors: dict[str, str], check: bool = True) -> list[Record]:
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
    entries: dict[str, Record] = {}
    depends: dict[str, dict[str, str]] = {}
    # (project, extras asked of it, nearest kept ancestor): only native wheels are kept, each
    # edge recorded on the nearest kept ancestor.
    roots = [r for r in map(Requirement, env.requirements) if r.marker is None or r.marker.evaluate(marker_env)]
    todo: list[tuple[str, frozenset[str], str | None]] = [
        (pipindex.normalize(r.name), frozenset(r.extras), None) for r in roots]
    walked: set[tuple[str, frozenset[str], str | None]] = set()
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
            entries[name] = Record("pip", name, meta.version, "",
                                   pipindex.entry_url(env.index_of(name, platform), name, f.filename),
                                   f.sha256.lower(), None, platform, (), f.size)
            depends[name] = {}
        for dep, req in requirements_of(meta, extras, marker_env):
            holder = name if kept else owner
            assert holder is not None   # a root is always kept
            if dep in found and is_native(found[dep][0].filename):
                depends[holder][dep] = str(req.specifier)
            todo.append((dep, frozenset(req.extras), holder))
    # Sizes the pages do not state (PyTorch's HTML pages) are asked of the files, side by side;
    # one that does not answer is left out of the lock, not an error.
    unsized = [n for n, e in entries.items() if e.size is None]
    asked = dict(zip(unsized, simpleapi.sizes_of([found[n][0].url for n in unsized]), strict=True))
    entries = {n: e._replace(depends=tuple(sorted(depends[n].items())),
                             size=e.size if e.size is not None else asked[n])
               for n, e in entries.items()}
    return sorted(entries.values(), key=lambda e: e.key)


def _check_torch(env: EnvFile, platform: str, meta: Meta, marker_env: dict[str, str], mirrors: dict[str, str]) -> None:
    """Refuse a torch that is not `env.variant`'s build, naming who served it; nothing is written."""
    from ..names import variants

    requires = {name: str(req.specifier) for name, req in requirements_of(meta, (), marker_env)}
    why = variants.build_mismatch(env.variant, meta.version, requires, meta.listing)
    if why:
        index = env.index_of("torch", platform)
        raise variants.build_refusal(env.variant, why, pipindex.served_by(index, mirrors),
                                     f"nothing was locked ({platform})")
