"""The floor a cold realise from local bytes is measured against (bench/wheels.py, loopback rows).

Why it is a floor: it does only what any installer that verifies what it unpacks must do, the
cheapest way this machine allows, and nothing else:
- every byte of every wheel is read once, sequentially (`readinto` a reused buffer), and
  sha256'd as it is read, checked against the lock's digest at the end;
- each member is ISA-L inflated (`isal.isal_zlib.decompressobj`; zlib where isal is missing) in
  pieces of `PIECE` bytes while that piece is still in cache, and every inflated piece is
  written to its file at once (no whole-member buffers, no second pass over the bytes);
- one process per core, the wheels handed out largest first, so the biggest (torch, cudnn)
  start at once and the small ones fill the cores around them;
- no download, no package cache, no links, no RECORD, no manifest, no fsync: only `sync` at
  the end (timed, as for the installers), so the written data is on disk on both sides.
The zip directory is read first (zipfile reads the archive's tail: the only bytes read twice,
<1 % of a wheel), to know where each member starts, its size and its mode.
An older version inflated whole members into fresh buffers and took ~1.5x as long: a floor
must be the fastest honest way, or the row flatters whoever is measured against it.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path

from bench.rounds import Took, cpu_of

PIECE = 256 << 10         # bytes read, hashed and inflated at a time (L2-sized)


def _floor_one(args: tuple[str, str, str]) -> int:
    """One wheel as the floor handles it: read once, hashed, inflated and written piece by
    piece under `out`. Returns the bytes written; raises if the digest is not `sha256`."""
    import stat
    import struct
    import zipfile

    try:
        from isal.isal_zlib import decompressobj
    except ImportError:
        from zlib import decompressobj
    path, out, sha256 = args
    with zipfile.ZipFile(path) as z:
        members = sorted((i for i in z.infolist() if not i.is_dir()), key=lambda i: i.header_offset)
    h = hashlib.sha256()
    buf = bytearray(PIECE)
    view = memoryview(buf)
    have = memoryview(b"")            # read and hashed, not yet consumed
    at = 0                            # file offset of `have`'s first byte
    made: set[str] = set()
    written = 0
    with open(path, "rb", buffering=0) as f:

        def fill() -> None:
            nonlocal have
            n = f.readinto(buf)
            if not n:
                raise EOFError(path)
            h.update(view[:n])
            have = view[:n]

        def take(n: int):
            """Up to n bytes at the current offset, as a view into the buffer."""
            nonlocal have, at
            if not have:
                fill()
            piece, have = have[:n], have[n:]
            at += len(piece)
            return piece

        def skip_to(offset: int) -> None:
            while at < offset:
                take(offset - at)

        def exact(n: int) -> bytes:
            out_ = b""
            while len(out_) < n:
                out_ += bytes(take(n - len(out_)))
            return out_

        for info in members:
            skip_to(info.header_offset)
            name_len, extra_len = struct.unpack("<HH", exact(30)[26:30])
            skip_to(at + name_len + extra_len)
            dest = os.path.join(out, info.filename)
            parent = os.path.dirname(dest)
            if parent not in made:
                os.makedirs(parent, exist_ok=True)
                made.add(parent)
            mode = 0o755 if (info.external_attr >> 16) & stat.S_IXUSR else 0o644
            fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, mode)
            try:
                inflate = decompressobj(-15) if info.compress_type == zipfile.ZIP_DEFLATED else None
                left = info.compress_size
                while left:
                    piece = take(left)
                    left -= len(piece)
                    data = inflate.decompress(piece) if inflate is not None else piece
                    written += len(data)
                    while data:
                        data = data[os.write(fd, data):]
                if inflate is not None:
                    tail = inflate.flush()
                    written += len(tail)
                    os.write(fd, tail)
            finally:
                os.close(fd)
        while n := f.readinto(buf):   # the rest (the zip directory): hashed too
            h.update(view[:n])
    if h.hexdigest() != sha256:
        raise ValueError(f"{path}: sha256 {h.hexdigest()}, expected {sha256}")
    return written


def floor(files: list[tuple[str, str]], out: Path) -> Took:
    """Seconds the floor takes over `files` ((path, sha256) each), until its output under
    `out` is on disk: a process per core, largest wheel first; and the CPU it used (its worker
    processes', reaped when the pool shuts down, and this process's meanwhile; the `sync`s are
    not in it, as they are not in an installer's)."""
    from concurrent.futures import ProcessPoolExecutor

    todo = sorted(files, key=lambda f: -os.path.getsize(f[0]))
    subprocess.run(["sync"], check=True)
    t0 = time.perf_counter()

    def pool_run() -> float:
        with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
            list(pool.map(_floor_one, [(p, str(out / str(i)), sha) for i, (p, sha) in enumerate(todo)]))
        return 0.0
    cpu = cpu_of(pool_run).cpu
    subprocess.run(["sync"], check=True)
    return Took(time.perf_counter() - t0, cpu)
