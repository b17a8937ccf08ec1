"""Fetching and extracting the wheels `store.wheels.ensure` finds missing from the package cache.

Imported only when a wheel is missing: a realise whose wheels are all cached (a second env,
only linking) reads none of the index client, the zip streamer or the thread pools. The
order per wheel and by cause is `store.wheels`' docstring; here, in order: `fetch` asks
where each wheel is served (`where_served`, the index pages side by side), puts the largest
first (`store.fetchorder`) and runs the downloads; `_fetch_and_extract` takes the wheel's
lock and streams it (`_stream`: hashed and extracted in one pass) or, for what the stream
reader cannot handle, takes the whole-file path (`store.wheelfile`).
"""

from __future__ import annotations

import errno
import os
import shutil
import threading
import time
import urllib.parse
from concurrent.futures import FIRST_EXCEPTION, ThreadPoolExecutor, wait
from pathlib import Path

from ..base import errors, flocks, hashing, memory, netread
from ..index import pipindex, simpleapi
from ..base.errors import Fail
from ..names.home import Home
from ..base.progress import Meter, say
from . import fetchorder, streamzip, wheelfile, wheelmeta
from .wheelfile import CHUNK
from ..lock.file import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable, Iterator
    from http.client import HTTPResponse

# Wheels fetched side by side, one connection each. Four fill a fast link (the cu128 env from
# the configured index: 41.5 s with 4, 46.0 s with 16) and hold a third of the memory (peak
# RSS 112 MiB with 4, 186 MiB with 16; uv's 76 MiB): bench/wheels.py, the cold row.
DOWNLOADS = 4


class DownloadMeter(Meter):
    """Byte-level progress of a batch of wheels: size, rate, ETA and what is extracted (live on a
    terminal, a line every few seconds elsewhere; extraction goes on after the last byte)."""

    def __init__(self, count: int, total: int, every: float = 3.0, stop: threading.Event | None = None):
        super().__init__("wheels", total, every)
        self.count = count
        self.finished = self.extracted = 0
        # Set when one wheel failed or the caller stops (Ctrl-C): the others give up at their next chunk.
        self.stopped = stop if stop is not None else threading.Event()

    def add(self, n: int = 0, *, finished: int = 0, extracted: int = 0) -> None:
        with self._lock:
            self.done += n
            self.finished += finished
            self.extracted += extracted
            self.detail = (f"{self.finished}/{self.count} downloaded, "
                           f"{self.extracted}/{self.count} extracted")


GRACE = 1.5           # seconds the downloads get to stop at their next chunk once stopped


def fetch(home: Home, todo: list[Record], mirrors: dict[str, str], stop: threading.Event | None,
          records: list[Record]) -> None:
    """Fetch and extract the wheels `todo` (none has its cache entry), side by side, largest
    first; `stop` (set when the caller is interrupted) makes every download give up at its next
    chunk. A failure stops the others and is raised."""
    home.ensure(home.pkgs, home.archives)
    memory.hold()       # malloc's policy for the streams, before any of their threads starts
    sources = where_served(todo, mirrors)
    check = wheelmeta.Against(records, mirrors)   # each wheel's own METADATA against the lock (all of the env's)
    # The largest wheel is the critical path (torch: 0.9 GB in, 1.8 GB and 11,000 files out, one
    # stream): it goes first whatever the index states (`fetchorder`: the lock's sizes, the
    # index's, a HEAD, else the known-largest), on a thread of its own at normal priority; the
    # rest share a pool whose threads run at a lower one, so on a small machine they fill what
    # CPU it leaves.
    todo, sizes, first = fetchorder.largest_first(todo, sources)
    total = sum(sizes.values()) if len(sizes) == len(todo) else 0
    say(f"fetching {len(todo)} wheel(s)" + (f", {total / 1e9:.2f} GB" if total else ""))
    cpus = os.cpu_count() or 2
    t0 = time.monotonic()
    progress = DownloadMeter(len(todo), total, stop=stop)
    with progress:
        big = ThreadPoolExecutor(1, thread_name_prefix="fdlenv-big")
        dl = ThreadPoolExecutor(DOWNLOADS - 1 if first else DOWNLOADS, thread_name_prefix="fdlenv-dl",
                                initializer=_lower_priority if first else None)
        xp = ThreadPoolExecutor(cpus, thread_name_prefix="fdlenv-x")
        futures = []
        try:
            futures = [(big if r is first else dl).submit(_fetch_and_extract, home, r, *sources[r.sha256],
                                                           progress, xp, check) for r in todo]
            wait(futures, return_when=FIRST_EXCEPTION)
            failed = next((f.exception() for f in futures if f.done() and f.exception()), None)
            if failed is not None:   # the env cannot be made: stop the other downloads now
                raise failed
        except BaseException:
            # A failed wheel or Ctrl-C: every other download stops at its next chunk and removes
            # its own temp dir; whatever has not stopped within GRACE is left to the process's exit.
            progress.stopped.set()
            for f in futures:
                f.cancel()
            wait(futures, timeout=GRACE)
            raise
        finally:
            for pool in (big, dl, xp):
                pool.shutdown(wait=False, cancel_futures=True)
    say(f"wheels ready in {time.monotonic() - t0:.1f} s ({progress.done / 1e9:.2f} GB downloaded)")


