"""Garbage collection of the home, and `env remove`.

`env gc` plans and deletes under the store lock held exclusively, so no
realise, repair or install runs meanwhile (they hold it shared). What it
collects, in this order:
1. envs that no root, no flodl pointer, no running realise (a held key lock)
   and no process (a lease) still uses;
2. package-cache entries only those envs linked (a CUDA_HOME template,
   `pkgs/cudahome-*`, once no kept env's `cuda/` links it), and archives (and
   partial downloads) no kept env names;
3. what a killed or finished run left: `staging/` (nothing is staged while
   the lock is held), the caches of envs that are gone (`cache/activation`,
   `cache/fast`, whose `.holds` answers stay while a kept env has their
   variant and platform: its re-dial asks them, `cache/verified` of archives
   that are gone, the hot memos
   `cache/hot` naming them, read by the reader the command hands in: the store
   imports no cache), the `.trash-*` a killed delete left in `envs/`
   and `pkgs/` (a killed remove's is in `staging/`), their lock
   files when free, built artifacts (`builds/`) made against an env that is
   gone, and walk-through builds but the newest.
An env whose manifest is damaged (`env.Damaged`) is one entry like the others: collected
when nothing uses it (its bytes walked), kept with its key's locks and its variant's answers
when something does; while one is kept, no cache entry goes (it names none).
What it never touches, and reports as kept: `channels/` (what `fdlenv pack`
made: the source of an air-gapped realise), `source/` (the trees a re-dial
pulls into; `--sources` drops those no join holds), `data/` (datasets),
`libtorch/` (flodl's own downloads and builds, and the pointers) and
anything it does not know.

`env remove VARIANT` drops the variant's roots and fdlenv's pointers (and
`.active` when it names them: emptied, as flodl does) and then collects:
what a running process still leases stays until it ends.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterator, Set as AbstractSet
from pathlib import Path

from ..base import atomic
from ..base.record import Record
from ..base.flocks import exclusive, held
from ..names.home import Home
from . import fastpath, pointers
from .env import MANIFEST, Damaged, read_manifest
from .leases import in_use, store_lock
from . import sizes
from .maintain import env_dirs

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any, TypedDict

    class _Kept(TypedDict):
        envs: int                  # bytes of the kept envs (each inode once)
        never_collected: list[str]  # `dir/` of each tree gc never touches that exists

    from .env import Manifest

    class Kept(_Kept, total=False):
        source: str                # why source/ stays (without --sources)

NEVER = ("channels", "data", "libtorch")
# The env directory a hot memo names (None: no whole memo): `hot.replay.memo_env`, handed in by
# the command so that the store never imports the memo; without it `cache/hot` is left alone.
MemoReader = Callable[[str], "str | None"]


class GcPlan(Record):
    """What `env gc` removes, and what it keeps."""

    envs: list[Path]
    cache_entries: list[Path]
    archives: list[Path]
    other: list[tuple[Path, str]]    # (path, why)
    bytes: int                       # what goes (each inode once)
    kept: Kept                       # what stays

    def to_json(self) -> dict[str, Any]:
        return {"envs": [str(p) for p in self.envs], "cache_entries": [str(p) for p in self.cache_entries],
                "archives": [str(p) for p in self.archives],
                "other": [{"path": str(p), "why": why} for p, why in self.other],
                "bytes": self.bytes, "kept": self.kept}


def collect(home: Home, dry_run: bool = False, sources: bool = False,
            remove: str | None = None, memo_env: MemoReader | None = None) -> tuple[GcPlan, list[Path]]:
    """Plan and (unless `dry_run`) delete, holding the store lock exclusively; `remove`: a
    variant whose roots and pointers go first (`env remove`), in the same hold, so no realise
    roots it again in between. Returns the plan and the links dropped (or to drop)."""
    home.ensure(home.locks)
    with exclusive(store_lock(home.locks), "collecting garbage"):
        links = unroot(home, remove, dry_run) if remove else []
        plan = gc_plan(home, sources, skip=set(links), memo_env=memo_env)
        if not dry_run:
            gc(home, plan)
    return plan, links


def gc_plan(home: Home, sources: bool = False, skip: AbstractSet[Path] = frozenset(),
            memo_env: MemoReader | None = None) -> GcPlan:
    """What `collect` removes (see the module docstring). Call it under `collect`'s lock;
    `skip`: links to read as gone (a dry run of `env remove`). Costs a manifest read per env,
    never a walk of what is kept (`store.sizes`)."""
    live = pointers.live_targets(home, skip)
    dead: list[Path] = []
    kept: list[Manifest] = []      # manifests, each read once
    held_sizes: list[tuple[int, list[str]]] = []
    dead_sizes: list[tuple[int, list[str]]] = []
    kept_dirs: list[Path] = []
    kept_damaged: list[Path] = []   # kept envs whose manifest is damaged
    for d in env_dirs(home):
        try:
            m = read_manifest(d)
        except Damaged:   # one damaged entry: collected as any env nothing uses, its bytes walked
            used = Path(os.path.realpath(d)) in live or in_use(d) or any(
                held(p) for p in home.locks.glob(f"{d.name.rpartition('-')[2]}*.lock"))
            (kept_dirs if used else dead).append(d)
            if used:
                kept_damaged.append(d)
            (held_sizes if used else dead_sizes).append((sizes.of_tree(d), []))
            continue
        if Path(os.path.realpath(d)) in live or held(home.locks / f"{m['key']}.lock") or in_use(d):
            kept.append(m)
            kept_dirs.append(d)
            held_sizes.append(sizes.of_env(home, m, d))
        else:
            dead.append(d)
            dead_sizes.append(sizes.of_env(home, m, d))
    wanted_entries = {name for _, names in held_sizes for name in names} | linked_templates(home, kept_dirs)
    # A kept env whose manifest is damaged names no entries: while one is kept, no entry goes.
    damaged_kept = bool(kept_damaged)
    entries = [e for e in sorted(home.pkgs.iterdir()) if e.is_dir() and not e.name.startswith(".")
               and e.name not in wanted_entries] if home.pkgs.is_dir() and not damaged_kept else []
    total = sum(own for own, _ in dead_sizes) + sum(sizes.entry_size(home, e.name) for e in entries)
    kept_keys = {m["key"] for m in kept}
    wanted = {r["sha256"] for m in kept for r in m["records"]}
    archives = []
    if home.archives.is_dir():
        for a in sorted(home.archives.iterdir()):
            sha = a.name.lstrip(".").split(".", 1)[0]
            if a.is_file() and sha not in wanted:
                archives.append(a)
                total += a.stat().st_size
    asked = {f"{m.get('variant')}-{m.get('platform')}" for m in kept}   # what their re-dials ask the locks
    for d in kept_damaged:   # a kept damaged env: its key's locks, its answers
        kept_keys |= {p.stem for p in home.locks.glob(f"{d.name.rpartition('-')[2]}*.lock") if len(p.stem) == 64}
        asked |= {q for f in (home.cache / "fast").glob(f"*-{d.name.rpartition('-')[0]}-*{fastpath.HOLDS}")
                  if (q := fastpath.holds_asked(f))}
    other = list(_leftovers(home, kept_keys, {d.name for d in dead}, wanted, sources,
                            {e.name for e in entries}, asked, memo_env))
    total += sum(sizes.of_tree(p) for p, _why in other)
    return GcPlan(dead, entries, archives, other, total, _kept(home, held_sizes, sources))


def _leftovers(home: Home, keys: set[str], dead: set[str], wanted: set[str], sources: bool, dead_entries: set[str],
               asked: set[str], memo_env: MemoReader | None) -> Iterator[tuple[Path, str]]:
    """Step 3 of the module docstring: (path, why)."""
    for p in sorted(home.roots.iterdir()) if home.roots.is_dir() else ():
        if p.is_symlink() and not p.exists():
            yield p, "a root whose env is gone (deleted by hand?)"
    sized = home.cache / "sizes"
    for p in sorted(sized.iterdir()) if sized.is_dir() else ():
        if p.name in dead_entries or not (home.pkgs / p.name).is_dir():
            yield p, "size of a cache entry that is gone"
    if home.staging.is_dir():
        for p in sorted(home.staging.iterdir()):
            yield p, "left in staging by an earlier run"
    for d in (home.envs, home.pkgs):   # renamed out of its name by a delete that was killed
        for p in sorted(d.glob(f"{atomic.TRASH}*")) if d.is_dir() else ():
            yield p, "what a killed delete left"
    hot = home.cache / "hot"
    for p in sorted(hot.iterdir()) if memo_env is not None and hot.is_dir() else ():
        env = None if p.name.startswith(".") or memo_env is None else memo_env(str(p))
        if env is not None and (os.path.basename(env) in dead or not (home.envs / os.path.basename(env) / MANIFEST).is_file()):
            yield p, "memo of an env that is gone"
    activations = home.cache / "activation"
    for p in sorted(activations.iterdir()) if activations.is_dir() else ():
        if p.name.split("-", 1)[0] not in keys:
            yield p, "activation of an env that is gone"
    fast = home.cache / "fast"
    for p in sorted(fast.iterdir()) if fast.is_dir() else ():
        if (variant_platform := fastpath.holds_asked(p)) is not None:   # whether a lock holds it
            if variant_platform not in asked:
                yield p, "whether a lock holds a variant no kept env has"
        elif not _fast_alive(home, p, dead):
            yield p, "re-dial answer naming an env that is gone"
    verified = home.cache / "verified"
    for p in sorted(verified.iterdir()) if verified.is_dir() else ():
        if p.name.split(".", 1)[0] not in wanted:
            yield p, "hash memo of an archive no kept env names"
    for p in sorted(home.locks.glob("*.lock")) if home.locks.is_dir() else ():
        if len(p.stem) == 64 and p.stem not in keys and not held(p):
            yield p, "lock of an env that is gone"
            if p.with_suffix(".holder").exists():
                yield p.with_suffix(".holder"), "lock of an env that is gone"
        elif p.stem.startswith("use-") and not (home.envs / p.stem[4:]).exists() and not held(p):
            yield p, "lease of an env that is gone"
    for p in sorted(home.builds.iterdir()) if home.builds.is_dir() else ():
        if p.name.startswith(".staging-") and not held(home.locks / f"build-{p.name[9:].rsplit('-', 1)[0]}.lock"):
            yield p, "a killed build's staging"
        elif not p.name.startswith("."):
            try:
                env = json.loads((p / ".fdlenv-build.json").read_text()).get("env")
            except (OSError, ValueError):
                env = None
            if env is not None and not env.startswith("flodl-") and env not in keys:
                yield p, "built against an env that is gone"
    walk = home.root / "walkthrough" / "build"
    builds = sorted((p for p in walk.iterdir() if p.is_dir()), key=lambda p: p.stat().st_mtime) \
        if walk.is_dir() else []
    for p in builds[:-1]:
        yield p, "an older walk-through build"
    if sources and home.source.is_dir():
        for p in sorted(home.source.iterdir()):
            if p.is_dir() and not held(home.locks / f"source-{p.name}.lock"):
                yield p, "a fetched source tree no join holds (--sources)"


def _fast_alive(home: Home, entry: Path, dead: set[str]) -> bool:
    try:
        name = json.loads(entry.read_text())["dir"]
        return name not in dead and (home.envs / name / MANIFEST).is_file()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def linked_templates(home: Home, kept_dirs: list[Path]) -> set[str]:
    """The CUDA_HOME templates (`pkgs/cudahome-*`, `store.cudahome`) a kept env's `cuda/` links:
    one of the template's symlinks and the env's at the same place are one inode."""
    out = set()
    for t in sorted(home.pkgs.glob("cudahome-*")) if home.pkgs.is_dir() else ():
        try:
            rel = next(f"lib64/{n}" for n in sorted(os.listdir(t / "lib64")))
            mine = os.lstat(t / rel)
        except (OSError, StopIteration):
            continue    # no symlink to compare: nothing links it
        for d in kept_dirs:
            try:
                st = os.lstat(d / "cuda" / rel)
            except OSError:
                continue
            if (st.st_dev, st.st_ino) == (mine.st_dev, mine.st_ino):
                out.add(t.name)
                break
    return out


def _kept(home: Home, kept_envs: list[tuple[int, list[str]]], sources: bool) -> Kept:
    """What stays, by identifier: `envs` in bytes (each inode once); the trees gc never touches are
    named, not walked (a dataset under data/ may hold millions of files)."""
    out: Kept = {"envs": sizes.total(home, kept_envs),
                 "never_collected": [f"{name}/" for name in NEVER if (home.root / name).exists()]}
    if not sources and home.source.exists():
        out["source"] = "kept; --sources drops the trees no join holds"
    return out


def gc(home: Home, plan: GcPlan) -> None:
    home.ensure(home.staging)
    # Every tree is renamed out of its name first (`atomic.discard`): a kill -9 at any point
    # leaves each env and cache entry whole or gone, never half deleted under its name.
    for d in plan.envs:
        atomic.discard(d, home.staging)
    for e in plan.cache_entries:
        atomic.discard(e)
        e.with_name(e.name + ".lock").unlink(missing_ok=True)
    for a in plan.archives:
        a.unlink(missing_ok=True)
    for p, _why in plan.other:
        if p.is_dir() and not p.is_symlink():
            atomic.discard(p, home.staging if p.parent != home.staging else None)
        else:
            p.unlink(missing_ok=True)


def unroot(home: Home, variant: str, dry_run: bool = False) -> list[Path]:
    """Drop `variant`'s roots and fdlenv's pointers to it (and empty `.active` when it names
    one, as flodl does); returns the links. flodl's own download is never touched."""
    from ..names import variants

    links = [p for p in sorted(home.roots.glob(f"{variant}-*")) if p.is_symlink()] \
        if home.roots.is_dir() else []
    d = variants.get(variant).flodl_name
    active = pointers.active_label(home)
    for name in (d, d + pointers.OWN_SUFFIX):
        link = home.libtorch / "precompiled" / name
        if link.is_symlink():
            links.append(link)
            if not dry_run and active == f"precompiled/{name}":
                atomic.write_text(home.libtorch / ".active", "")   # emptied as flodl does, never half
    if not dry_run:
        for link in links:
            link.unlink()
    return links
