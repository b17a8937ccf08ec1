"""Locking `envs/<variant>.yml` into conda-lock v1 files, and checking them.

Usage (library):

    from fdlenv.lock import lock_envs, check_locks
    paths = lock_envs(Path("envs"), Path("conda-lock.yml"),
                      variants=["cpu"],          # default: every envs/<variant>.yml present
                      platforms=None,            # env file's `platforms:` > this > this machine's
                      mirrors={"conda-forge": "file:///srv/cf"},  # `flodl` -> home channel by default
                      split=False,               # True: <variant>.conda-lock.yml per variant
                      home=Home(tmp))            # the local `flodl` channel and caches
    problems = check_locks(Path("envs"), Path("conda-lock.yml"), variants=["cpu"], home=Home(tmp))
    # [] when the lock still satisfies every spec; else one line per change

What the written file holds: one entry per (manager, name, platform); with
several variants, `main` = what every variant shares, the rest in the
variant's category (`cpu`, `cu126`, ..., `rocm7.1`); a one-variant file
puts everything in that variant's category. `metadata.custom_metadata`
`fdlenv.variants` lists the variants covered. Conda entries carry md5 and
sha256 from the channel's repodata; `manager: pip` entries come from wheel
files the env file names under `pip:` (path relative to the env file, or a
URL), hashed from their bytes. `split_path(out, variant)` is where
`--split` writes a variant's file.

Imports of rattler and conda_lock happen inside the functions, and `check_locks` and
`lock_envs` are imported when first asked for (`__getattr__`): lock on demand
(`lock.ondemand`) and the realise's METADATA check (`store.wheelmeta`) import modules of
this package without the env-file checker and the conda solve (urllib, asyncio).
"""

from .paths import split_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from .check import check_locks
    from .make import lock_envs

__all__ = ["check_locks", "lock_envs", "split_path"]


def __getattr__(name: str) -> object:
    if name == "check_locks":
        from .check import check_locks
        return check_locks
    if name == "lock_envs":
        from .make import lock_envs
        return lock_envs
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
