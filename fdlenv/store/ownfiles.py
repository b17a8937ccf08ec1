"""fdlenv's own files inside an env: written never through a link, and no package may ship one.

A package's file in an env is a hard link into the package cache (and through it into every
env that shares it), so fdlenv writing its `.arch`, `build-version` or manifest through a
link or over a linked file a package put there would change the cache and the published envs.
In order, once the packages are installed into staging and before anything of fdlenv's is
written:
1. `refuse_over_own`: anything (a link, a file, a directory) standing where fdlenv writes
   its own file (`own_files`: `.fdlenv/`, the libtorch root's `.arch`, CUDA_HOME's `cuda/`
   in an NVIDIA env) refuses the env, naming the package (`_owner`) and the path (exit 2);
2. `write_arch` and `write` (the manifest): through directory descriptors opened with
   O_NOFOLLOW, the name unlinked first, created O_EXCL|O_NOFOLLOW (`confine.write_own`);
   `build-version` is written only where the source ships none.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from ..base import confine
from ..names import variants
from ..base.errors import Fail
from ..lock.file import Record
from . import cudahome
from .env import MANIFEST


def own_files(stage: Path, root: Path, variant: str) -> list[str]:
    """What fdlenv itself writes into an env, relative to it: the manifest's directory, the
    libtorch root's `.arch` and, for an NVIDIA env with nvidia wheels, CUDA_HOME's tree."""
    out = [MANIFEST.split("/")[0], (root / ".arch").relative_to(stage).as_posix()]
    if variants.get(variant).vendor == "nvidia" and (root.parent / "nvidia").is_dir():
        out.append(cudahome.DIRNAME)
    return out


def refuse_over_own(stage: Path, root: Path, variant: str, entries: dict[str, Path]) -> None:
    """Refuse the env when a package put anything (a link, a file, a directory) where fdlenv
    writes its own file: fdlenv would write through it, into the package cache it is linked from."""
    for rel in own_files(stage, root, variant):
        if os.path.lexists(stage / rel):
            raise Fail.permanent(f"{_owner(stage, rel, entries)} ships {rel!r}, where fdlenv writes its own "
                                 "file; a write there would go through it into the package cache; refusing it")


def _owner(stage: Path, rel: str, entries: dict[str, Path]) -> str:
    """Which package holds `rel` (or a path under it): its conda-meta record, else the wheel
    whose cache entry holds it. Read only when an env is refused."""
    for meta in sorted((stage / "conda-meta").glob("*.json")):
        with contextlib.suppress(OSError, ValueError):
            d = json.loads(meta.read_text())
            if any(f == rel or f.startswith(rel + "/") for f in d.get("files") or []):
                return f"package {d.get('name', meta.stem)}"
    site = next(iter(stage.glob("lib/python*/site-packages")), None)
    inner = (Path("site") / Path(stage / rel).relative_to(site) if site and (stage / rel).is_relative_to(site)
             else Path("include", *Path(rel).parts[1:]) if rel.startswith("include/") else Path("data") / rel)
    for sha, entry in entries.items():
        if os.path.lexists(entry / inner):
            return f"wheel whl-{sha[:12]}"
    return "a package"


def write_arch(stage: Path, root: Path, variant: str, records: list[Record]) -> list[str]:
    """flodl's `.arch` facts, from what `fdlenv pack` recorded when it is there, else (a wheel
    env) from the torch wheel and the variant's table; and `build-version` where the source
    (a wheel) has none, as PyTorch's zips carry it (`2.10.0+cu128`). Returns the files it wrote
    (relative to `stage`), for the caller to fsync (`write`)."""
    from ..hw.coverage import ARCHS

    v = variants.get(variant)
    facts = {}
    with contextlib.suppress(OSError, ValueError):
        facts = json.loads((root / ".fdlenv-pack.json").read_text())
    wheel = next((r.version for r in records if r.manager == "pip" and r.name == "torch"), None)
    torch = facts.get("version") or next((r.version for r in records if r.name == v.package), "") \
        or (wheel or "").split("+")[0]
    archs = facts.get("archs") or ([] if facts or not wheel else list(ARCHS[variant]))
    lines = [f"cuda={facts.get('cuda') or v.cuda or 'none'}", f"torch={torch}",
             f"archs={' '.join(archs)}", "source=locked", f"variant={variant}"]
    at = "" if root == stage else root.relative_to(stage).as_posix() + "/"
    write(stage, f"{at}.arch", ("\n".join(lines) + "\n").encode())
    written = [f"{at}.arch"]
    # a source's own build-version (a link too) stands: written only where none is
    if wheel and write(stage, f"{at}build-version", f"{torch}+{variant}\n".encode(), keep=True):
        written.append(f"{at}build-version")
    return written


def write(stage: Path, rel: str, data: bytes, keep: bool = False) -> bool:
    """One of fdlenv's own files in the env (`confine.write_own`: never through a link); a
    directory on its way that a package made a link is a permanent refusal. Not fsynced here:
    the realise fsyncs its own files together, last, just before it publishes
    (`install.build`): an fsync waits behind the gigabytes the extraction left to write back,
    and work done before it is done while they drain. True when written (`keep` leaves what
    stands)."""
    try:
        return confine.write_own(stage, rel, data, keep=keep, fsync=False)
    except confine.Refused as e:
        raise Fail.permanent(f"the env's {rel!r} cannot be written: {e.strerror} (a package made it so); "
                             "refusing the env") from None
