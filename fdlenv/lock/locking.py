"""`lock_envs`: env files -> solves -> one conda-lock file (or one per variant).

Order: read and hash every input first (a bad env file fails before any
solve), solve each variant on each of its platforms, check the one-build-per-
(manager, name, platform) invariant across variants, then write. Nothing is
written when any step fails.
"""

from __future__ import annotations

import time
from pathlib import Path

from ..errors import Fail
from ..home import Home
from ..progress import say
from .envfile import EnvFile, channel_map, discover
from .solve import channel_urls, declared_virtual_packages, solve
from .write import Solved, conflicts, write_lock


def split_path(out: Path, variant: str) -> Path:
    """`conda-lock.yml` + `cu128` -> `conda-lock.cu128.yml` (the `--split` file of a variant)."""
    return out.with_name(f"{out.stem}.{variant}{out.suffix}")


def env_platforms(env: EnvFile, platforms: list[str] | None) -> tuple[str, ...]:
    """The env file's `platforms:`, else the caller's, else this machine's."""
    if env.platforms:
        return env.platforms
    if platforms:
        return tuple(sorted(set(platforms)))
    import rattler

    return (str(rattler.Subdir.current()),)


def lock_envs(envs_dir: Path, out: Path, *, variants: list[str] | None = None,
              platforms: list[str] | None = None, mirrors: dict[str, str] | None = None,
              split: bool = False, home: Home | None = None) -> list[Path]:
    """Solve `envs_dir/<variant>.yml` for each variant and write conda-lock v1; returns the files."""
    home = home or Home.resolve()
    cmap = channel_map(home, mirrors)
    envs = discover(Path(envs_dir), variants)
    solved = []
    for env in envs:
        plats = env_platforms(env, platforms)
        entries = {}
        for platform in plats:
            t0 = time.monotonic()
            say(f"solving {env.path} for {platform} ...")
            entries[platform] = solve(env, platform, cmap, home.cache / "repodata")
            say(f"solved {env.variant} on {platform}: {len(entries[platform])} packages "
                f"in {time.monotonic() - t0:.2f} s")
        solved.append(Solved(env=env, channel_urls=tuple(channel_urls(env, cmap)),
                             virtual={p: declared_virtual_packages(env.variant, p) for p in plats},
                             entries=entries))
    out = Path(out)
    if split:
        return [write_lock([s], split_path(out, s.variant)) for s in solved]
    clashes = conflicts(solved)
    if clashes:
        raise Fail.permanent(
            "variants need different builds of the same package, and conda-lock keeps one build per "
            "(manager, name, platform) in a file:\n  " + "\n  ".join(clashes)
            + f"\nrerun with --split to write one lock per variant ({split_path(out, '<variant>').name})")
    return [write_lock(solved, out)]
