"""Reading a wheel's core metadata out of its zip, as pip's lazy wheel does: the end of the
file (the zip's central directory) and the one METADATA member, by HTTP range requests, never
the whole multi-GB wheel. `simpleapi.core_metadata` comes here when the index states no PEP
658 `.metadata` file for a wheel.

In order: a `_RangeFile` asks for the last `TAIL` bytes (the directory is there), zipfile
seeks to the member it wants and the file asks for that range; a server that answers a range
with the whole body (200) is refused, permanent, rather than read whole. The member is
inflated in steps, refused past `INFLATE_LIMIT` whatever its header states (`_inflate`).
"""

from __future__ import annotations

import io
import urllib.parse
import zipfile
from typing import TYPE_CHECKING

from ..base.errors import Fail
from ..base.netauth import shown
from ..base.netread import open_url, read_all, retrying, why

if TYPE_CHECKING:
    from _typeshed import WriteableBuffer

# A range answer (the zip's end, one member) is at most this many bytes.
RANGE_LIMIT = 16 << 20
# What a range read inflates of a wheel's METADATA (real ones: kilobytes; torch's: ~10 kB): a member
# stated or found larger is refused, transient, before more than this is held in memory.
INFLATE_LIMIT = 4 << 20


def metadata_from_zip(url: str, filename: str, listing: list[str] | None = None) -> bytes:
    """The one `.dist-info/METADATA` of the wheel at `url` (file:// opened in place, http(s) by
    range requests), its member names appended to `listing` when given."""
    parsed = urllib.parse.urlparse(url)
    handle: io.IOBase
    try:
        if parsed.scheme == "file":
            handle = open(urllib.parse.unquote(parsed.path), "rb")
        else:
            handle = _RangeFile(url.partition("#")[0])
        with handle, zipfile.ZipFile(handle) as z:
            if listing is not None:
                listing.extend(z.namelist())
            names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
            if len(names) != 1:
                raise Fail.permanent(f"wheel index: {filename} has {len(names)} .dist-info/METADATA files")
            return _inflate(z, names[0], filename)
    except zipfile.BadZipFile as e:
        raise Fail.permanent(f"wheel index: {filename} is not a readable wheel ({e})") from None
    except OSError as e:
        raise Fail.retry(f"wheel index: cannot read {url}: {why(e)}") from None


def _inflate(z: zipfile.ZipFile, name: str, filename: str) -> bytes:
    """Member `name` of `z`, refused (transient) when it states or inflates past INFLATE_LIMIT:
    read in steps, so no more than the limit is ever held, whatever its header says."""
    def refuse(size: str) -> Fail:
        return Fail.retry(f"wheel index: the METADATA of {filename} is {size}, over fdlenv's "
                          f"{INFLATE_LIMIT >> 20} MiB limit for core metadata; a broken or hostile index? "
                          "(tried again on the next attempt)")
    info = z.getinfo(name)
    if info.file_size > INFLATE_LIMIT:
        raise refuse(f"stated as {info.file_size} bytes")
    with z.open(info) as member:
        body = member.read(INFLATE_LIMIT + 1)
    if len(body) > INFLATE_LIMIT:
        raise refuse("larger than stated")
    return body


class _RangeFile(io.RawIOBase):
    """A wheel on an HTTP server, seekable through `Range:` requests (zipfile reads its end,
    then the one member it wants). A server that ignores ranges is refused rather than read whole."""

    TAIL = 1 << 16

    def __init__(self, url: str):
        super().__init__()
        self.url, self.pos, self.cache = url, 0, dict[int, bytes]()   # cache: offset -> the bytes read there
        body, total = self._get(f"bytes=-{self.TAIL}")
        self.size = total
        self.cache[total - len(body)] = body

    def _get(self, rng: str) -> tuple[bytes, int]:
        return retrying(lambda: self._get_once(rng), shown(self.url))

    def _get_once(self, rng: str) -> tuple[bytes, int]:
        with open_url(self.url, {"Range": rng, "Accept-Encoding": "identity"}) as resp:
            if resp.status != 206:
                raise Fail.permanent(f"wheel index: {self.url}: the index states no core metadata and the "
                                     "server ignores range requests; fdlenv does not download a whole wheel "
                                     "to lock it (use an index with PEP 658 metadata)")
            total = int(resp.headers.get("Content-Range", "*/0").rpartition("/")[2] or 0)
            return read_all(resp, RANGE_LIMIT, self.url), total

    def readable(self) -> bool:
        return True

    seekable = readable

    def tell(self) -> int:
        return self.pos

    def seek(self, offset: int, whence: int = 0) -> int:
        self.pos = {0: offset, 1: self.pos + offset, 2: self.size + offset}[whence]
        return self.pos

    def readinto(self, buffer: WriteableBuffer) -> int:
        n = min(len(b := memoryview(buffer)), max(0, self.size - self.pos))
        if n == 0:
            return 0
        for start, data in self.cache.items():
            if start <= self.pos and self.pos + n <= start + len(data):
                b[:n] = data[self.pos - start:self.pos - start + n]
                self.pos += n
                return n
        want = max(n, self.TAIL)
        data, _ = self._get(f"bytes={self.pos}-{min(self.size, self.pos + want) - 1}")
        self.cache[self.pos] = data
        n = min(n, len(data))
        b[:n] = data[:n]
        self.pos += n
        return n
