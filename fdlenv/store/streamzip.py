"""Extracting a zip (a wheel) while its bytes arrive, so a download and its extraction overlap.

A zip can be read front to back: every member starts with a local header
(name, method, sizes) followed by its data, and the central directory comes
last. `StreamUnzip.feed(chunk)` parses headers and inflates members as the
chunks come; the central directory, at the end, supplies what local headers
lack (the file modes) when `finish()` runs. The caller hashes the same bytes
and publishes nothing unless the sha256 matches the lock, so the stream needs
no other trust.

Inflating uses ISA-L (`isal`) where its wheel installs, else zlib.
Handled: stored and deflated members, sizes in the header or after the data
(a data descriptor, with a deflated member's end found by zlib itself), zip64
sizes. Anything else (encryption, other methods, a stored member whose size
comes only after it) raises `Unsupported`, and the caller falls back to
downloading the file whole and extracting it with `zipfile`.
"""

from __future__ import annotations

import os
import struct
import zlib
from pathlib import Path
from typing import Callable

try:   # ISA-L's inflate is about twice zlib's speed: inflating is most of a cold realise's CPU
    from isal.isal_zlib import decompressobj as _decompressobj
    from isal.isal_zlib import error as _isal_error
    INFLATE_ERRORS: tuple = (zlib.error, _isal_error)
except ImportError:   # a platform without isal's wheels: the same with zlib
    from zlib import decompressobj as _decompressobj
    INFLATE_ERRORS = (zlib.error,)

LOCAL = b"PK\x03\x04"
CENTRAL = b"PK\x01\x02"
DESCRIPTOR = b"PK\x07\x08"


def escapes(name: str) -> bool:
    """A zip member name that would land outside the extraction root."""
    return os.path.isabs(name) or ".." in name.split("/") or "\\" in name


class Unsupported(Exception):
    """A zip this reader cannot stream; the caller extracts the whole file instead."""


class Escape(Exception):
    """A member whose path leaves the extraction root."""


