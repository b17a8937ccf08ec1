"""What keeps an env alive: the store lock and leases.

gc must never delete what another process has just realised or is running.
Two file locks in `locks/` (see fdlenv.base.flocks) say so:
- `store.lock`: every realise and repair holds it shared, from the fast-path
  lookup (or the install) through writing the env's root and flodl's
  pointers; `env gc` holds it exclusively while it plans and deletes. So an
  env a realise reported is rooted before gc can look at it, and gc never
  deletes a package-cache entry an install is linking from.
- `use-<env dir>.lock`: a lease, held shared by every process that runs with
  the env (`fdlenv run`'s command, `fdlenv join`'s agent and, through the
  inherited descriptor, their children). gc leaves an env whose lease anyone
  holds, even when no root or pointer names it any more (a re-lock and
  `env use` of a newer build while a job still runs on the old one).
A lease needs no cleanup: the kernel lets go when the last holder exits. Where the
home cannot be written (a baked image, a read-only mount) and the lease file is
not there yet, the lease is taken under this user's runtime directory for the
home instead (`leasefile.lease_paths`), and `in_use` looks there too: a gc on
this box through a writable view of the same home sees it (a gc by another
user, or on another box, does not: leases were always per box).
`fdlenv shell-hook` cannot lease (the shell outlives it); the active pointer
and the roots protect what it printed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.errors import Fail
from ..base.flocks import held, holder_file, shared
from ..names.home import Home, Living, Sweeper
from ..names.leasefile import lease_paths, leased_env, take_lease

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


def store_lock(locks_dir: Path) -> Path:
    """The store lock of the home whose `locks/` is `locks_dir` (`Home.store_lock`)."""
    return Home(Path(locks_dir).parent).store_lock


def take(env_dir: Path) -> int | None:
    """Lease the env at `env_dir` (home/envs/<dir>) for this process and what it starts; the
    descriptor is inheritable (None, said once, where no place can hold a lease). Raises a
    transient Fail when gc removed it meanwhile."""
    env_dir = Path(env_dir)
    with shared(Home(env_dir.parent.parent).store_lock, f"using {env_dir.name}"):
        if not (env_dir / ".fdlenv" / "manifest.json").is_file():
            raise Fail.retry(f"the env {env_dir} was removed (env gc?) before it could be used; retry")
        fd = take_lease(str(env_dir.parent.parent), env_dir.name)
        if fd is None:
            from ..base.progress import say
            say(f"note: {env_dir.name} is not leased (neither its home nor a runtime directory can hold "
                "the lease): `env gc` on a writable view of this home could remove it while it runs")
        return fd


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def in_use(env_dir: Path) -> bool:
    """Whether a live process holds a lease on the env."""
    env_dir = Path(env_dir)
    return any(p is not None and held(Path(p)) for p in lease_paths(str(env_dir.parent.parent), env_dir.name))


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of `locks/`: a key lock (and the holder file a killed holder left) of
    an env key no kept env has, and a lease of an env that is gone; never one that is held."""
    for p in sorted(home.locks.glob(home.key_lock("*").name)) if home.locks.is_dir() else ():
        if len(p.stem) == 64 and p.stem not in living.keys and not held(p):
            yield p, "lock of an env that is gone"
            if holder_file(p).exists():
                yield holder_file(p), "lock of an env that is gone"
        elif (env := leased_env(p.name)) is not None and not home.env_dir(env).exists() and not held(p):
            yield p, "lease of an env that is gone"


SWEEPER = Sweeper(("key_lock", "lease"), sweep)
