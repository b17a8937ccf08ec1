"""A wheel as a whole file: the resumable download and zipfile extraction.

`store.wheels` streams each wheel (hash and extract as it downloads). This is
the other path, for what the stream reader cannot handle and for what an
interrupted run left: `download` fetches into `archives/.<sha256>.part`
(resumed with HTTP Range after re-hashing the part, restarted when the server
does not resume), renames to `archives/<sha256>.whl` only on a sha256 match;
`extract` unpacks with `zipfile`, members split across threads (zlib and file
writes release the GIL), into `pkgs/.whl-<sha256>.<pid>...`, then `publish`
renames it to `pkgs/whl-<sha256>/`. `place` maps a member to the cache entry's
layout for both paths; members that escape are refused on both.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
from pathlib import Path

from ..base.errors import Fail
from ..base import errors, hashing
from ..names.home import Home
from ..lock.file import Record, mismatch
from . import streamzip
from .streamzip import escapes

TYPE_CHECKING = False   # concurrent.futures (and logging) only where a wheel is extracted whole
if TYPE_CHECKING:
    import zipfile
    from collections.abc import Callable
    from concurrent.futures import Future, ThreadPoolExecutor
    from http.client import HTTPResponse
    from typing import Protocol

    class Progress(Protocol):
        """What a download reports its bytes to, and is stopped by (`wheelfetch.Bytes`)."""

        stopped: threading.Event

        def add(self, n: int = 0) -> None: ...

    # (member, its path in the cache entry): what a thread extracts
    Planned = tuple[zipfile.ZipInfo, str]

CHUNK = 1 << 20
# A download whose size nobody states (PyTorch's HTML pages give none) stops here: the largest
# wheels (torch for ROCm) are about 5 GB.
DOWNLOAD_LIMIT = 16 << 30


def publish(tmp: Path, final: Path) -> None:
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():   # not another process that finished first
            raise


def verify_local(r: Record, path: Path) -> None:
    if (bad := mismatch(r, str(path), hashing.of_file(path, md5=True))):
        raise bad


def stopped(r: Record) -> Fail:
    """Why a download gave up on its own: another wheel of the realise failed, or Ctrl-C."""
    return Fail.retry(f"stopped fetching {r.filename}: another wheel failed or the realise was stopped")


def _range_start(resp: HTTPResponse) -> int | None:
    """Where a 206's body starts (`Content-Range: bytes START-END/TOTAL`), or None."""
    value = resp.headers.get("Content-Range", "")
    unit, _, rest = value.partition(" ")
    first = rest.partition("-")[0]
    return int(first) if unit == "bytes" and first.isdigit() else None


