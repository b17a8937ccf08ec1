"""Damage found in an env before anything runs in it, and healed: the per-attempt check's other half.

`store.health` says which files of an env are not what the realise made; this module says
whose they are and makes the env whole again, in order:
1. `check`: the manifest (`env.read_manifest`: a damaged one is the whole env's damage),
   then every file (`health.check_files`; an env realised before the table existed is
   checked by the sizes its packages' own records state, and recorded again when they match).
2. `heal`: each damaged file's owner is the package whose cache entry holds that path (the
   last wheel in the lock's order, as `linktree` links them). Where the cache entry still
   holds the recorded file (only the env's link was deleted or replaced), it is relinked
   as it is; where the damage is in the entry itself (a hard link shares its inode: a file
   truncated in the env is truncated in the cache), the entry is evicted, renamed out of its
   name first and never edited in place, and fetched again through the same index and
   mirrors. The env is then built again beside itself and swapped in by one rename
   (`install.build(replace=True)`), under the store lock shared and the env's key lock, as a
   realise publishes. An env whose manifest is damaged is rebuilt from its lock's records
   when a lock is in hand (its key must name the same directory); `repair` (`env verify
   --repair`) removes it instead, with the links naming it (`remove_damaged`).
3. A failure of step 2 (the index away) is the attempt's failure, naming the env and the
   first damaged file, and of the same class as its cause: transient when the index may
   come back. Nothing runs in a damaged env.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.errors import Fail
from ..base.record import Record
from ..names.home import Home
from . import health, maintain
from .env import Damaged, Env, from_dir, read_manifest

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..lock.file import Record as Locked
    from .env import Manifest


class Found(Record):
    """What `check` found in one env: its manifest (None when damaged: `damaged` says why) and
    its damaged files; `sized`: checked by the packages' sizes (no table to check against)."""

    env: Path
    manifest: Manifest | None
    damaged: str | None
    files: list[health.Damage]
    sized: bool = False

    @property
    def ok(self) -> bool:
        return self.damaged is None and not self.files

    def first(self) -> str:
        """The first damage, as one phrase."""
        if self.damaged is not None:
            return f"its manifest: {self.damaged}"
        if not self.files:
            return "its packages' content"
        more = f" (and {len(self.files) - 1} more)" if len(self.files) > 1 else ""
        return f"{self.files[0].path}: {self.files[0].what}{more}"


def check(env_dir: Path) -> Found:
    """Step 1 of the module docstring: a few reads and one lstat per file."""
    try:
        m = read_manifest(env_dir)
    except Damaged as e:
        return Found(Path(env_dir), None, e.why, [])
    files = health.check_files(env_dir)
    if files is not None:
        return Found(Path(env_dir), m, None, files)
    files = maintain.by_sizes(env_dir, m)
    if not files:
        health.rerecord(env_dir)   # an older env: recorded now, checked by identity from here on
    return Found(Path(env_dir), m, None, files, sized=True)


