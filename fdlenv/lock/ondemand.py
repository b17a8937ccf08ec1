"""Lock on demand: a variant no lock names is locked where it is first asked for.

pixi's and uv's convention, for `--libtorch rocm7.1` on a fresh box or `auto`
picking cpu on a GPU-less one: the variant's env file shipped with fdlenv
(`envs/<variant>.yml`: torch from PyTorch's index for the variant) is
resolved into its libtorch closure with sha256 (`lock.closure`, fdlenv's own
resolver: no pip, no conda-lock, no extra), for this platform only, and
written to the home's `lockfiles/<variant>.conda-lock.yml` (`lockpath.home_lock`),
where every later call on the box finds it (`lockview.LockView`). Order:
1. `--frozen` (or FDLENV_FROZEN=1, `fdlenv: frozen: true`) refuses here, before
   any request (exit 2, naming the variant and the command that locks it);
2. the env file must cover this platform (ROCm has no aarch64 build);
3. under `locks/ondemand-<variant>.lock`, re-check (another process may have
   just written it), resolve, write atomically; nothing is written on failure.
An index that cannot be reached, or lags (a missing or empty page, or a page
without the release fdlenv's own env file pins), is
transient (exit 1: `--persist` re-dials and the box heals when it catches up),
and the message names the URL it tried and, for PyTorch's index, the ways out;
an index whose torch is not the variant's build is refused (exit 2, naming the
mirror mapping that served it) and nothing is written.

The file it writes is a plain conda-lock v1 file: copied beside fdl.yml (or
to the source tree's root) on other boxes, it makes them realise the same env
key, `--frozen` included.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path

from .. import PACKAGE_DIR
from ..names import variants
from ..base.errors import Fail
from ..base.flocks import exclusive
from .paths import LOCK_NAME, home_lock, split_path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Protocol

    from ..names.home import Home
    from .envfile import EnvFile

    class Described(Protocol):
        """Where a command looked for locks (`app.lockview.LockView`)."""

        def describe(self) -> str: ...

ENVS = Path(PACKAGE_DIR) / "data" / "envs"


def refuse_frozen(variant: str, platform: str, view: Described) -> Fail:
    return Fail.permanent(
        f"--frozen: no lock holds {variant} for {platform} (looked in: {view.describe()}), and a frozen "
        f"box does not lock; lock it where the index is reachable with `fdlenv lock --libtorch {variant}` "
        f"(or `fdlenv env realize --libtorch {variant}` without --frozen) and ship the lock beside fdl.yml")


def lock_variant(home: Home, variant: str, platform: str, mirrors: dict[str, str],
                 say: Callable[[str], object]) -> Path:
    """Resolve `variant` for `platform` into the home's on-demand lock; returns its file."""
    from .file import holds

    out = split_path(home_lock(home), variant)
    env = _env_file(variant, platform)
    home.ensure(home.locks)
    with exclusive(home.ondemand_lock(variant), f"locking {variant}"):
        if out.is_file() and holds(out, variant, platform):
            return out
        write(home, env, platform, mirrors, out)
    say(f"locked {variant} for {platform} on demand into {out}; to make every box of the fleet "
        f"realise this same env, copy it beside fdl.yml (or to the source tree's root) as "
        f"{out.name}, or pass it with --lock")
    return out


def write(home: Home, env: EnvFile, platform: str, mirrors: dict[str, str], out: Path, check: bool = True) -> None:
    """`env` resolved for `platform` into `out`; `check` off only in tests (see `closure.resolve`)."""
    from .closure import NoWheel, resolve
    from .solve import declared_virtual_packages, wheel_records
    from .write import Solved, write_lock

    try:
        entries = resolve(env, platform, mirrors, check)
    except NoWheel as e:   # fdlenv's own pin, missing from the index: a release not synced yet
        other = (f"; or pin another torch for {env.variant} in an env file of your own (`fdlenv lock --libtorch "
                 f"{env.variant} --envs DIR`, docs/LOCK.md)") if ": no wheel of torch" in e.message else ""
        raise Fail.retry(f"{e.message}, which fdlenv's own {env.variant} env file pins: an index or mirror "
                         f"that has not synced this release yet? (exit 1: a re-dial tries again){other}") from None
    entries += wheel_records(env, platform)
    # The lock names its source as `envs/<variant>.yml`, as the shipped lock does: never a path of
    # this machine's install, since the file is meant to be shared.
    named = dataclasses.replace(env, path=out.parent / "envs" / f"{env.variant}.yml")
    write_lock([Solved(env=named, channel_urls=(), entries={platform: sorted(entries, key=lambda e: e.key)},
                       virtual={platform: declared_virtual_packages(env.variant, platform)})], out)


def _env_file(variant: str, platform: str) -> EnvFile:
    from .envfile import env_path, load

    path = env_path(ENVS, variant)
    if not path.is_file():
        raise Fail.permanent(f"--libtorch: fdlenv ships no env file for {variant} ({path}); "
                             f"lock it with `fdlenv lock --libtorch {variant} --envs DIR`")
    env = load(path)
    if env.platforms and platform not in env.platforms:
        others = [v for v in variants.VARIANTS if _covers(v, platform)]
        raise Fail.permanent(f"--libtorch: PyTorch publishes no {variant} build for {platform} (its env file "
                             f"covers {', '.join(env.platforms)}); accepted here: {', '.join(others) or 'none'}")
    if env.specs:
        raise Fail.permanent(f"--libtorch: {variant}'s env file names conda packages, which need a channel; "
                             f"lock it with `fdlenv lock --libtorch {variant}` ({LOCK_NAME})")
    return env


def _covers(variant: str, platform: str) -> bool:
    from .envfile import env_path, load

    path = env_path(ENVS, variant)
    return path.is_file() and platform in (load(path).platforms or (platform,))
