"""Getting each locked archive onto this box, and proving its bytes.

py-rattler 0.28 does not check hashes of file:// packages (a valid archive
with other bytes installs silently), so fdlenv checks sha256 and md5 itself,
for every source. Remote archives are downloaded once into
`archives/<sha256><ext>` (hashed while they stream, renamed into place only
when they match); local ones are read in place. For a local archive the hash
runs *beside* rattler's extraction (`verify_all` in a thread while the
install worker runs) and nothing is published until both are done.

A verified local archive is remembered by its stat identity (device, inode,
size, mtime, ctime) in `cache/verified/<sha256>`, so a warm realise does not
re-read gigabytes; any write to the file changes its ctime and forces a
re-hash.

By cause: an archive a mirror lacks (a `--mirror` share without the file, an
HTTP mirror's 404 or refusal) is transient, since a mirror that syncs fixes it;
bytes other than the lock's (sha256 or md5) are permanent; a lock's own
`file://` path that is not there is permanent (only a `--mirror` fixes it).
"""

from __future__ import annotations

import errno
import os
import tempfile
import urllib.parse
from pathlib import Path

from ..base.errors import Fail
from ..base.record import Record as TypedRecord   # `Record` here is the lock entry
from ..names.home import Home, Living, Sweeper, listing
from ..base import atomic, confine, hashing
from ..index import mirrors as _mirrors
from ..lock.file import Record, mismatch

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator

CHUNK = 1 << 20


class Archive(TypedRecord):
    """A locked conda archive on this box (a Record: no dataclasses import)."""

    record: Record     # the lock entry
    path: Path         # where its bytes are
    fetched: bool      # downloaded into archives/ (verified as it streamed), not read in place


def _ext(filename: str) -> str:
    for ext in (".tar.bz2", ".conda", ".whl"):
        if filename.endswith(ext):
            return ext
    return ""


def _stat_id(st: os.stat_result) -> str:
    return f"{st.st_dev} {st.st_ino} {st.st_size} {st.st_mtime_ns} {st.st_ctime_ns}"


def verify(home: Home, a: Archive) -> None:
    """Raise Fail unless `a.path` holds exactly the locked bytes."""
    if a.fetched:
        return  # hashed while downloading, published by rename only on a match
    memo = home.verified(a.record.sha256)
    try:
        st = a.path.stat()
    except FileNotFoundError:
        raise Fail.permanent(f"archive {a.path} disappeared during the install") from None
    try:
        if memo.read_text() == _stat_id(st):
            return
    except OSError:
        pass
    if (bad := mismatch(a.record, str(a.path), hashing.of_file(a.path, md5=True))):
        raise bad
    try:
        atomic.write_text(memo, _stat_id(st))
    except OSError:
        pass   # only a shortcut for the next realise: it re-hashes


def locate(home: Home, r: Record, mirrors: dict[str, str]) -> Archive:
    """Where record `r`'s bytes are, downloading them if they are remote and not yet here."""
    url = _mirrors.rewrite(r.url, mirrors)
    cached = home.archive(r.sha256, _ext(r.filename))
    if cached.is_file():
        return Archive(r, cached, True)
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file" or not parsed.scheme:
        path = Path(urllib.parse.unquote(parsed.path))
        if not path.is_file():
            if url != r.url:   # a mirror's share that lacks it: it may not have synced yet
                raise Fail.retry(f"archive {r.filename} not found at {path}, where --mirror maps its channel "
                                 "(a mirror still syncing?); tried again on the next attempt")
            raise Fail.permanent(f"archive {r.filename} not found at {path} "
                                 "(map its channel with --mirror NAME=URL)")
        return Archive(r, path, False)
    if parsed.scheme not in ("http", "https"):
        raise Fail.permanent(f"archive URL {url!r}: unsupported scheme; accepted: file://, http://, https://")
    from ..base.netread import retrying

    retrying(lambda: _download(home, r, url, cached), f"archive {r.filename}")
    return Archive(r, cached, True)


def _download(home: Home, r: Record, url: str, dest: Path) -> None:
    """Into `archives/`, hashed as it streams, bounded (`netread`); a .conda (a zip) whose bytes end
    before its end record is a cut download, transient; whole bytes with another hash, permanent."""
    from ..base import netread
    from .streamzip import file_complete
    from .wheelfile import DOWNLOAD_LIMIT

    home.ensure(home.archives)
    d = hashing.Digest(md5=True)
    fd, tmp = tempfile.mkstemp(dir=home.archives, prefix=f".{r.sha256[:16]}-")
    try:
        with os.fdopen(fd, "wb") as out, netread.open_url(url) as resp:
            for chunk in netread.chunks(resp, url, DOWNLOAD_LIMIT, size=CHUNK):
                d.update(chunk)
                out.write(chunk)
            out.flush()
            os.fsync(out.fileno())
        if (bad := mismatch(r, url, d)):
            if r.filename.endswith(".conda") and not file_complete(tmp):
                raise Fail.retry(f"download of {url} ended early ({os.path.getsize(tmp)} bytes, before the "
                                 "archive's end); retry")
            raise bad
        os.replace(tmp, dest)
    except OSError as e:
        if e.errno in (errno.ENOSPC, errno.EDQUOT):
            from ..base.errors import note_full
            note_full(e, tmp)   # blocks or inodes, read before the part is removed
            raise
        raise Fail.retry(f"download of {url} failed: {netread.why(e)}") from None
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)


def evict_cache_entry(home: Home, r: Record) -> None:
    """Drop the package cache's extraction of `r` (it may hold bytes that failed verification)."""
    if r.manager == "pip":
        atomic.discard(home.wheel_entry(r.sha256))
        return
    stem = r.filename.removesuffix(".conda").removesuffix(".tar.bz2")
    entry = confine.inside(home.pkgs, stem, f"the lock entry {r.name} ({r.url})")
    atomic.discard(entry)   # renamed out of its name first: never half an entry
    entry.with_name(f"{entry.name}.lock").unlink(missing_ok=True)


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of `cache/verified` (`verify`'s memo, and install's `<sha256>.paths`):
    one of an archive no kept env names."""
    for p in listing(home.verified()):
        if p.name.split(".", 1)[0] not in living.archives:
            yield p, "hash memo of an archive no kept env names"


SWEEPER = Sweeper(("verified",), sweep)
