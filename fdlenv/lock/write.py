"""Solved entries -> a conda-lock v1 file, byte for byte as conda-lock's own writer makes it.

The writer is fdlenv's own (PyYAML, as conda-lock's): a variant locked on
demand (`lock.ondemand`) is written by a plain install, with no conda-lock.
The tests write the same entries with conda-lock's models and writer and
compare the bytes, and read every file back with conda-lock's parser.

Categories: a file holding several variants puts what every variant (locking
that platform) shares in `main` and the rest in the variant's own category; a
file holding one variant (a `--split` file, or a one-variant lock) puts
everything in that variant's category, so a category always names the variant
it serves and asking a one-variant lock for another variant fails instead of
silently yielding `main`. `metadata.custom_metadata["fdlenv.variants"]` lists
the variants a file covers, and `["fdlenv.sizes"]` each file's size where the
index stated or answered it (`lock.file.SIZES_KEY`: entries may hold no field
conda-lock's models do not name), so a realise starts the largest download first.

conda-lock keys entries by (manager, name, platform): two variants needing
different builds of one name cannot share a file, and `conflicts()` names them
before anything is written.

Byte-stability: entries are sorted by key and categories by name (as
conda-lock's writer does); everything fed to it here (channels, platforms, sources, dependencies)
is in a fixed order, no timestamp or git metadata is written, and the file is
replaced atomically.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

from ..base import hashing
from .file import SIZES_KEY, Record
from .envfile import EnvFile

VARIANTS_KEY = "fdlenv.variants"
LAYERS_KEY = "fdlenv.layers"


@dataclass(frozen=True)
class Solved:
    """One variant's solve on every platform it is locked for."""

    env: EnvFile
    channel_urls: tuple[str, ...]
    virtual: dict[str, list[tuple[str, str]]]   # platform -> declared virtual packages
    entries: dict[str, list[Record]]            # platform -> entries

    @property
    def variant(self) -> str:
        return self.env.variant


def conflicts(solved: list[Solved]) -> list[str]:
    """One line per (manager, name, platform) that variants lock to different archives."""
    seen: dict[tuple[str, str, str], dict[str, Record]] = {}
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
            "pip": [list(s.env.requirements), s.env.index_for(platform)] if s.env.requirements else None,
            **({"pip-sources": [list(p) for p in s.env.pip_sources]} if s.env.pip_sources else {}),
        }
        for s in solved if platform in s.entries
    }
    return hashing.of_text(json.dumps(doc, sort_keys=True))


def write_lock(solved: list[Solved], out: Path, layers: list[str] | None = None) -> Path:
    """Write `solved` (free of conflicts) to `out`, replacing it atomically."""
    from ..base import atomic

    atomic.write_text(out, render(solved, out, layers))
    return out


def render(solved: list[Solved], out: Path, layers: list[str] | None = None) -> str:
    """The bytes conda-lock's writer (`write_conda_lock_file`, no help text) gives for these
    entries: v1 entries sorted by (manager, name, platform), one per category, fields in its
    models' order, unset fields left out. The tests hold it to conda-lock's own writer."""
    import yaml

    platforms = sorted({p for s in solved for p in s.entries})
    by_key: dict[tuple[str, str, str], tuple[Record, set[str]]] = {}
    for s in solved:
        for entries in s.entries.values():
            for e in entries:
                by_key.setdefault(e.key, (e, set()))[1].add(s.variant)
    covering = {p: {s.variant for s in solved if p in s.entries} for p in platforms}
    packages = []
    for key in sorted(by_key):
        e, variants = by_key[key]
        # `main` only for what several variants locking this platform all share: a platform one
        # variant covers keeps that variant's name, so no other variant reads it as its own.
        shared = len(covering[e.platform]) > 1 and variants == covering[e.platform]
        base = {"name": e.name, "version": e.version, "manager": e.manager, "platform": e.platform,
                "dependencies": dict(sorted(e.depends)), "url": e.url,
                "hash": {**({"md5": e.md5} if e.md5 else {}), "sha256": e.sha256},
                **({"build": e.build} if e.build else {})}
        for category in sorted({"main"} if shared else variants):
            packages.append({**base, "category": category, "optional": category != "main"})
    # Channels as the solve used them (aliases resolved): a bare `flodl` would send other
    # conda tools to a public channel of that name instead of the home's local one.
    channels: list[str] = []
    for s in solved:
        channels += [c for c in s.channel_urls if c not in channels]
    sizes = {e.sha256: e.size for e, _ in by_key.values() if e.size is not None}
    meta = {
        "content_hash": {p: content_hash(solved, p) for p in platforms},
        "channels": [{"url": c, "used_env_vars": []} for c in channels],
        "platforms": platforms,
        "sources": [_relative(s.env.path, out) for s in solved],
        "custom_metadata": {VARIANTS_KEY: " ".join(s.variant for s in solved),
                            **({LAYERS_KEY: " ".join(layers)} if layers else {}),
                            **({SIZES_KEY: " ".join(f"{h}={n}" for h, n in sorted(sizes.items()))} if sizes else {})},
    }
    return yaml.dump({"version": 1, "metadata": meta, "package": packages}, sort_keys=False)


def _relative(path: Path, out: Path) -> str:
    return Path(os.path.relpath(path.resolve(), out.parent.resolve())).as_posix()