def where_served(records: list[Record], mirrors: dict[str, str]) -> dict[str, tuple[str, int | None]]:
    """sha256 -> (URL or local path, size when the index says it); index pages read side by side."""
    bases: dict[str, str] = {}

    def one(r: Record) -> tuple[str, int | None]:
        if not pipindex.is_entry_url(r.url):
            return r.url, _local_size(r.url)
        index, project, filename = pipindex.parse_entry_url(r.url)
        try:   # a cold cache's empty page is often full a second later: tried again first (netread)
            url, stated, size = netread.retrying(lambda: simpleapi.find_file(bases[index], project, filename),
                                                 f"{project}'s page")
        except simpleapi.Unreachable as e:
            raise Fail.retry(e.message + pipindex.ways_out(index, mirrors)) from None
        size = size or _local_size(url)
        if stated and stated.lower() != r.sha256:
            raise Fail.permanent(f"wheel {filename}: the index states sha256 {stated}, the lock {r.sha256}; "
                                 "the index serves other bytes than were locked")
        return url, size

    for r in records:   # each index name resolved once (for `pypi`, that asks pip)
        if pipindex.is_entry_url(r.url):
            index = pipindex.parse_entry_url(r.url)[0]
            if index not in bases:
                bases[index] = pipindex.base_url(index, mirrors)
    with ThreadPoolExecutor(DOWNLOADS, thread_name_prefix="fdlenv-idx") as pool:
        return {r.sha256: found for r, found in zip(records, pool.map(one, records), strict=True)}


def _lower_priority() -> None:
    """This thread only (Linux: a thread is a task with its own nice value)."""
    try:
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 10)
    except (OSError, AttributeError):
        pass


def _local_size(url: str) -> int | None:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme not in ("file", ""):
        return None
    try:
        return os.stat(urllib.parse.unquote(parsed.path)).st_size
    except OSError:
        return None


def _fetch_and_extract(home: Home, r: Record, source: str, stated: int | None, progress: DownloadMeter,
                       pool: ThreadPoolExecutor, check: wheelmeta.Against) -> None:
    """One wheel, under its own lock: two realises that need it fetch and extract it once.
    `stated`: its size as the index gives it (a cap on what is read), or None."""
    with flocks.exclusive(home.wheel_lock(r.sha256), f"fetching {r.filename}"):
        if home.wheel_entry(r.sha256).is_dir():   # another process finished it while we waited
            progress.add(finished=1, extracted=1)
            return
        netread.retrying(lambda: _fetch_and_extract_held(home, r, source, stated, progress, pool, check),
                         f"wheel {r.filename}", progress.stopped.is_set)


def _fetch_and_extract_held(home: Home, r: Record, source: str, stated: int | None, progress: DownloadMeter,
                            pool: ThreadPoolExecutor, check: wheelmeta.Against) -> None:
    parsed = urllib.parse.urlparse(source)
    if parsed.scheme in ("http", "https"):
        resumable = home.archive(r.sha256, ".whl").is_file() or home.partial(r.sha256).is_file()
        if not resumable:
            try:
                with _open_whole(source) as resp:
                    # A length the server declares or the index states is enforced by netread:
                    # a body that ends short of it raises there, so one that ends is whole.
                    whole = stated is not None or resp.headers.get("Content-Length", "").isdigit()
                    _stream(home, r, netread.chunks(resp, source, wheelfile.DOWNLOAD_LIMIT, stated, CHUNK),
                            source, progress, check, whole)
                return
            except streamzip.Unsupported as e:
                say(f"wheel {r.filename} cannot be extracted while it downloads ({e}): fetching it whole")
        path = wheelfile.download(home, r, source, progress, stated)
        _extract_whole(home, r, path, pool, progress, check)
        path.unlink(missing_ok=True)
    elif parsed.scheme in ("file", ""):
        path = Path(urllib.parse.unquote(parsed.path))
        if not path.is_file():
            if pipindex.is_entry_url(r.url):   # a file:// index lists it but lacks it: a share still syncing
                raise Fail.retry(f"wheel {r.filename}: its index lists it at {path}, which is not there "
                                 "(a mirror still syncing?); tried again on the next attempt")
            raise Fail.permanent(f"wheel {r.filename} not found at {path}")
        try:
            _stream(home, r, _file_chunks(path), str(path), progress, check)
        except streamzip.Unsupported:
            wheelfile.verify_local(r, path)
            _extract_whole(home, r, path, pool, progress, check)
    else:
        raise Fail.permanent(f"wheel URL {source!r}: unsupported scheme; accepted: file://, http://, https://")


