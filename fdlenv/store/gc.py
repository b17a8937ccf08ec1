"""Garbage collection of the home, and `env remove`.

`env gc` plans and deletes under the store lock held exclusively, so no
realise, repair or install runs meanwhile (they hold it shared). What it
collects, in this order:
1. envs that no root, no flodl pointer, no running realise (a held key lock)
   and no process (a lease) still uses;
2. package-cache entries only those envs linked (a CUDA_HOME template,
   `pkgs/cudahome-*`, once no kept env's `cuda/` links it), and archives (and
   partial downloads) no kept env names;
3. what a killed or finished run left, each by its owner's sweep (`names.home.Sweeper`,
   beside the name it cleans, handed a `names.home.Living` of what stays): the store's in
   `SWEEPERS` (dangling roots `store.pointers`, sizes `store.sizes`, `staging/` and the
   `.trash-*` a killed delete left in `envs/` and `pkgs/` (`debris`), activations
   `store.activation`, re-dial answers `store.fastpath` (whose `.holds` answers stay while a
   kept env has their variant and platform: its re-dial asks them), hash memos
   `store.archives`, key locks and leases `store.leases`), and those of the layers above,
   which the command hands in (`collect(..., sweeps=)`: the store imports none of them): the
   hot memos (`hot.memo`), builds (`source.build`), fetched trees with `--sources`
   (`source.fetch`) and walk-through builds but the newest (`app.walkthrough`).
   `names.home.layout()` claims every name under the home: each is collected by the plan
   (`COLLECTED`), swept by one sweep, or kept with its reason (tests/test_home_layout.py).
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

import os
from collections.abc import Iterable, Iterator, Set as AbstractSet
from pathlib import Path

from ..base import atomic
from ..base.record import Record
from ..base.flocks import exclusive, held
from ..names.home import Home, Living, Sweeper, listing
from . import activation, archives as _archives, fastpath, leases, pointers
from .env import Damaged, read_manifest
from .leases import in_use
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

# The `Home` members whose trees gc never touches (reported as kept when they exist).
NEVER = ("channels", "data", "libtorch")
# The `Home` members the plan itself collects (envs, package-cache entries, archives); every
# other swept member is its owner's sweep's (`Sweeper.covers`).
COLLECTED = ("env_dir", "pkgs", "wheel_entry", "archive", "partial")


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
            remove: str | None = None, sweeps: Iterable[Sweeper] = ()) -> tuple[GcPlan, list[Path]]:
    """Plan and (unless `dry_run`) delete, holding the store lock exclusively; `remove`: a
    variant whose roots and pointers go first (`env remove`), in the same hold, so no realise
    roots it again in between; `sweeps`: the sweeps of the layers above the store (the hot
    memos, builds, sources, the walk-through), handed in by the command. Returns the plan and
    the links dropped (or to drop)."""
    home.ensure(home.locks)
    with exclusive(home.store_lock, "collecting garbage"):
        links = unroot(home, remove, dry_run) if remove else []
        plan = gc_plan(home, sources, skip=set(links), sweeps=sweeps)
        if not dry_run:
            gc(home, plan)
    return plan, links


class _Census(Record):
    """The envs, by whether anything still uses them (each manifest read once)."""

    dead: list[Path]
    dead_sizes: list[tuple[int, list[str]]]
    kept: list[Manifest]
    kept_dirs: list[Path]
    kept_sizes: list[tuple[int, list[str]]]
    kept_damaged: list[Path]       # kept envs whose manifest is damaged


def _key_locks(home: Home, env_dir: Path) -> list[Path]:
    """The key locks an env dir's name (`<variant>-<key16>`) may be held under."""
    return sorted(home.locks.glob(home.key_lock(f"{env_dir.name.rpartition('-')[2]}*").name))


