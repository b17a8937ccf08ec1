"""Solving one env file for one platform, for a declared machine.

A lock must not depend on who ran `fdlenv lock`: the solve sees the virtual
packages declared per variant here (cu126: `__cuda 12.6`, cu128: `__cuda 12.8`, cu130: `__cuda 13.0`,
`__glibc` and `__linux` baselines for every linux variant), never the solving
host's GPU, driver or libc. py-rattler treats `virtual_packages=None` as
"none at all", so the declared list is always passed; `noarch` is always
among the solved subdirs or noarch packages would be invisible.

Every `Record` carries the URL, md5 and sha256 the channel's repodata gives for
the real archive; a record lacking either hash is refused (conda-lock needs
md5, the store needs sha256).
"""

from __future__ import annotations

import asyncio
from pathlib import Path

from ..base.errors import Fail
from ..index.mirrors import ChannelMap
from ..names.platforms import GLIBC_BASELINE, LINUX_BASELINE
from ..names.variants import VARIANTS
from .file import Record
from .envfile import EnvFile

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rattler import RepoDataRecord


def declared_virtual_packages(variant: str, platform: str) -> list[tuple[str, str]]:
    """(name, version) of the virtual packages a variant is solved against."""
    out: list[tuple[str, str]] = []
    if platform.startswith("linux-"):
        out += [("__glibc", GLIBC_BASELINE), ("__linux", LINUX_BASELINE), ("__unix", "0")]
    elif platform.startswith("osx-"):
        out += [("__osx", "11.0"), ("__unix", "0")]
    elif platform.startswith("win-"):
        out.append(("__win", "0"))
    cuda = VARIANTS[variant].cuda
    if cuda:
        out.append(("__cuda", cuda))
    return sorted(out)


def channel_urls(env: EnvFile, cmap: ChannelMap) -> list[str]:
    """The env's channels in priority order, aliases mapped (`conda-forge` stays a name)."""
    return [cmap.resolve(c) for c in env.channels]


def solver_spec(spec: str, cmap: ChannelMap) -> str:
    """`alias::name ver` -> `<channel URL>::name ver` so the pin follows the mirror map."""
    channel, sep, rest = spec.partition("::")
    return f"{cmap.resolve(channel.strip())}::{rest.strip()}" if sep else spec


def solve(env: EnvFile, platform: str, cmap: ChannelMap, cache_dir: Path) -> list[Record]:
    """The conda entries and wheel entries of `env` on `platform`, sorted by key."""
    from .closure import resolve

    entries = _solve_conda(env, platform, cmap, cache_dir) if env.specs else []
    entries += wheel_records(env, platform)
    entries += resolve(env, platform, cmap.mirrors)
    return sorted(entries, key=lambda e: e.key)


def _solve_conda(env: EnvFile, platform: str, cmap: ChannelMap, cache_dir: Path) -> list[Record]:
    import rattler
    from rattler import BuildString, GenericVirtualPackage, PackageName, Version
    from rattler.exceptions import SolverError

    virtual = [GenericVirtualPackage(PackageName(n), Version(v), BuildString("0"))
               for n, v in declared_virtual_packages(env.variant, platform)]
    try:
        specs = [rattler.MatchSpec(solver_spec(s, cmap), strict=False) for s in env.specs]
    except Exception as e:  # noqa: BLE001 - rattler's InvalidMatchSpecError has no stable import path
        raise Fail.permanent(f"{env.path}: dependencies: {e}") from None
    gateway = rattler.Gateway(cache_dir=cache_dir, show_progress=False)
    try:
        records = asyncio.run(rattler.solve(
            [rattler.Channel(url) for url in channel_urls(env, cmap)], specs, gateway=gateway,
            platforms=[platform, "noarch"],  # type: ignore[list-item]  # a Literal in rattler's stubs
            virtual_packages=virtual))
    except SolverError as e:
        raise Fail.permanent(f"{env.path} ({platform}, variant {env.variant}): cannot solve: {e}") from None
    except Exception as e:  # noqa: BLE001 - rattler's fetch errors have no stable import path
        raise Fail.retry(f"{env.path} ({platform}): cannot read the channels: {e}") from None
    return [_conda_entry(r, platform) for r in records]


def wheel_records(env: EnvFile, platform: str) -> list[Record]:
    """The wheel files `env` names under `pip:`, hashed from their bytes (`envfile.Wheel`)."""
    return [Record("pip", w.name, w.version, "", w.url, w.sha256, w.md5, platform) for w in env.wheels]


def _conda_entry(record: RepoDataRecord, platform: str) -> Record:
    import rattler

    name = record.name.normalized
    if not record.md5 or not record.sha256:
        raise Fail.permanent(f"{record.url}: the channel's repodata gives no "
                             f"{'md5' if not record.md5 else 'sha256'}; fdlenv locks only hashed archives")
    depends: dict[str, str] = {}
    for dep in record.depends:
        spec = rattler.MatchSpec(dep, strict=False)
        depends[spec.name.normalized] = str(spec.version) if spec.version is not None else ""
    return Record("conda", name, str(record.version), str(record.build), record.url, record.sha256.hex(),
                  record.md5.hex(), platform, tuple(sorted(depends.items())))
