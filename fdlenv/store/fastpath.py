"""The re-dial answer: is this lock's variant already realised? In about a millisecond.

Maps sha256(lock bytes) + variant + platform -> env dir name in
`cache/fast/`. Hashing a lock file is far cheaper than parsing its YAML, and
much cheaper than importing conda-lock or rattler, none of which happen here.
The mapping is only trusted when the env directory it names still exists
with its manifest (an env dir exists only when complete).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..base import atomic, hashing
from ..names.home import Home, Living, Sweeper, listing
from .env import MANIFEST, Env, rebase

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator


# (path, inode, size, mtime) -> digest: the view and realise ask about one file
_DIGESTS: dict[tuple[str, int, int, int], str] = {}


def lock_digest(lock: Path) -> str:
    st = os.stat(lock)
    memo = (str(lock), st.st_ino, st.st_size, st.st_mtime_ns)
    if memo not in _DIGESTS:
        _DIGESTS[memo] = hashing.of_bytes(lock.read_bytes())
    return _DIGESTS[memo]


def _fast(home: Home) -> Path:
    return home.fast


def _entry(home: Home, digest: str, variant: str, platform: str) -> Path:
    return _fast(home) / f"{digest[:32]}-{variant}-{platform}.json"


def lookup(home: Home, digest: str, variant: str, platform: str) -> Env | None:
    try:   # a memo of any other shape (cut short, not UTF-8, not an object, a name with a /) is none
        d = json.loads(_entry(home, digest, variant, platform).read_text())
        name, key, root = d["dir"], d["key"], d["libtorch_root"]
        if not all(isinstance(v, str) for v in (name, key, root)) or "/" in name or name.startswith("."):
            return None
    except (OSError, ValueError, KeyError, TypeError):
        return None
    path = home.env_dir(name)
    if not (path / MANIFEST).is_file():
        return None
    return Env(variant, key, path, rebase(path, root))   # the home may have moved


def remember(home: Home, digest: str, variant: str, platform: str, env: Env) -> None:
    p = _entry(home, digest, variant, platform)
    atomic.cache_text(p, json.dumps({"key": env.key, "dir": env.path.name, "libtorch_root": str(env.libtorch_root)}))


HOLDS = ".holds"


def _holds_entry(home: Home, digest: str, variant: str, platform: str) -> Path:
    return _fast(home) / f"{digest[:32]}-{variant}-{platform}{HOLDS}"


def holds_asked(entry: Path) -> str | None:
    """`<variant>-<platform>` a `.holds` answer is for (None: not one): what `env gc` matches
    against the kept envs, whose re-dials ask it."""
    return entry.name.removesuffix(HOLDS).split("-", 1)[-1] if entry.name.endswith(HOLDS) else None


def holds(home: Home, digest: str, variant: str, platform: str) -> bool | None:
    """Whether the lock with this digest holds the variant, as `remember_holds` recorded it
    (None: not known yet). A lock's bytes never change under its digest, so it never goes stale."""
    if _entry(home, digest, variant, platform).is_file():
        return True
    try:
        return _holds_entry(home, digest, variant, platform).read_text() == "1"
    except (OSError, ValueError):
        return None


def remember_holds(home: Home, digest: str, variant: str, platform: str, value: bool) -> None:
    try:
        atomic.write_text(_holds_entry(home, digest, variant, platform), "1" if value else "0")
    except OSError:
        pass   # a read-only home still answers, by parsing each time


def asked_of(home: Home, variant: str) -> set[str]:
    """`<variant>-<platform>` of every `.holds` answer recorded for `variant` (a kept env whose
    manifest is damaged names no platform: its variant's answers stay)."""
    return {q for f in _fast(home).glob(f"*-{variant}-*{HOLDS}") if (q := holds_asked(f))}


def _alive(home: Home, entry: Path, gone: frozenset[str]) -> bool:
    try:
        name = json.loads(entry.read_text())["dir"]
        return name not in gone and (home.env_dir(name) / MANIFEST).is_file()
    except (OSError, ValueError, KeyError, TypeError):
        return False


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of `cache/fast`: a re-dial answer naming an env that is gone, and a
    `.holds` answer no kept env's re-dial asks (one a kept env's re-dial asks stays)."""
    for p in listing(_fast(home)):
        if (variant_platform := holds_asked(p)) is not None:
            if variant_platform not in living.asked:
                yield p, "whether a lock holds a variant no kept env has"
        elif not _alive(home, p, living.gone):
            yield p, "re-dial answer naming an env that is gone"


SWEEPER = Sweeper(("fast",), sweep)