class StreamUnzip:
    """Feed it the bytes of a zip in order; members land under `root` at `place(name)`."""

    def __init__(self, root: Path, place: Callable[[str], str | None]):
        self.root, self.place = root, place
        self.buf = bytearray()
        self.pos = 0                # bytes of buf already consumed (no memmove per member)
        self.state = "header"
        self.member = None          # (out file or None, method, remaining compressed, descriptor, zip64)
        self.inflate = None
        self.tail = bytearray()     # the central directory, kept for the modes
        self.made: set[str] = set()
        self.files: list[tuple[str, str]] = []   # (zip name, path under root)

    def feed(self, data: bytes) -> None:
        if self.state == "central":
            self.tail += data
            return
        if self.pos:
            del self.buf[:self.pos]
            self.pos = 0
        self.buf += data
        while self._step():
            pass

    def _avail(self) -> int:
        return len(self.buf) - self.pos

    def _take(self, n: int) -> bytes:
        with memoryview(self.buf) as view:
            out = view[self.pos:self.pos + n].tobytes()
        self.pos += len(out)
        return out

    def _step(self) -> bool:
        if self.state == "header":
            return self._header()
        if self.state == "data":
            return self._data()
        if self.state == "descriptor":
            return self._descriptor()
        return False

    def _header(self) -> bool:
        if self._avail() < 4:
            return False
        sig = bytes(self.buf[self.pos:self.pos + 4])
        if sig == CENTRAL:
            self.state = "central"
            self.tail += self.buf[self.pos:]
            self.buf, self.pos = bytearray(), 0
            return False
        if sig != LOCAL:
            raise Unsupported(f"unexpected record {sig!r}")
        if self._avail() < 30:
            return False
        (_, _, flags, method, _, _, _, csize, usize, nlen, elen) = struct.unpack_from("<4sHHHHHIIIHH", self.buf, self.pos)
        if self._avail() < 30 + nlen + elen:
            return False
        self.pos += 30
        raw = self._take(nlen)
        extra = self._take(elen)
        if flags & 0x1:
            raise Unsupported("encrypted member")
        name = raw.decode("utf-8" if flags & 0x800 else "cp437")
        zip64 = False
        if csize == 0xFFFFFFFF or usize == 0xFFFFFFFF:
            zip64 = True
            usize, csize = self._zip64(extra, usize, csize)
        descriptor = bool(flags & 0x8)
        if method not in (0, 8) or (method == 0 and descriptor and csize == 0 and usize == 0 and not name.endswith("/")):
            raise Unsupported(f"member {name!r}: method {method}{' with a data descriptor' if descriptor else ''}")
        out = None
        if not name.endswith("/"):
            if escapes(name):
                raise Escape(name)
            rel = self.place(name)
            if rel is not None:
                dest = self.root / rel
                parent = os.path.dirname(rel)
                if parent not in self.made:
                    os.makedirs(self.root / parent, exist_ok=True)
                    self.made.add(parent)
                out = open(dest, "wb")
                self.files.append((name, rel))
        self.inflate = _decompressobj(-15) if method == 8 else None
        known = not descriptor or csize != 0
        self.member = [out, method, csize if known else None, descriptor, zip64]
        self.state = "data"
        return True

    @staticmethod
    def _zip64(extra: bytes, usize: int, csize: int) -> tuple[int, int]:
        i = 0
        while i + 4 <= len(extra):
            tag, size = struct.unpack("<HH", extra[i:i + 4])
            if tag == 0x0001:
                body, j = extra[i + 4:i + 4 + size], 0
                if usize == 0xFFFFFFFF:
                    usize, j = struct.unpack("<Q", body[j:j + 8])[0], j + 8
                if csize == 0xFFFFFFFF:
                    csize = struct.unpack("<Q", body[j:j + 8])[0]
                return usize, csize
            i += 4 + size
        raise Unsupported("zip64 sizes without their extra field")

    def _data(self) -> bool:
        out, method, remaining, descriptor, _ = self.member
        if not self._avail():
            return False
        if remaining is not None:
            chunk = self._take(min(remaining, self._avail()))
            self.member[2] = remaining - len(chunk)
            self._write(out, self.inflate.decompress(chunk) if self.inflate else chunk)
            if self.member[2] == 0:
                self._end_member(out)
            return self._avail() > 0 or self.state != "data"
        # size unknown (a data descriptor follows): deflate knows where it ends
        chunk = self._take(self._avail())
        self._write(out, self.inflate.decompress(chunk))
        if self.inflate.eof:
            self.buf, self.pos = bytearray(self.inflate.unused_data), 0
            self._end_member(out)
            return True
        return False

    def _write(self, out, data: bytes) -> None:
        if out is not None and data:
            out.write(data)

    def _end_member(self, out) -> None:
        if self.inflate is not None and not self.inflate.eof:
            self._write(out, self.inflate.flush())
        if out is not None:
            out.close()
        self.state = "descriptor" if self.member[3] else "header"

    def _descriptor(self) -> bool:
        zip64 = self.member[4]
        size = 4 + (16 if zip64 else 8)
        if self._avail() < 4:
            return False
        if bytes(self.buf[self.pos:self.pos + 4]) == DESCRIPTOR:
            size += 4
        if self._avail() < size:
            return False
        self.pos += size
        self.state = "header"
        return True

    def finish(self) -> None:
        """After the last byte: the stream must have reached the central directory; apply modes."""
        if self.state != "central":
            raise Unsupported(f"the zip ended in state {self.state}")
        modes = {}
        t, i = bytes(self.tail), 0
        while t[i:i + 4] == CENTRAL and i + 46 <= len(t):
            nlen, elen, clen = struct.unpack("<HHH", t[i + 28:i + 34])
            attr = struct.unpack("<I", t[i + 38:i + 42])[0]
            flags = struct.unpack("<H", t[i + 8:i + 10])[0]
            name = t[i + 46:i + 46 + nlen].decode("utf-8" if flags & 0x800 else "cp437")
            modes[name] = (attr >> 16) & 0o777
            i += 46 + nlen + elen + clen
        for name, rel in self.files:
            os.chmod(self.root / rel, 0o755 if modes.get(name, 0) & 0o111 else 0o644)
