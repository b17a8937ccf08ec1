"""Where things start, in os only: the home's root, the parts of it the replay finds, and the names of
a project's config file.

Why its own module: the memo replay (`hot.replay`, which imports only os and sys) and the
slow path (`app.settings`, `config.fdlfile`) must find the same home and the same fdl.yml,
and the replay cannot afford pathlib.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

CONFIG_NAMES = ("fdl.yaml", "fdl.yml", "fdl.json")   # a project's config file, as flodl names it
# The home's parts its os-only readers find (the replay, `has_pointers`, the lease file), relative
# to the root: `names.home.Home` builds the same members from these, so each is spelled once.
ENVS = "envs"
LOCKS = "locks"
STORE_LOCK = os.path.join(LOCKS, "store.lock")
HOT = os.path.join("cache", "hot")
LIBTORCH = "libtorch"
PRECOMPILED = os.path.join(LIBTORCH, "precompiled")


def absolute(path: str) -> str:
    """`path` with `~` expanded, made absolute as pathlib's absolute() does (no `..` folded)."""
    path = os.path.expanduser(path)
    return path if path.startswith("/") else os.path.join(os.getcwd(), path)


def home_root(given: str | None, environ: "Mapping[str, str]") -> str:
    """The home: `given` (`--home`, or fdl.yml's `fdlenv: home:` as `settings.resolve` passes
    it), else `$FLODL_HOME`, else `~/.flodl`; absolute."""
    raw = given or (environ.get("FLODL_HOME") or "").strip()
    if raw:
        return absolute(raw)
    return absolute(os.path.join(environ.get("HOME") or os.path.expanduser("~"), ".flodl"))


def project_above(cwd: str) -> bool:
    """Whether an fdl.yml (or .yaml, .json) lies in the cwd or above it."""
    d = cwd
    while True:
        if any(os.path.isfile(os.path.join(d, n)) for n in CONFIG_NAMES):
            return True
        up = os.path.dirname(d)
        if up == d:
            return False
        d = up


def has_pointers(root: str) -> bool:
    """Whether the home at `root` holds any symlink among flodl's `libtorch/precompiled/<dir>`
    (what `store.pointers` writes for every realised env): `detect` on a GPU-less box with an
    empty home asks no further, so it imports no pathlib for a home that has nothing."""
    pre = os.path.join(root, PRECOMPILED)
    try:
        names = os.listdir(pre)
    except OSError:
        return False
    return any(os.path.islink(os.path.join(pre, n)) for n in names)
