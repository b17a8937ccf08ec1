"""Realise a locked variant as an immutable env directory: the decision.

Order matters, cheapest first:
1. Fast path: the lock's digest maps to an existing env -> done. No lock
   taken, no YAML parsed, no conda-lock or rattler import: this is
   what every re-dial runs, so this module imports only what it needs here.
2. Read the lock, compute the key; the env may exist already (another lock
   file with the same records).
3. Take `locks/<key>.lock` (saying whom we wait for), re-check, and only then
   build it (`store.install`).
4. With `check` (join, prepare, run, env realize): the env's files against what its realise
   recorded, a damaged env healed before it is handed back (`store.heal`).
Pointers (GC root, flodl's precompiled/<dir>, and `.active` when asked) are
refreshed on every call; unchanged ones are not rewritten.
"""

from __future__ import annotations

import os
from pathlib import Path

from ..names import variants
from ..lock.paths import split_sibling
from ..base.errors import Fail
from ..names.home import Home
from ..base.flocks import shared
from . import fastpath, health, pointers
from .env import MANIFEST, Env, libtorch_root
from ..names.platforms import this_platform

TYPE_CHECKING = False   # the worker's module (subprocess, signal) only when conda packages install
if TYPE_CHECKING:
    from .install_worker import WorkerProcess


def choose_lock(lock: Path, variant: str) -> Path:
    """A lock file, or its `--split` sibling for this variant when that is where the variant is."""
    sibling = split_sibling(lock, variant)
    if sibling and (not lock.is_file() or variant not in _category_names(lock)):
        return sibling
    return lock


def _category_names(lock: Path) -> set[str]:
    # Cheap textual scan (no YAML): is there a `category: <variant>` line at all?
    text = lock.read_text()
    return {v for v in variants.VARIANTS if f"category: {v}\n" in text or f"- {v}\n" in text}


def realise(home: Home, variant: str, lock: Path, mirrors: dict[str, str] | None = None,
            *, platform: str | None = None, activate: bool = False, fork: bool = False, check: bool = False) -> Env:
    """The env for `variant` of `lock`, realised if needed; `activate` also points `.active` at it.
    `fork`: the caller owns this process, so the install worker may be a fork of it. `check`: the
    per-attempt check (`store.heal.checked`: every file against the realise's table), a damaged
    env healed from this lock's index before it is handed back."""
    variant = variants.get(variant).name   # a lookup: callers hand on the name the front parsed once
    platform = platform or this_platform()
    if not lock.is_file() and not split_sibling(lock, variant):
        raise Fail.permanent(f"--lock: {lock} does not exist; give a conda-lock v1 file (see `fdlenv lock --help`)")
    lock = choose_lock(lock, variant)
    digest = fastpath.lock_digest(lock)
    # Held shared from the lookup through the root and pointers: gc (exclusive) cannot
    # delete the env between our finding or building it and its root (store/leases.py).
    with shared(home.store_lock, f"realising {variant}"):
        env = fastpath.lookup(home, digest, variant, platform)
        if env is None:
            worker: WorkerProcess | None = None
            if b"manager: conda" in lock.read_bytes():
                # Conda packages install through a worker, started now: it imports rattler in a
                # child while this process reads the lock. A lock of wheels only needs none.
                from .install_worker import WorkerProcess
                worker = WorkerProcess(fork)
            try:
                env = _slow_path(home, variant, lock, digest, platform, mirrors or {}, worker)
            finally:
                if worker is not None:
                    worker.abandon()
            fastpath.remember(home, digest, variant, platform, env)
        if check and not health.whole(env.path):   # only a damaged env imports the heal
            from .heal import checked
            env = checked(home, env, mirrors or {}, lock=lock, digest=digest, platform=platform)
        pointers.root(home, lock, env)
        if activate:
            pointers.set_active(home, env)
        else:
            pointers.link_variant(home, env)
    return env


def _slow_path(home: Home, variant: str, lock: Path, digest: str, platform: str,
               mirrors: dict[str, str], worker: WorkerProcess | None) -> Env:
    from ..base.flocks import exclusive
    from .envkey import env_dirname, env_key
    from .install import build
    from ..lock.file import read_variant

    records = read_variant(lock, variant, platform)
    key = env_key(records, platform)
    final = home.env_dir(env_dirname(variant, key))
    if not (final / MANIFEST).is_file():
        with exclusive(home.key_lock(key), f"realising {variant}"):
            if not (final / MANIFEST).is_file():
                # Whatever stands at the name without a manifest (a damaged env) is swapped out.
                build(home, variant, key, records, final, lock, digest, platform, mirrors, worker,
                      replace=os.path.lexists(final))
                return Env(variant, key, final, libtorch_root(final), created=True)
    return Env(variant, key, final, libtorch_root(final))
