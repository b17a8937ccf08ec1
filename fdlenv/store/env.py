"""`Env`: what the store hands back, and the manifest every realised env carries.

An env directory is immutable once published and always has
`.fdlenv/manifest.json`; everything that later needs to know what an env is
(list, verify, repair, gc, activation) reads that file instead of the lock.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..base.record import Record

MANIFEST = ".fdlenv/manifest.json"
TYPE_CHECKING = False   # `typing` stays off the re-dial path: the manifest's shape is for the checker
if TYPE_CHECKING:
    from typing import Any, TypedDict

    from ..names.variants import Variant

    class LockRef(TypedDict):
        path: str      # the lock file the env was realised from, absolute
        sha256: str    # its bytes' digest

    class Sizes(TypedDict):
        own: int               # bytes only the env holds (files with one link)
        entries: list[str]     # the package-cache entries it links

    class LinkReport(TypedDict):
        hardlinked: int        # packages whose sample file is a hard link into the cache
        copied: list[str]      # packages rattler copied instead (another filesystem?)

    class _Written(TypedDict):
        key: str
        variant: str
        platform: str
        records: list[dict[str, Any]]   # each lock entry's `Record.to_json()`
        lock: LockRef
        libtorch_root: str              # where it was when written (`rebase` reads it from here)
        created: str                    # ISO 8601, UTC
        tool_version: str
        links: LinkReport

    class Manifest(_Written, total=False):
        """`.fdlenv/manifest.json`, as `store.install` writes it (JSON, read back unchecked)."""
        size: Sizes            # absent from envs built before sizes were kept: `sizes.of_env` walks them


class Env(Record):
    """A realised env: its variant's canonical name, key, directory and libtorch root;
    `created`: this call made it. A Record (a tuple at run time): it is on the re-dial path."""

    variant: str
    key: str
    path: Path
    libtorch_root: Path
    created: bool = False

    @property
    def spec(self) -> Variant:
        """The variant's row (`names.variants`)."""
        from ..names import variants

        return variants.get(self.variant)

    def to_json(self) -> dict[str, Any]:
        return {"variant": self.variant, "key": self.key, "path": str(self.path),
                "libtorch_root": str(self.libtorch_root), "created": self.created}


def libtorch_root(prefix: Path) -> Path:
    """`fdlenv pack` puts PyTorch's tree under <prefix>/libtorch; a wheel env has it at
    <prefix>/lib/pythonX.Y/site-packages/torch; else the prefix itself."""
    inner = prefix / "libtorch"
    if (inner / "lib").is_dir():
        return inner
    wheel = next(iter(sorted(prefix.glob("lib/python*/site-packages/torch/lib"))), None)
    return wheel.parent if wheel else prefix


class Damaged(ValueError):
    """An env whose manifest is not a whole record (missing, a link or a directory, not UTF-8,
    not JSON, a key missing or of the wrong type): one damaged entry, named by `path`, that
    list, gc, remove and verify handle as such, never a failure of the whole home."""

    def __init__(self, path: Path, why: str):
        super().__init__(f"{path}: {why}")
        self.path, self.why = Path(path), why


# The keys every reader relies on, and their types (`records` entries are checked one by one).
_KEYS = (("key", str), ("variant", str), ("platform", str), ("records", list), ("lock", dict),
         ("libtorch_root", str), ("created", str))
_RECORD_KEYS = ("manager", "name", "version", "sha256")


def read_manifest(env_dir: Path) -> Manifest:
    """The env's manifest, read without following a link, or `Damaged` saying why it is none."""
    import errno
    import os

    path = Path(env_dir) / MANIFEST
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError as e:
        raise Damaged(path, "a symlink" if os.path.islink(path) else "missing" if e.errno == errno.ENOENT
                      else e.strerror or "unreadable") from None
    try:
        import stat

        if not stat.S_ISREG(os.fstat(fd).st_mode):
            raise Damaged(path, "not a regular file")
        with os.fdopen(fd, "rb", closefd=False) as f:
            data = f.read()
    except OSError as e:
        raise Damaged(path, e.strerror or "unreadable") from None
    finally:
        os.close(fd)
    try:
        m = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, ValueError, RecursionError):
        raise Damaged(path, "not UTF-8 JSON (empty or cut short?)") from None
    if not isinstance(m, dict):
        raise Damaged(path, f"a JSON {type(m).__name__}, not an object")
    for key, kind in _KEYS:
        if not isinstance(m.get(key), kind):
            raise Damaged(path, f"`{key}` is missing or not a {kind.__name__}")
    for r in m["records"]:
        if not isinstance(r, dict) or not all(isinstance(r.get(k), str) for k in _RECORD_KEYS):
            raise Damaged(path, "a record without manager, name, version and sha256 as strings")
    if not all(isinstance(m["lock"].get(k), str) for k in ("path", "sha256")):
        raise Damaged(path, "`lock` without path and sha256")
    from ..names import variants

    if m["variant"] not in variants.VARIANTS or Path(env_dir).name.rpartition("-")[0] != m["variant"]:
        raise Damaged(path, f"`variant` {m['variant']!r} is not the env's ({Path(env_dir).name})")
    return m  # type: ignore[return-value]   # checked above, key by key


def variant_of_dir(env_dir: Path) -> str | None:
    """The variant an env directory's name says (`<variant>-<key16>`), for an env whose manifest
    is damaged; None when the name says none."""
    from ..names import variants

    v = Path(env_dir).name.rpartition("-")[0]
    return v if v in variants.VARIANTS else None


def moved_from(env_dir: Path, m: Manifest) -> Path | None:
    """Where the env was when its manifest was written, when that is not `env_dir` (a moved
    home); None when it has not moved."""
    recorded = Path(m["libtorch_root"])
    parts = recorded.parts
    if env_dir.name not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index(env_dir.name)
    old = Path(*parts[:i + 1])
    return None if old == Path(env_dir).absolute() else old


def from_dir(env_dir: Path) -> Env:
    """The env at `env_dir`, wherever its home is now: the manifest's libtorch root is taken
    relative to the env (an image bake or `mv` of the home keeps every env usable)."""
    m = read_manifest(env_dir)
    return Env(m["variant"], m["key"], env_dir, rebase(env_dir, m["libtorch_root"]))


def rebase(env_dir: Path, recorded: str) -> Path:
    """A path recorded inside an env (its libtorch root), taken relative to where the env is now."""
    parts = Path(recorded).parts
    if env_dir.name not in parts:
        return Path(recorded)
    i = len(parts) - 1 - parts[::-1].index(env_dir.name)
    return Path(env_dir).joinpath(*parts[i + 1:])
