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
from ..base.flocks import held, shared
from ..names.leasefile import lease_paths, take_lease

STORE_LOCK = "store.lock"


def store_lock(locks_dir: Path) -> Path:
    return locks_dir / STORE_LOCK


def take(env_dir: Path) -> int | None:
    """Lease the env at `env_dir` (home/envs/<dir>) for this process and what it starts; the
    descriptor is inheritable (None, said once, where no place can hold a lease). Raises a
    transient Fail when gc removed it meanwhile."""
    env_dir = Path(env_dir)
    with shared(store_lock(env_dir.parent.parent / "locks"), f"using {env_dir.name}"):
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
