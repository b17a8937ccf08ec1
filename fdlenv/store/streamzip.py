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

Bounded before verified (the bytes are hashed beside this, so until the end
they are anyone's): a member never inflates past the size its header states,
all members together never past RATIO times the bytes read (plus SLACK), and
inflating runs OUT_STEP at a time, so a zip bomb neither fills the disk nor
memory. What one reader and another would read two ways is `Malformed`: a
data descriptor whose sizes are not what its member held, a central
directory naming other members than the local headers or other sizes, a name
given twice. Bytes that are not a zip this reader understands raise `Malformed`
(never struct, codec or zlib errors); `complete()` says whether the stream
ended with the zip's own end record, which tells a cut download from a whole
one.
"""

from __future__ import annotations

import errno
import os
import struct
import zlib
from pathlib import Path
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from ..base import confine, memory

if TYPE_CHECKING:
    import threading

try:   # ISA-L's inflate is about twice zlib's speed: inflating is most of a cold realise's CPU
    from isal.igzip_lib import DECOMP_DEFLATE, IgzipDecompressor
    from isal.igzip_lib import error as _igzip_error
    from isal.isal_zlib import error as _isal_error

    def _inflater() -> Any:
        return IgzipDecompressor(flag=DECOMP_DEFLATE)
    BOUNDED = True        # decompress(data, max_length) allocates its output once (see `_inflate`)
    # isal's stub calls `error` an Exception, not its class (the ignore is unused without isal)
    # (and EOFError: ISA-L's answer to input after a stream's end, which `_inflate` never gives it)
    INFLATE_ERRORS: tuple[type[Exception], ...] = (zlib.error, _isal_error, _igzip_error, EOFError)  # type: ignore[assignment, unused-ignore]
except ImportError:   # a platform without isal's wheels: the same with zlib
    def _inflater() -> Any:
        return zlib.decompressobj(-15)
    BOUNDED = False
    INFLATE_ERRORS = (zlib.error,)

LOCAL = b"PK\x03\x04"
CENTRAL = b"PK\x01\x02"
DESCRIPTOR = b"PK\x07\x08"
END = b"PK\x05\x06"
END64 = b"PK\x06\x06"
END_SEARCH = 22 + 0xFFFF + 20   # the end record, its longest comment, and zip64's locator before it
TAIL_LIMIT = 64 << 20     # the central directory (torch's: 1.2 MB for 12,000 members)
OUT_STEP = 1 << 20        # inflated bytes per call: what one member may hold in memory at once
RATIO = 32                # wheels inflate 2-5x; a whole archive past 32x is a bomb
SLACK = 16 << 20          # ... beyond a first 16 MiB, which small text-heavy wheels may need
TRIM_EVERY = 64 << 20    # inflated bytes between two `memory.give_back`s of one stream
WRITE_FLAGS = os.O_WRONLY | os.O_CREAT | os.O_TRUNC | getattr(os, "O_CLOEXEC", 0)
# What broken bytes raise while parsed: reported as Malformed, never as themselves.
PARSE_ERRORS = (struct.error, UnicodeDecodeError, ValueError, IndexError, OverflowError)
NAME_ERRNOS = (errno.ENAMETOOLONG, errno.EISDIR, errno.ENOTDIR, errno.EEXIST, errno.EINVAL, errno.ELOOP)


def _umask() -> int | None:
    """This process's umask, read without setting it (os.umask sets it, which another thread
    creating files at that moment would feel): Linux states it in /proc/self/status; None where
    it does not (every file is then given its mode)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return None


def escapes(name: str) -> bool:
    """A zip member name that would land outside the extraction root (`confine.problem`, with a
    backslash refused too: a Windows separator)."""
    return confine.problem(name, backslash=True) is not None


class Unsupported(Exception):
    """A zip this reader cannot stream; the caller extracts the whole file instead."""


class Escape(Exception):
    """A member whose path leaves the extraction root."""


class Stopped(Exception):
    """The caller stopped the stream (another download failed, or Ctrl-C)."""


class Malformed(Exception):
    """Bytes that are not a well-formed zip (or inflate past their bounds)."""


def file_complete(path: str | Path) -> bool:
    """`complete` for a zip on disk (a downloaded part): does it end with its end record?"""
    with open(path, "rb") as f:
        total = f.seek(0, 2)
        f.seek(max(0, total - END_SEARCH))
        return complete(f.read(), total)