def _extract_whole(home: Home, r: Record, path: Path, pool: ThreadPoolExecutor, progress: DownloadMeter,
                   check: wheelmeta.Against) -> None:
    """The whole-file path for verified bytes at `path` (see store.wheelfile)."""
    progress.add(finished=1)
    wheelfile.extract(home, r, path, pool, progress.stopped, check)
    progress.add(extracted=1)


def _open_whole(url: str) -> HTTPResponse:
    """The response to a whole-file request (a 206 to it, or no answer, is transient)."""
    try:
        resp = netread.open_url(url)
    except OSError as e:
        raise Fail.retry(f"download of {url} failed: {netread.why(e)}") from None
    if resp.status != 200:
        resp.close()
        raise Fail.retry(f"download of {url}: the server answered {resp.status} to a whole-file request; retry")
    out: HTTPResponse = resp   # what urlopen answers for http(s); `open_url` says nothing yet
    return out


def _file_chunks(path: Path) -> Iterator[memoryview]:
    """A local file in CHUNK pieces read into one buffer: each piece is a view its consumer is
    done with before the next read (a fresh object per piece faults its pages in anew, about
    5 us per 4 KiB page on a VM)."""
    buf = bytearray(CHUNK)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while n := f.readinto(buf):
            yield view[:n]


def _stream(home: Home, r: Record, chunks: Iterable[bytes | memoryview], where: str, progress: DownloadMeter,
            check: wheelmeta.Against, whole: bool = True) -> None:
    """Read, hash and extract in one pass (a download or a local file); the entry is published
    only on a sha256 match. By cause: bytes that end before the zip's end record, when nothing
    says they are `whole` (a declared or stated length; a local file is whole), are a cut
    (transient, restarted next time); bytes that are no well-formed wheel, or whole bytes with
    another sha256, are permanent; nothing is published either way."""
    tmp = home.wheel_temp(r.sha256, os.getpid(), threading.get_ident())
    shutil.rmtree(tmp, ignore_errors=True)
    sha = hashing.Digest()
    # `tmp` is made with the first member: a stream stopped before any byte came leaves nothing.
    unzip = streamzip.StreamUnzip(tmp, wheelfile.place, progress.stopped)
    try:
        try:
            for chunk in chunks:
                if progress.stopped.is_set():
                    raise wheelfile.stopped(r)
                sha.update(chunk)
                unzip.feed(chunk)
                progress.add(len(chunk))
        except streamzip.Stopped:
            raise wheelfile.stopped(r) from None
        except streamzip.Escape as e:
            raise Fail.permanent(f"wheel {r.filename} has a member that escapes its root: {e}; "
                                 "refusing to install it") from None
        except streamzip.Malformed as e:
            raise Fail.permanent(f"wheel {r.filename} ({where}) is not a well-formed wheel: {e}; "
                                 "refusing it") from None
        except OSError as e:
            if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                errors.note_full(e, str(tmp))   # blocks or inodes, read before the cleanup frees them
                raise
            raise Fail.retry(f"reading {where} failed: {netread.why(e)}") from None
        if sha.sha256 != r.sha256:
            if not unzip.complete() and not whole:
                raise Fail.retry(f"wheel {r.filename}: {where} ended early ({unzip.read} bytes, before the "
                                 "zip's end); nothing was kept, retry")
            raise Fail.permanent(f"wheel {r.filename} ({where}) does not match the lock: sha256 "
                                 f"{sha.sha256} != {r.sha256}; it was tampered with or the index "
                                 "serves other bytes")
        progress.add(finished=1)
        try:
            unzip.finish()
        except streamzip.Malformed as e:
            raise Fail.permanent(f"wheel {r.filename} is not a well-formed wheel: {e}; refusing it") from None
        wheelfile.check_record(r, tmp, unzip.sizes)
        check(r, tmp, unzip.sizes)
        tmp.mkdir(parents=True, exist_ok=True)   # a wheel with nothing to install still gets its entry
        wheelfile.publish(tmp, home.wheel_entry(r.sha256))
        progress.add(extracted=1)
    finally:
        unzip.close()
        shutil.rmtree(tmp, ignore_errors=True)
