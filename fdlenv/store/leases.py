"""What keeps an env alive: the store lock and leases.

gc must never delete what another process has just realised or is running.
Two file locks in `locks/` (see fdlenv.flocks) say so:
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
A lease needs no cleanup: the kernel lets go when the last holder exits.
`fdlenv shell-hook` cannot lease (the shell outlives it); the active pointer
and the roots protect what it printed.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..errors import Fail
from ..flocks import held, lease, shared

STORE_LOCK = "store.lock"


def store_lock(locks_dir: Path) -> Path:
    return locks_dir / STORE_LOCK


def _lease_path(env_dir: Path) -> Path:
    return env_dir.parent.parent / "locks" / f"use-{env_dir.name}.lock"


def take(env_dir: Path) -> int:
    """Lease the env at `env_dir` (home/envs/<dir>) for this process and what it starts; the
    descriptor is inheritable. Raises a transient Fail when gc removed it meanwhile."""
    env_dir = Path(env_dir)
    with shared(store_lock(env_dir.parent.parent / "locks"), f"using {env_dir.name}"):
        if not (env_dir / ".fdlenv" / "manifest.json").is_file():
            raise Fail.retry(f"the env {env_dir} was removed (env gc?) before it could be used; retry")
        return lease(_lease_path(env_dir))


def release(fd: int | None) -> None:
    if fd is not None:
        try:
            os.close(fd)
        except OSError:
            pass


def in_use(env_dir: Path) -> bool:
    """Whether a live process holds a lease on the env."""
    return held(_lease_path(Path(env_dir)))