def download(home: Home, r: Record, url: str, progress: Progress, stated: int | None = None) -> Path:
    """`archives/<sha256>.whl`, verified; resumes a part an interrupted run left. By cause: a cut,
    a bad range or a part that does not yet end like a zip is transient (the part is kept); only
    whole bytes with another sha256 are permanent (the part is dropped)."""
    import urllib.error

    from ..base import netread

    done: Path = home.archive(r.sha256, ".whl")
    part = home.partial(r.sha256)
    if done.is_file():   # verified (renamed only on a match) by a run killed before extracting it
        return done
    with open(part, "ab+") as out:
        sha = hashing.Digest()
        out.seek(0)
        while kept := out.read(CHUNK):
            sha.update(kept)
        have = out.tell()
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with netread.open_url(url, headers) as resp:
                start = _range_start(resp) if resp.status == 206 else 0
                if start is None or (start and start != have) or (resp.status != 206 and resp.status != 200):
                    out.truncate(0)
                    raise Fail.retry(f"download of {url}: the server answered {resp.status} "
                                     f"{resp.headers.get('Content-Range', '')!r} to a range from byte {have}; "
                                     "starting over next time")
                if start != have:          # a whole file (200, or a 206 from byte 0): start over
                    out.seek(0)
                    out.truncate()
                    sha, have = hashing.Digest(), 0
                progress.add(have)
                for chunk in netread.chunks(resp, url, DOWNLOAD_LIMIT - have,
                                            None if stated is None else stated - have, CHUNK):
                    if progress.stopped.is_set():
                        raise stopped(r)
                    sha.update(chunk)
                    out.write(chunk)
                    progress.add(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        except urllib.error.HTTPError as e:
            if e.code == 416:   # the part is complete (or longer than the file): start over next time
                out.truncate(0)
            raise Fail.retry(f"download of {url} failed: {netread.why(e)}") from None
        except Fail as f:
            if not f.transient:
                out.truncate(0)
            raise
        except OSError as e:
            if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                errors.note_full(e, str(part))   # blocks or inodes, read before the cleanup frees them
                raise
            raise Fail.retry(f"download of {url} failed (the part is kept and resumed next time): {netread.why(e)}") from None
        if sha.sha256 != r.sha256:
            if stated is None and not streamzip.file_complete(part):   # short of a stated size: netread's
                raise Fail.retry(f"wheel {r.filename}: the download from {url} ended early at {out.tell()} "
                                 "bytes; the part is kept and resumed next time")
            out.truncate(0)
            raise Fail.permanent(f"wheel {r.filename} from {url} does not match the lock: sha256 "
                                 f"{sha.sha256} != {r.sha256}; the index serves other bytes")
        os.replace(part, done)
    return done


def check_record(r: Record, root: Path, sizes: dict[str, int]) -> None:
    """The wheel's own RECORD against what was extracted (`sizes`: member -> bytes), both ways
    (PEP 376/627): every file it lists is there with the size it states, and every file the
    wheel holds is listed, with its size; only RECORD itself and its signatures (RECORD.jws,
    RECORD.p7s) may go unlisted. A member RECORD does not list would be installed unchecked
    and pass `env verify --full`. (Contents: the wheel's sha256 is the lock's; `env verify
    --full` re-hashes each file against RECORD.)"""
    import csv

    record = next((n for n in sizes if n.count("/") == 1 and n.endswith(".dist-info/RECORD")), None)
    rel = place(record) if record else None
    if rel is None:
        raise Fail.permanent(f"wheel {r.filename} has no .dist-info/RECORD; refusing it")
    try:
        with open(root / rel, newline="", encoding="utf-8") as f:
            rows = list(csv.reader(f))
    except (OSError, UnicodeDecodeError, csv.Error) as e:
        raise Fail.permanent(f"wheel {r.filename}: its RECORD cannot be read ({e}); refusing it") from None
    listed = set()
    for row in rows:
        if not row or not row[0] or row[0] == record or row[0].endswith("/"):
            continue
        name, size = row[0], row[2] if len(row) > 2 else ""
        listed.add(name)
        if name not in sizes:
            raise Fail.permanent(f"wheel {r.filename}: RECORD lists {name!r}, which the wheel does not hold; "
                                 "refusing it")
        if not size.isdigit() or int(size) != sizes[name]:
            raise Fail.permanent(f"wheel {r.filename}: RECORD states {size or 'no size'}"
                                 f"{' bytes' if size else ''} for {name!r}, the wheel holds {sizes[name]} bytes; "
                                 "refusing it")
    unsigned = {record, f"{record}.jws", f"{record}.p7s"}
    unlisted = sorted(n for n in sizes if n not in listed and n not in unsigned and not n.endswith("/"))
    if unlisted:
        raise Fail.permanent(f"wheel {r.filename} holds {unlisted[0]!r}"
                             + (f" and {len(unlisted) - 1} more member(s)" if len(unlisted) > 1 else "")
                             + ", which its RECORD does not list (PEP 376: every file is listed); refusing it")


_DATA_DIR = re.compile(r"[^/]+-[^/]+\.data")


def place(name: str) -> str | None:
    """A wheel member -> its path inside the cache entry (None: not installed)."""
    first, _, rest = name.partition("/")
    if _DATA_DIR.fullmatch(first):
        kind, _, sub = rest.partition("/")
        base = {"purelib": "site/", "platlib": "site/", "data": "data/", "headers": "include/"}.get(kind)
        return base + sub if base and sub else None
    return "site/" + name


def extract(home: Home, r: Record, path: Path, pool: ThreadPoolExecutor,
            stop: threading.Event | None = None,
            check: Callable[[Record, Path, dict[str, int]], None] | None = None) -> None:
    """Unpack verified bytes at `path` into the cache entry; `stop` set: give up between members.
    `check(r, root, sizes)`, when given, runs after RECORD's (`store.wheelmeta`), before publishing."""
    import zipfile   # only where a wheel is extracted whole: not on a link-only realise

    final = home.wheel_entry(r.sha256)
    if final.is_dir():
        return
    tmp = home.wheel_temp(r.sha256, os.getpid(), threading.get_ident())
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist() if not i.is_dir()]
        if sum(m.file_size for m in members) > streamzip.RATIO * path.stat().st_size + streamzip.SLACK:
            raise Fail.permanent(f"wheel {r.filename} inflates over {streamzip.RATIO}x its size "
                                 "(a zip bomb?); refusing it")
        planned: list[Planned] = []
        for m in members:
            if "\0" in m.filename:
                raise Fail.permanent(f"wheel {r.filename} has a member name no file can have "
                                     f"({m.filename!r}); refusing it")
            rel = place(m.filename)
            if rel is None:
                continue
            if escapes(m.filename):
                raise Fail.permanent(f"wheel {r.filename} has a member that escapes its root: "
                                     f"{m.filename!r}; refusing to install it")
            planned.append((m, rel))
        dirs = sorted({os.path.dirname(rel) for _, rel in planned})
        for d in dirs:
            os.makedirs(tmp / d, exist_ok=True)
        groups = _balance(planned, max(1, min(os.cpu_count() or 2, len(planned) // 64 or 1)))
        futures: list[Future[None]] = [pool.submit(_extract_group, path, g, tmp, stop) for g in groups]
        for f in futures:
            f.result()
        sizes = {m.filename: m.file_size for m in members}
        check_record(r, tmp, sizes)
        if check is not None:
            check(r, tmp, sizes)
        publish(tmp, final)
    except _bad_zip() as e:
        raise Fail.permanent(f"wheel {r.filename} is not a valid zip ({type(e).__name__}: {e})") from None
    except OSError as e:
        if e.errno in streamzip.NAME_ERRNOS:
            raise Fail.permanent(f"wheel {r.filename}: a member cannot be written ({e.strerror}); "
                                 "refusing it") from None
        raise
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _bad_zip() -> tuple[type[BaseException], ...]:
    """What a crafted zip makes zipfile raise (besides OSError): a permanent "not a valid zip"."""
    import zipfile

    return (zipfile.BadZipFile, zipfile.LargeZipFile, EOFError, NotImplementedError, RuntimeError,
            ValueError, *streamzip.PARSE_ERRORS, *streamzip.INFLATE_ERRORS)


def _balance(planned: list[Planned], n: int) -> list[list[Planned]]:
    groups: list[list[Planned]] = [[] for _ in range(n)]
    sizes = [0] * n
    for item in sorted(planned, key=lambda p: -p[0].file_size):
        i = sizes.index(min(sizes))
        groups[i].append(item)
        sizes[i] += item[0].file_size + 4096
    return [g for g in groups if g]


def _extract_group(path: Path, group: list[Planned], root: Path, stop: threading.Event | None) -> None:
    import zipfile

    with zipfile.ZipFile(path) as zf:
        for m, rel in group:
            if stop is not None and stop.is_set():
                raise Fail.retry(f"stopped extracting {path.name}")
            dest = root / rel
            with zf.open(m) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            mode = (m.external_attr >> 16) & 0o777
            os.chmod(dest, 0o755 if mode & 0o111 else 0o644)
