"""Wheels in the store: fetched in parallel, verified while streaming, extracted once, hard-linked.

A locked wheel is content like a conda package. Order, per wheel:
1. Its package-cache entry `pkgs/whl-<sha256>/` exists -> nothing to fetch.
2. Find its bytes: a local file (read in place), an
   http(s) URL, or an index entry (`pip+index://INDEX/PROJECT/FILE`, looked up
   through the index's simple API, see `fdlenv.index.pipindex`).
3. Download with sha256 computed while the bytes stream and, at once, extract
   them (`store.streamzip`: a zip read front to back) into
   `pkgs/.whl-<sha256>.<pid>...`; the entry is renamed into place only when
   the sha256 matches. An interrupted stream is restarted, never published.
   A zip the stream reader cannot handle, or a part an interrupted run left,
   takes the whole-file path (`store.wheelfile`: a resumable download into
   `archives/`, then `zipfile` extraction) and the archive is deleted after.
4. A local wheel is streamed the same way, read once (the whole-file path
   again for what the stream reader cannot handle). Escaping members are
   refused on every path. Before an entry is published, the wheel's own
   RECORD (`wheelfile.check_record`) and METADATA (`store.wheelmeta`: its
   name, version and requirements against the lock) are checked.
By cause: what a mirror that syncs fixes is transient (an index page or a file
it lists that is not there yet: `simpleapi`'s rules, and a file:// index's file
not there yet); other bytes than the lock's are permanent (an index sha256 or
the streamed bytes' sha256 not the lock's), and so is a torch that is not the
variant's build (`check_torch`, before anything is fetched and once extracted).
Steps 3-4 hold `locks/whl-<sha256>.lock`, so two realises that need one wheel
fetch and extract it once. Downloads run side by side, largest first (whatever
the index states: `store.fetchorder`), so the slowest download, not the sum,
bounds a cold realise.

Entry layout: `site/` (what goes to site-packages: the wheel root, `.data/purelib`
and `.data/platlib`), `data/` (`.data/data`, relative to the env prefix),
`include/` (`.data/headers`). Scripts and entry points are not installed: an
env holds libtorch for C++ builds, not a Python environment.

`ensure` and `check_torch` are all a realise imports when every entry is cached (a second
env: only linking); the fetch (steps 2-4, `store.wheelfetch`: the index client, the zip
streamer, the thread pools) is imported only when a wheel is missing.

`store.linktree` hard-links an entry into an env: every wheel of an env shares
one `lib/python<X.Y>/site-packages`, so `torch/lib/libtorch_cuda.so` finds
`nvidia/<lib>/lib` through its RPATH.
"""

from __future__ import annotations

import threading
from pathlib import Path

from ..names.home import Home
from ..lock.file import Record


def ensure(home: Home, records: list[Record], mirrors: dict[str, str],
           stop: threading.Event | None = None, variant: str | None = None) -> dict[str, Path]:
    """sha256 -> complete cache entry, for every wheel record (fetching what is missing).
    `stop`, once set (the caller was interrupted), makes every download give up at its next chunk.
    `variant`: its torch must be that variant's build, by its record before anything is fetched
    and by its files once it is extracted (`check_torch`)."""
    out = {r.sha256: home.wheel_entry(r.sha256) for r in records}
    if variant is not None:
        check_torch(variant, records, mirrors)
    todo = [r for r in records if not out[r.sha256].is_dir()]
    if todo:
        from . import wheelfetch

        wheelfetch.fetch(home, todo, mirrors, stop, records)
    if variant is not None:
        check_torch(variant, records, mirrors, out)
    return out


def check_torch(variant: str, records: list[Record], mirrors: dict[str, str],
                entries: dict[str, Path] | None = None) -> None:
    """Refuse a locked torch that is not `variant`'s build (`variants.build_mismatch`): by its
    version and requirements, and with `entries` (extracted) by its CUDA/HIP libraries too.
    Nothing is realised: the caller publishes nothing after a failure."""
    from ..index import pipindex
    from ..names import variants

    for r in records:
        if r.manager != "pip" or r.name != "torch":
            continue
        listing = None
        if entries is not None:
            lib = entries[r.sha256] / "site" / "torch" / "lib"
            listing = [n for n in ("libtorch_cuda.so", "libtorch_hip.so") if (lib / n).exists()]
        why = variants.build_mismatch(variant, r.version, {pipindex.normalize(k): str(v or "")
                                                           for k, v in r.dependencies.items()}, listing)
        if why:
            served = (pipindex.served_by(pipindex.parse_entry_url(r.url)[0], mirrors) if pipindex.is_entry_url(r.url)
                      else r.url)
            raise variants.build_refusal(variant, why, served, "nothing was realised; the lock names this "
                                         f"torch under {variant}: re-lock it from the right index "
                                         f"(`fdlenv lock --libtorch {variant}`)")
