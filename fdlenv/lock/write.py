"""Solved entries -> a conda-lock v1 file, written with conda-lock's own models.

Categories: a file holding several variants puts what every variant (locking
that platform) shares in `main` and the rest in the variant's own category; a
file holding one variant (a `--split` file, or a one-variant lock) puts
everything in that variant's category, so a category always names the variant
it serves and asking a one-variant lock for another variant fails instead of
silently yielding `main`. `metadata.custom_metadata["fdlenv.variants"]` lists
the variants a file covers.

conda-lock keys entries by (manager, name, platform): two variants needing
different builds of one name cannot share a file, and `conflicts()` names them
before anything is written.

Byte-stability: conda-lock's writer sorts entries by key and categories by
name; everything fed to it here (channels, platforms, sources, dependencies)
is in a fixed order, no timestamp or git metadata is written, and the file is
replaced atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from .. import hashing
from .envfile import EnvFile
from .entry import Entry

VARIANTS_KEY = "fdlenv.variants"
LAYERS_KEY = "fdlenv.layers"


@dataclass(frozen=True)
class Solved:
    """One variant's solve on every platform it is locked for."""

    env: EnvFile
    channel_urls: tuple[str, ...]
    virtual: dict[str, list[tuple[str, str]]]   # platform -> declared virtual packages
    entries: dict[str, list[Entry]]             # platform -> entries

    @property
    def variant(self) -> str:
        return self.env.variant


def conflicts(solved: list[Solved]) -> list[str]:
    """One line per (manager, name, platform) that variants lock to different archives."""
    seen: dict[tuple[str, str, str], dict[str, Entry]] = {}
    for s in solved:
        for entries in s.entries.values():
            for e in entries:
                seen.setdefault(e.key, {})[s.variant] = e
    lines = []
    for (manager, name, platform), by_variant in sorted(seen.items()):
        if len({(e.url, e.sha256) for e in by_variant.values()}) > 1:
            needs = ", ".join(f"{v} needs {e.label}" for v, e in by_variant.items())
            lines.append(f"{name} ({manager}, {platform}): {needs}")
    return lines


def content_hash(solved: list[Solved], platform: str) -> str:
    """Digest of every input of `platform`'s solve (specs, channels, virtual packages, wheels)."""
    doc = {
        s.variant: {
            "specs": list(s.env.specs),
            "channels": list(s.channel_urls),
            "virtual": s.virtual[platform],
            "wheels": [[w.name, w.sha256] for w in s.env.wheels],
            "pip": [list(s.env.requirements), s.env.pip_index] if s.env.requirements else None,
        }
        for s in solved if platform in s.entries
    }
    return hashing.of_text(json.dumps(doc, sort_keys=True))


def write_lock(solved: list[Solved], out: Path, layers: list[str] | None = None) -> Path:
    """Write `solved` (free of conflicts) to `out`, replacing it atomically."""
    from conda_lock.lockfile import write_conda_lock_file
    from conda_lock.lockfile.v1.models import HashModel, LockMeta
    from conda_lock.lockfile.v2prelim.models import LockedDependency, Lockfile

    platforms = sorted({p for s in solved for p in s.entries})
    by_key: dict[tuple[str, str, str], tuple[Entry, set[str]]] = {}
    for s in solved:
        for entries in s.entries.values():
            for e in entries:
                by_key.setdefault(e.key, (e, set()))[1].add(s.variant)
    covering = {p: {s.variant for s in solved if p in s.entries} for p in platforms}
    packages = []
    for (_, _, platform), (e, variants) in by_key.items():
        shared = len(solved) > 1 and variants == covering[platform]
        packages.append(LockedDependency(
            name=e.name, version=e.version, manager=e.manager, platform=platform,
            dependencies=dict(e.depends), url=e.url,
            hash=HashModel(md5=e.md5 or None, sha256=e.sha256), build=e.build,
            categories={"main"} if shared else variants))
    # Channels as the solve used them (aliases resolved): a bare `flodl` would send other
    # conda tools to a public channel of that name instead of the home's local one.
    channels: list[str] = []
    for s in solved:
        channels += [c for c in s.channel_urls if c not in channels]
    meta = LockMeta(
        content_hash={p: content_hash(solved, p) for p in platforms},
        channels=channels,
        platforms=platforms,
        sources=[_relative(s.env.path, out) for s in solved],
        custom_metadata={VARIANTS_KEY: " ".join(s.variant for s in solved),
                         **({LAYERS_KEY: " ".join(layers)} if layers else {})},
    )
    out.parent.mkdir(parents=True, exist_ok=True)
    partial = out.with_name(f".{out.name}.{os.getpid()}.partial")
    try:
        write_conda_lock_file(Lockfile(package=packages, metadata=meta), partial,
                              metadata_choices=None, include_help_text=False)
        os.replace(partial, out)
    finally:
        partial.unlink(missing_ok=True)
    return out


def _relative(path: Path, out: Path) -> str:
    return Path(os.path.relpath(path.resolve(), out.parent.resolve())).as_posix()