def heal(home: Home, env_dir: Path, found: Found, mirrors: dict[str, str], *, lock: Path | None = None,
         digest: str | None = None, platform: str | None = None, evict: list[Locked] | None = None) -> list[str]:
    """Step 2: make the env whole; returns the packages fetched again. Raises a Fail naming the
    env and the damage when it cannot (step 3). `evict`: packages to fetch again whatever the
    table says (`verify --full` found their content bad)."""
    from ..base.flocks import exclusive, shared
    from .archives import evict_cache_entry
    from .install import build
    from ..lock.file import Record as Locked

    variant = found.manifest["variant"] if found.manifest else env_dir.name.rpartition("-")[0]
    if found.manifest is not None:
        m = found.manifest
        records = [Locked.from_json(r) for r in m["records"]]
        key, platform, lock_path, lock_sha = m["key"], m["platform"], Path(m["lock"]["path"]), m["lock"]["sha256"]
    elif lock is not None and digest is not None and platform is not None:
        from ..lock.file import read_variant
        from .envkey import env_dirname, env_key

        records = read_variant(lock, variant, platform)
        key, lock_path, lock_sha = env_key(records, platform), lock, digest
        if env_dirname(variant, key) != env_dir.name:
            raise _refused(env_dir, found, "its lock now names another env; `fdlenv env verify --repair` removes it")
    else:
        raise _refused(env_dir, found, "no lock in view holds its records: `fdlenv env verify --repair` removes "
                       "it, and a realise from its lock builds it again")
    from .sizes import entry_name

    fetch = list(evict or [])
    for d in found.files:
        r, whole = health.owner(home.pkgs, records, d)
        if r is not None and not whole and r not in fetch:
            fetch.append(r)
    # An entry already gone from the cache (a heal that could not fetch it) is fetched too.
    fetch += [r for r in records if r not in fetch and not (home.pkgs / entry_name(r)).is_dir()]
    from ..base.progress import say

    say(f"{env_dir.name} is damaged ({found.first()}); "
        + (f"fetching {', '.join(f'{r.name} {r.version}' for r in fetch)} again and relinking it"
           if fetch else "relinking it from the package cache"))
    try:
        with shared(home.store_lock, f"healing {variant}"), \
                exclusive(home.key_lock(key), f"healing {variant}"):
            for r in fetch:
                evict_cache_entry(home, r)   # renamed out of its name: a new entry replaces it
            build(home, variant, key, records, env_dir, lock_path, lock_sha, platform or "", mirrors, replace=True)
    except Fail as e:
        raise Fail(f"the env {env_dir.name} ({env_dir}) is damaged: {found.first()}; healing it "
                   + (f"needs {', '.join(f'{r.name} {r.version}' for r in fetch)} from its index again, which "
                      "failed: " if fetch else "failed: ") + e.message.rstrip(".") + "; nothing was started in it", e.transient) from None
    return [r.name for r in fetch]


def _refused(env_dir: Path, found: Found, why: str) -> Fail:
    return Fail.permanent(f"the env {env_dir.name} ({env_dir}) is damaged: {found.first()}; {why}")


def checked(home: Home, env: Env, mirrors: dict[str, str], *, lock: Path | None = None,
            digest: str | None = None, platform: str | None = None) -> Env:
    """The per-attempt check: `env` when it is whole, else healed (the same Env, rebuilt in
    place) or a Fail naming the damage. After a heal the env is checked again."""
    found = check(env.path)
    if found.ok:
        return env
    heal(home, env.path, found, mirrors, lock=lock, digest=digest, platform=platform)
    again = check(env.path)
    if not again.ok:
        raise Fail.retry(f"the env {env.path.name} ({env.path}) is still damaged after healing it: {again.first()}")
    healed = from_dir(env.path)
    return healed._replace(created=env.created)


def repair(home: Home, env_dir: Path, report: maintain.Report, mirrors: dict[str, str] | None = None) -> None:
    """Make `env_dir` whole (`store.heal`): links from an intact cache entry with no index,
    entries whose files were bad (the quick check's, or what `--full` named) fetched again; an
    env whose manifest is damaged is removed (a realise from its lock builds it again)."""
    from ..lock.file import Record as Locked

    if report.damaged is not None:
        remove_damaged(home, env_dir)
        return
    m = read_manifest(env_dir)
    quick = {d.path for d in report.files}
    named = {p.package for p in report.problems if p.path not in quick}
    heal(home, env_dir, Found(env_dir, m, None, report.files), mirrors or {},
         evict=[r for r in (Locked.from_json(x) for x in m["records"]) if r.name in named])


def remove_damaged(home: Home, env_dir: Path) -> None:
    """An env whose manifest is no record: removed (renamed out first) with the links that name
    it, under the store lock held exclusively as gc holds it; left while a process leases it."""
    from ..base import atomic
    from ..base.flocks import exclusive
    from . import pointers
    from .leases import in_use

    with exclusive(home.store_lock, f"removing {env_dir.name}"):
        if in_use(env_dir):
            raise Fail.retry(f"{env_dir.name} is damaged but a running process still uses it; "
                             "`fdlenv env verify --repair` again once it ends")
        real = Path(os.path.realpath(env_dir))
        active = pointers.active_label(home)
        for link in list(pointers.links(home)):
            target = Path(os.path.realpath(link))
            if target == real or real in target.parents:
                link.unlink(missing_ok=True)
                if active is not None and home.libtorch / active == link:
                    atomic.write_text(home.active_pointer, "")   # emptied as flodl does, never half
        atomic.discard(env_dir, home.staging)
