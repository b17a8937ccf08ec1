"""`lock_envs`: env files -> solves -> one conda-lock file (or one per variant).

Order: read and hash every input first (a bad env file fails before any
solve), solve each variant on each of its platforms, check the one-build-per-
(manager, name, platform) invariant across variants, then write. Nothing is
written when any step fails.

Locking some variants (`--libtorch cu126`) into a lock that already covers
others leaves those others as they are: their entries are carried over from
the file, not solved again. When the new variant cannot share the file (two
variants need different builds of one name, as every wheel variant's `torch`
does), it goes to its own split file (`cu126.conda-lock.yml`), which every
reader finds from the base name.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..base.errors import Fail
from ..names.home import Home
from .paths import split_path
from ..base.progress import say
from .envfile import EnvFile, channel_map, discover, env_path
from .solve import channel_urls, declared_virtual_packages, solve
from .write import VARIANTS_KEY, Solved, conflicts, write_lock


def env_platforms(env: EnvFile, platforms: list[str] | None) -> tuple[str, ...]:
    """The env file's `platforms:` (only those of them the caller names, when it names any of
    them), else the caller's, else this machine's."""
    if env.platforms:
        picked = tuple(p for p in env.platforms if p in (platforms or ()))
        return picked or env.platforms
    if platforms:
        return tuple(sorted(set(platforms)))
    from ..names.platforms import this_platform

    return (this_platform(),)


def lock_envs(envs_dir: Path, out: Path, *, variants: list[str] | None = None,
              platforms: list[str] | None = None, mirrors: dict[str, str] | None = None,
              split: bool = False, home: Home, layers: list[str] | None = None) -> list[Path]:
    """Solve `envs_dir/<variant>.yml` for each variant and write conda-lock v1; returns the files.
    `home` holds the local channel (`flodl`) and rattler's caches."""
    cmap = channel_map(home, mirrors)
    envs = discover(Path(envs_dir), variants, layers)
    solved = []
    for env in envs:
        plats = env_platforms(env, platforms)
        entries = {}
        for platform in plats:
            t0 = time.monotonic()
            say(f"solving {env.path} for {platform} ...")
            entries[platform] = solve(env, platform, cmap, home.repodata)
            say(f"solved {env.variant} on {platform}: {len(entries[platform])} packages "
                f"in {time.monotonic() - t0:.2f} s")
        solved.append(Solved(env=env, channel_urls=tuple(channel_urls(env, cmap)),
                             virtual={p: declared_virtual_packages(env.variant, p) for p in plats},
                             entries=entries))
    out = Path(out)
    if split:
        return [write_lock([s], split_path(out, s.variant), layers) for s in solved]
    kept = _carried(out, Path(envs_dir), {s.variant for s in solved}) if variants else []
    if kept and conflicts(kept + solved):
        for s in solved:
            say(f"{s.variant} cannot share {out} with {', '.join(k.variant for k in kept)} "
                f"(different builds of one package): writing {split_path(out, s.variant)}")
        return [write_lock([s], split_path(out, s.variant), layers) for s in solved]
    clashes = conflicts(solved)
    if clashes:
        raise Fail.permanent(
            "variants need different builds of the same package, and conda-lock keeps one build per "
            "(manager, name, platform) in a file:\n  " + "\n  ".join(clashes)
            + f"\nrerun with --split to write one lock per variant ({split_path(out, '<variant>').name})")
    return [write_lock(kept + solved, out, layers)]


def _carried(out: Path, envs_dir: Path, relocked: set[str]) -> list[Solved]:
    """The variants `out` already covers, other than `relocked`, as they stand in the file."""
    import yaml

    from .file import holds, read_variant

    if not out.is_file():
        return []
    doc = yaml.load(out.read_text(), Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) or {}
    meta = doc.get("metadata") or {}
    covered = str((meta.get("custom_metadata") or {}).get(VARIANTS_KEY, "")).split()
    out_list = []
    for variant in [v for v in covered if v not in relocked]:
        found = discover(envs_dir, [variant]) if env_path(envs_dir, variant).is_file() else []
        env = found[0] if found else EnvFile(variant, out, variant, (), (), (), ())
        entries = {platform: read_variant(out, variant, platform)
                   for platform in [p for p in meta.get("platforms") or [] if holds(out, variant, p)]}
        out_list.append(Solved(env=env, channel_urls=tuple(env.channels), entries=entries,
                               virtual={p: declared_virtual_packages(variant, p) for p in entries}))
    return out_list
