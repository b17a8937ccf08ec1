"""sha256 (and md5 where a lock entry carries one): the one hashing helper.

Every byte fdlenv trusts is hashed while it passes (a download, a local
archive, a wheel streamed into the cache, a source file), so the helper is a
`Digest` fed chunk by chunk, plus `of_file` for a whole file and `of_text` for
the identity of a canonical string (env keys, build keys, spec hashes).
`hashlib.file_digest` is not used: it needs Python 3.11.
`sha256_of_file` is `env verify --full`'s: a file under `MAPPED` bytes read in one call, a
larger one hashed from `mmap` windows of at most `WINDOW` bytes, each unmapped once hashed (no
copy into Python buffers, and a lane's resident pages stay under one window: mapping whole files
took `verify --full` of a cu128 env to 1.4-1.7 GB of RSS, which a cgroup's memory limit counts).
On a real cu128 env (13,800 files, 6.5 GB, page cache warm, 2 lanes, load average 6-10 on 2
cores) CPU time was 4.8 s for 8 MiB windows as for whole mappings (38 MiB peak RSS against
1.47 GB), 5.3-8.0 s for reads into a reused 64 KiB-1 MiB buffer (the copy), 6.3 s for openssl.

`of_bytes`/`of_text` are on the re-dial path (the lock's digest, a root's
tag): they use CPython's own sha256 module, which imports in ~1 ms where
`hashlib` (OpenSSL) takes ~4; the digests are the same.
"""

from __future__ import annotations

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from hashlib import sha256 as _sha256   # typeshed has no stubs for the builtin; hashlib's has its interface
else:
    try:   # CPython's builtin sha256: `_sha2` from 3.12, `_sha256` before
        from _sha2 import sha256 as _sha256
    except ImportError:
        try:
            from _sha256 import sha256 as _sha256
        except ImportError:
            from hashlib import sha256 as _sha256

CHUNK = 1 << 20


class Digest:
    """sha256 of the bytes fed so far, md5 too when asked, and their count."""

    __slots__ = ("_sha", "_md5", "size")

    def __init__(self, md5: bool = False):
        import hashlib   # OpenSSL's, faster on large inputs

        self._sha = hashlib.sha256()
        self._md5 = hashlib.md5() if md5 else None
        self.size = 0

    def update(self, chunk: bytes | bytearray | memoryview) -> None:
        self._sha.update(chunk)
        if self._md5 is not None:
            self._md5.update(chunk)
        self.size += len(chunk)

    @property
    def sha256(self) -> str:
        return self._sha.hexdigest()

    @property
    def md5(self) -> str:
        return self._md5.hexdigest() if self._md5 is not None else ""


def of_file(path: str | os.PathLike[str], md5: bool = False, chunk: int = CHUNK,
            tick: Callable[[int], object] | None = None) -> Digest:
    """Hash a whole file; `tick(done_bytes)` is called after each chunk (progress)."""
    d = Digest(md5)
    with open(path, "rb") as f:
        while data := f.read(chunk):
            d.update(data)
            if tick is not None:
                tick(d.size)
    return d


MAPPED = 1 << 20
WINDOW = 8 << 20   # the most of one file mapped at once, per lane


def sha256_of_file(path: str | os.PathLike[str], window: int = WINDOW, size: int | None = None) -> str:
    """sha256 hex of a whole file: small ones by one read, larger ones through `mmap` windows
    of `window` bytes (a multiple of the page size), each unmapped once hashed (1 MiB reads
    where the file cannot be mapped). hashlib lets go of the GIL while it hashes a window.
    `size`, the file's size when the caller has just stat'ed it, saves a small file's fstat; the
    whole file is hashed whatever it says (a large one is stat'ed again before it is mapped). A
    small file goes through `os.read` on a bare descriptor: no file object (13,000 of cu128's
    13,800 files are under a MiB)."""
    import hashlib

    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        if size is None:
            size = os.fstat(fd).st_size
        if size < MAPPED:
            h = hashlib.sha256(os.read(fd, size + 1))
            while data := os.read(fd, CHUNK):   # grew since its stat: the rest too
                h.update(data)
            return h.hexdigest()
        return _mapped(fd, os.fstat(fd).st_size, window, path)   # its size now: a map past the end faults
    finally:
        os.close(fd)


def _mapped(fd: int, size: int, window: int, path: str | os.PathLike[str]) -> str:
    import hashlib
    import mmap

    h = hashlib.sha256()
    at = 0
    while at < size:
        n = min(window, size - at)
        try:
            m = mmap.mmap(fd, n, access=mmap.ACCESS_READ, offset=at)
        except (OSError, ValueError):
            return of_file(path).sha256
        with m:
            if hasattr(m, "madvise"):
                m.madvise(mmap.MADV_SEQUENTIAL)
            h.update(m)
        at += n
    return h.hexdigest()


def of_bytes(data: bytes) -> str:
    """sha256 hex of a small byte string (a lock file, a canonical key)."""
    return _sha256(data).hexdigest()


def of_text(text: str) -> str:
    """sha256 hex of a canonical string (UTF-8)."""
    return of_bytes(text.encode())