def _census(home: Home, live: AbstractSet[Path]) -> _Census:
    c = _Census([], [], [], [], [], [])
    for d in env_dirs(home):
        try:
            m = read_manifest(d)
        except Damaged:   # one damaged entry: collected as any env nothing uses, its bytes walked
            used = Path(os.path.realpath(d)) in live or in_use(d) or any(held(p) for p in _key_locks(home, d))
            (c.kept_dirs if used else c.dead).append(d)
            if used:
                c.kept_damaged.append(d)
            (c.kept_sizes if used else c.dead_sizes).append((sizes.of_tree(d), []))
            continue
        if Path(os.path.realpath(d)) in live or held(home.key_lock(m["key"])) or in_use(d):
            c.kept.append(m)
            c.kept_dirs.append(d)
            c.kept_sizes.append(sizes.of_env(home, m, d))
        else:
            c.dead.append(d)
            c.dead_sizes.append(sizes.of_env(home, m, d))
    return c


def _living(home: Home, c: _Census, entries: list[Path], sources: bool) -> Living:
    """What the sweeps keep: the kept envs' keys, archives and re-dial questions; a kept env
    whose manifest is damaged keeps its key's locks and its variant's answers."""
    keys = {m["key"] for m in c.kept}
    asked = {f"{m.get('variant')}-{m.get('platform')}" for m in c.kept}   # what their re-dials ask the locks
    for d in c.kept_damaged:
        keys |= {p.stem for p in _key_locks(home, d) if len(p.stem) == 64}
        asked |= fastpath.asked_of(home, d.name.rpartition("-")[0])
    return Living(frozenset(keys), frozenset(d.name for d in c.dead),
                  frozenset(r["sha256"] for m in c.kept for r in m["records"]),
                  frozenset(e.name for e in entries), frozenset(asked), sources)


def gc_plan(home: Home, sources: bool = False, skip: AbstractSet[Path] = frozenset(),
            sweeps: Iterable[Sweeper] = ()) -> GcPlan:
    """What `collect` removes (see the module docstring). Call it under `collect`'s lock;
    `skip`: links to read as gone (a dry run of `env remove`). Costs a manifest read per env,
    never a walk of what is kept (`store.sizes`)."""
    c = _census(home, pointers.live_targets(home, skip))
    wanted = {name for _, names in c.kept_sizes for name in names} | linked_templates(home, c.kept_dirs)
    # A kept env whose manifest is damaged names no entries: while one is kept, no entry goes.
    entries = [] if c.kept_damaged else [e for e in listing(home.pkgs)
                                         if e.is_dir() and not e.name.startswith(".") and e.name not in wanted]
    living = _living(home, c, entries, sources)
    archives = [a for a in listing(home.archives) if a.is_file() and a.name.lstrip(".").split(".", 1)[0]
                not in living.archives]
    other = [found for s in (*SWEEPERS, *sweeps) for found in s.sweep(home, living)]
    total = sum(own for own, _ in c.dead_sizes) + sum(sizes.entry_size(home, e.name) for e in entries) \
        + sum(a.stat().st_size for a in archives) + sum(sizes.of_tree(p) for p, _why in other)
    return GcPlan(c.dead, entries, archives, other, total, _kept(home, c.kept_sizes, sources))


def debris(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """gc's own sweep: what a killed run left in `staging/` (nothing is staged while the store
    lock is held), and the trees a killed delete renamed out of their names (`atomic.discard`)."""
    for p in listing(home.staging):
        yield p, "left in staging by an earlier run"
    for d in (home.envs, home.pkgs):
        for p in sorted(d.glob(f"{atomic.TRASH}*")) if d.is_dir() else ():
            yield p, "what a killed delete left"


# The store's sweeps, each beside what it cleans, in the order their findings are reported.
SWEEPERS = (pointers.SWEEPER, sizes.SWEEPER, Sweeper(("stage",), debris), activation.SWEEPER,
            fastpath.SWEEPER, _archives.SWEEPER, leases.SWEEPER)


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
                 "never_collected": [f"{name}/" for name in NEVER if getattr(home, name).exists()]}
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

    links = pointers.variant_roots(home, variant)
    d = variants.get(variant).flodl_name
    active = pointers.active_label(home)
    for name in (d, d + pointers.OWN_SUFFIX):
        link = home.precompiled / name
        if link.is_symlink():
            links.append(link)
            if not dry_run and active == f"precompiled/{name}":
                atomic.write_text(home.active_pointer, "")   # emptied as flodl does, never half
    if not dry_run:
        for link in links:
            link.unlink()
    return links
