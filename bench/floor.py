"""The floor a cold realise from local bytes is measured against (bench/wheels.py, loopback row):
every wheel's sha256, plus ISA-L inflate of every member (zlib where isal is missing), plus
writing the files, split over the cores (a process per core, largest wheel first)."""

from __future__ import annotations

import hashlib
import os
import subprocess
import time
from pathlib import Path


def _floor_one(args: tuple[str, str]) -> int:
    """One wheel as the floor handles it: its sha256, then every member inflated by ISA-L
    (zlib where isal is missing) and written under `out`. Returns the bytes written."""
    import struct
    import zipfile

    try:
        from isal.isal_zlib import decompress
    except ImportError:
        from zlib import decompress
    path, out = args
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(4 << 20):
            h.update(chunk)
    written = 0
    with zipfile.ZipFile(path) as z, open(path, "rb") as f:
        for info in z.infolist():
            if info.is_dir():
                continue
            f.seek(info.header_offset)
            head = f.read(30)
            name_len, extra_len = struct.unpack("<HH", head[26:30])
            f.seek(info.header_offset + 30 + name_len + extra_len)
            raw = f.read(info.compress_size)
            data = decompress(raw, -15) if info.compress_type == zipfile.ZIP_DEFLATED else raw
            dest = os.path.join(out, info.filename)
            os.makedirs(os.path.dirname(dest), exist_ok=True)
            with open(dest, "wb") as g:
                g.write(data)
            written += len(data)
    return written


def floor(files: list[str], out: Path) -> float:
    """The floor of a realise from local bytes: every wheel's sha256 plus ISA-L inflate of every
    member plus writing the files, split over the cores (a process per core, largest first)."""
    from concurrent.futures import ProcessPoolExecutor

    todo = sorted(files, key=lambda f: -os.path.getsize(f))
    subprocess.run(["sync"], check=True)
    t0 = time.perf_counter()
    with ProcessPoolExecutor(os.cpu_count() or 1) as pool:
        list(pool.map(_floor_one, [(f, str(out / str(i))) for i, f in enumerate(todo)]))
    subprocess.run(["sync"], check=True)
    return time.perf_counter() - t0