def complete(tail: bytes, total: int) -> bool:
    """Whether a zip of `total` bytes whose last bytes are `tail` ends with its end record (and
    the central directory it names ends there): a cut download does not."""
    at = tail.rfind(END, max(0, len(tail) - (22 + 0xFFFF)))
    if at < 0 or len(tail) - at < 22:
        return False
    fields: tuple[int, int, int] = struct.unpack_from("<IIH", tail, at + 12)
    size, offset, comment = fields
    if at + 22 + comment != len(tail):
        return False
    if 0xFFFFFFFF in (size, offset):          # zip64: its own end record precedes
        return tail.rfind(END64, 0, at) >= 0
    return offset + size + 22 + comment == total


class StreamUnzip:
    """Feed it the bytes of a zip in order; members land under `root` at `place(name)`."""

    def __init__(self, root: Path, place: Callable[[str], str | None], stop: threading.Event | None = None):
        memory.hold()
        self.root, self.place = root, place
        self.under = str(root)      # `root` as a str: joined once per member (no Path objects)
        self.stop = stop            # an Event: once set, feed() raises Stopped at the next member
        self.buf: bytes | bytearray | memoryview = bytearray()   # the bytes being read
        self.pos = 0                # bytes of buf already consumed (no memmove per member)
        self.state = "header"
        self.member: list[Any] = []   # [out fd or None, method, remaining compressed, descriptor, zip64]
        self.inflate: Any = None
        self.tail = bytearray()     # the central directory, kept for the modes
        self.made: set[str] = set()
        self.files: list[tuple[str, str]] = []   # (zip name, path under root)
        self.sizes: dict[str, int] = {}          # zip name -> bytes extracted (for RECORD)
        self.read = self.written = 0             # bytes fed, bytes extracted (the ratio cap)
        self.member_name, self.member_size, self.member_written = "", None, 0
        self.member_read = 0                     # compressed bytes of the member being read
        self.stated: dict[str, tuple[int, int]] = {}   # zip name -> (compressed, size) it holds

    def feed(self, data: bytes | memoryview) -> None:
        self.read += len(data)
        if self.state == "central":
            self.tail += data
            if len(self.tail) > TAIL_LIMIT:
                raise Malformed(f"its central directory runs past {TAIL_LIMIT >> 20} MiB (an endless body?)")
            return
        if self.pos >= len(self.buf):   # all read (the usual case): `data` is read in place
            self.buf, self.pos = data, 0
        else:                           # a header the last chunk cut: the rest of it, then `data`
            self.buf = bytearray(self.buf[self.pos:]) + data
            self.pos = 0
        try:
            while True:   # stopped: checked before each member, so none is begun after the stop
                if self.stop is not None and self.stop.is_set():
                    raise Stopped("stopped")
                if not self._step():
                    break
            # `data` may be a view of the caller's buffer, refilled for the next call: what is
            # left of it (a cut header) is kept as a copy, and nothing else of it is held.
            self.buf = bytearray(self.buf[self.pos:]) if self.pos < len(self.buf) else bytearray()
            self.pos = 0
        except PARSE_ERRORS + INFLATE_ERRORS as e:
            raise Malformed(f"{type(e).__name__}: {e}") from None
        except OSError as e:
            if e.errno in NAME_ERRNOS:     # a member name no file can have, or a file over a dir
                raise Malformed(f"member cannot be written: {e.strerror}") from None
            raise

    def close(self) -> None:
        """Close the member being written, if any (a stream given up halfway: the caller's
        `finally`; a finished member closes its own)."""
        out = self.member[0] if self.member else None
        if out is not None:
            self.member[0] = None
            os.close(out)

    def complete(self) -> bool:
        """The stream reached the central directory and ended with the zip's end record."""
        return self.state == "central" and complete(bytes(self.tail[-END_SEARCH:]), self.read)

    def _avail(self) -> int:
        return len(self.buf) - self.pos

    def _read_bytes(self, n: int) -> bytes:
        with memoryview(self.buf) as view:
            out = view[self.pos:self.pos + n].tobytes()
        self.pos += len(out)
        return out

    def _view(self, n: int) -> memoryview:
        """The next `n` bytes in place, for a `with` (the buffer cannot grow while it is held)."""
        out = memoryview(self.buf)[self.pos:self.pos + n]
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
            raise Malformed(f"unexpected record {sig!r} where a member should start")
        if self._avail() < 30:
            return False
        (_, _, flags, method, _, _, _, csize, usize, nlen, elen) = struct.unpack_from("<4sHHHHHIIIHH", self.buf, self.pos)
        if self._avail() < 30 + nlen + elen:
            return False
        self.pos += 30
        raw = self._read_bytes(nlen)
        extra = self._read_bytes(elen)
        if flags & 0x1:
            raise Unsupported("encrypted member")
        name = raw.decode("utf-8" if flags & 0x800 else "cp437")
        if "\0" in name or not name:
            raise Malformed(f"a member name {name!r} no file can have")
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
                parent = os.path.dirname(rel)
                if parent not in self.made:
                    os.makedirs(os.path.join(self.under, parent), exist_ok=True)
                    self.made.add(parent)
                out = os.open(os.path.join(self.under, rel), WRITE_FLAGS, 0o666)
                self.files.append((name, rel))
        self.inflate = _inflater() if method == 8 else None
        known = not descriptor or csize != 0
        if method == 0 and known and csize != usize and not descriptor:
            raise Malformed(f"stored member {name!r} states {usize} bytes but holds {csize}")
        self.member = [out, method, csize if known else None, descriptor, zip64]
        self.member_size = usize if not descriptor else None    # a bound only where stated first
        self.member_name, self.member_written, self.member_read = name, 0, 0
        if name in self.stated:
            raise Malformed(f"member {name!r} is in the zip twice")
        self.stated[name] = (-1, -1)
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
            with self._view(min(remaining, self._avail())) as chunk:
                self.member[2] = remaining - len(chunk)
                self.member_read += len(chunk)
                if self.inflate:
                    self._inflate(out, chunk)
                else:
                    self._write(out, chunk)
            if self.member[2] == 0:
                self._end_member(out)
            return self._avail() > 0 or self.state != "data"
        # size unknown (a data descriptor follows): deflate knows where it ends
        with self._view(self._avail()) as chunk:
            self.member_read += len(chunk)
            self._inflate(out, chunk)
        if self.inflate.eof:
            self.member_read -= len(self.inflate.unused_data)
            self.buf, self.pos = bytearray(self.inflate.unused_data), 0
            self._end_member(out)
            return True
        return False

    def _inflate(self, out: int | None, chunk: memoryview) -> None:
        """Inflate `chunk` at most OUT_STEP at a time (and never more than one byte past what
        the member's header states), each step written and bounded before the next.
        ISA-L's `IgzipDecompressor` allocates a step's output once, at its bound, and inflates it
        in one call, the GIL let go once: zlib's and isal_zlib's `decompressobj` start at 16 KiB
        and double, an inflate call, a GIL hand-back and a realloc's copy per doubling (on two
        cores four streams re-took the GIL after each; that copy was most of the realise's memmove).
        (Steps of 128-256 KiB, which the page-cache copy of a lone writer prefers, took a cold
        realise's four streams 1-2 s longer, in user and system time alike: bench/wheels.py.)"""
        d = self.inflate
        if not BOUNDED:
            self._write(out, d.decompress(chunk, OUT_STEP))
            while d.unconsumed_tail and not d.eof:
                self._write(out, d.decompress(d.unconsumed_tail, OUT_STEP))
            return
        if d.eof:   # bytes after the deflate stream's end, within the size the header states:
            return  # passed over, as zlib's `unused_data` and zipfile pass them over (ISA-L raises)
        self._write(out, d.decompress(chunk, self._step_bound()))
        while not d.eof and not d.needs_input:
            self._write(out, d.decompress(b"", self._step_bound()))

    def _step_bound(self) -> int:
        """OUT_STEP, or less where the header stated the member's size: one byte past what is
        left of it (the byte that tells it inflates past its size)."""
        if self.member_size is None:
            return OUT_STEP
        return min(OUT_STEP, self.member_size - self.member_written + 1)

    def _write(self, out: int | None, data: bytes | memoryview) -> None:
        if not data:
            return
        self.member_written += len(data)
        self.written += len(data)
        if self.member_size is not None and self.member_written > self.member_size:
            raise Malformed(f"member {self.member_name!r} inflates past the {self.member_size} bytes "
                            "its header states")
        if self.written > RATIO * self.read + SLACK:
            raise Malformed(f"the archive inflates over {RATIO}x its size (a zip bomb?)")
        if out is not None:
            with memoryview(data) as left:
                while left:
                    left = left[os.write(out, left):]
        if self.written // TRIM_EVERY != (self.written - len(data)) // TRIM_EVERY:
            memory.give_back()

    def _end_member(self, out: int | None) -> None:
        if self.inflate is not None and not self.inflate.eof and not BOUNDED:
            self._write(out, self.inflate.flush())     # (zlib's; ISA-L's bounded steps hold nothing back)
        self.close()
        if self.member_size is not None and self.member_written != self.member_size:
            raise Malformed(f"member {self.member_name!r} holds {self.member_written} bytes, its header "
                            f"states {self.member_size}")
        self.sizes[self.member_name] = self.member_written
        self.stated[self.member_name] = (self.member_read, self.member_written)
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
        at = self.pos + size - (16 if zip64 else 8)
        csize, usize = struct.unpack_from("<QQ" if zip64 else "<II", self.buf, at)
        self.pos += size
        if (csize, usize) != self.stated[self.member_name]:
            raise Malformed(f"member {self.member_name!r}: its data descriptor states {usize} bytes "
                            f"({csize} compressed), the member holds {self.member_written} "
                            f"({self.member_read} compressed)")
        self.state = "header"
        return True

    def finish(self) -> None:
        """After the last byte: the stream must have reached the central directory; apply modes."""
        if self.state != "central":
            raise Unsupported(f"the zip ended in state {self.state}")
        try:
            modes, central = self._central()
        except PARSE_ERRORS as e:
            raise Malformed(f"its central directory: {type(e).__name__}: {e}") from None
        self._agree(central)
        umask = _umask()
        made = None if umask is None else 0o666 & ~umask     # the mode os.open gave each file
        for name, rel in self.files:
            mode = 0o755 if modes.get(name, 0) & 0o111 else 0o644
            if mode != made:    # most members were made 0644 already: no call for them
                os.chmod(os.path.join(self.under, rel), mode)

    def _agree(self, central: dict[str, tuple[int, int]]) -> None:
        """The central directory names the members the local headers did, with the sizes they
        held: a name in one and not the other, or another size, is a zip two readers would
        read two ways (the one pip installs is not the one hashed here)."""
        if central.keys() != self.stated.keys():
            only = sorted(central.keys() - self.stated.keys()) or sorted(self.stated.keys() - central.keys())
            where = "central directory" if only[0] in central else "local headers"
            raise Malformed(f"member {only[0]!r} is only in its {where}: the central directory and the "
                            "local headers disagree")
        for name, held in self.stated.items():
            if central[name] != held:
                raise Malformed(f"member {name!r}: the central directory states {central[name][1]} bytes "
                                f"({central[name][0]} compressed), the member holds {held[1]} ({held[0]} "
                                "compressed)")

    def _central(self) -> tuple[dict[str, int], dict[str, tuple[int, int]]]:
        """(name -> mode, name -> (compressed, size)) of each central directory record; a name
        given twice is malformed."""
        modes, sizes = {}, {}
        t, i = bytes(self.tail), 0
        while t[i:i + 4] == CENTRAL and i + 46 <= len(t):
            nlen, elen, clen = struct.unpack("<HHH", t[i + 28:i + 34])
            csize, usize = struct.unpack("<II", t[i + 20:i + 28])
            attr = struct.unpack("<I", t[i + 38:i + 42])[0]
            flags = struct.unpack("<H", t[i + 8:i + 10])[0]
            name = t[i + 46:i + 46 + nlen].decode("utf-8" if flags & 0x800 else "cp437")
            if csize == 0xFFFFFFFF or usize == 0xFFFFFFFF:
                usize, csize = self._zip64(t[i + 46 + nlen:i + 46 + nlen + elen], usize, csize)
            if name in sizes:
                raise Malformed(f"member {name!r} is in the central directory twice")
            modes[name] = (attr >> 16) & 0o777
            sizes[name] = (csize, usize)
            i += 46 + nlen + elen + clen
        return modes, sizes
