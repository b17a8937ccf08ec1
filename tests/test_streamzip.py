"""store.streamzip: a zip read front to back, in chunks of any size, gives what zipfile gives.

Every case runs with both inflaters: ISA-L's bounded `IgzipDecompressor` (where isal installs)
and zlib's `decompressobj` (the fallback without isal's wheels).

The zips are written by Python's zipfile in the shapes wheels come in (sizes in
the local header), as a pipe forces (sizes in a data descriptor after the
data) and with zip64 sizes; the oracle is zipfile's own reading of them.
"""

from __future__ import annotations

import io
import random
import struct
import zipfile
import zlib

import pytest
from helpers_wheels import Pipe

from fdlenv.store import streamzip
from fdlenv.store.streamzip import Escape, Malformed, StreamUnzip, Unsupported


@pytest.fixture(autouse=True, params=["isal", "zlib"])
def inflater(request, monkeypatch):
    """Each case with ISA-L's bounded inflater and with zlib's, the fallback."""
    if request.param == "zlib":
        monkeypatch.setattr(streamzip, "_inflater", lambda: zlib.decompressobj(-15))
        monkeypatch.setattr(streamzip, "BOUNDED", False)
    elif not streamzip.BOUNDED:
        pytest.skip("isal is not installed here")
    return request.param


def members(seed: int) -> dict[str, bytes]:
    rng = random.Random(seed)
    out = {f"pkg/d{i % 5}/f{i}.bin": (rng.randbytes(rng.randint(0, 4000)) if i % 3
                                     else b"a" * rng.randint(0, 200_000)) for i in range(120)}
    out["pkg/lib/libbig.so"] = rng.randbytes(1_500_000)
    out["pkg/empty"] = b""
    return out


def write_zip(files: dict[str, bytes], sink, *, zip64: bool = False, stored_big: bool = True) -> bytes:
    with zipfile.ZipFile(sink, "w") as z:
        for name, data in files.items():
            info = zipfile.ZipInfo(name, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_STORED if (stored_big and name.endswith(".so")) else zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if name.endswith(".so") else 0o644) << 16
            with z.open(info, "w", force_zip64=zip64) as f:
                f.write(data)
    return bytes(sink.getvalue() if isinstance(sink, io.BytesIO) else sink.data)


def stream(data: bytes, root, seed: int) -> StreamUnzip:
    rng = random.Random(seed)
    unzip = StreamUnzip(root, lambda name: name)
    i = 0
    while i < len(data):
        n = rng.choice((1, 7, 30, 4096, 65536, 1 << 20))
        unzip.feed(data[i:i + n])
        i += n
    unzip.finish()
    return unzip


@pytest.mark.parametrize("shape", ["seekable", "pipe", "zip64"])
def test_every_member_lands_with_zipfiles_bytes_and_modes(tmp_path, shape):
    files = members(1)
    data = (write_zip(files, io.BytesIO()) if shape == "seekable"
            else write_zip(files, Pipe(), stored_big=False) if shape == "pipe"
            else write_zip(files, io.BytesIO(), zip64=True))
    with zipfile.ZipFile(io.BytesIO(data)) as z:
        assert {n: z.read(n) for n in z.namelist()} == files     # the oracle agrees with the input
    stream(data, tmp_path, seed=2)
    for name, content in files.items():
        assert (tmp_path / name).read_bytes() == content
    assert (tmp_path / "pkg/lib/libbig.so").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "pkg/d1/f1.bin").stat().st_mode & 0o777 == 0o644


def test_a_stored_member_sized_only_after_its_data_is_unsupported(tmp_path):
    data = write_zip({"pkg/lib/libbig.so": b"x" * 1000}, Pipe(), stored_big=True)
    with pytest.raises(Unsupported):
        stream(data, tmp_path, seed=3)


def test_a_member_escaping_the_root_is_refused_before_it_is_written(tmp_path):
    data = write_zip({"../../escaped.txt": b"gotcha", "ok.txt": b"ok"}, io.BytesIO())
    with pytest.raises(Escape):
        stream(data, tmp_path / "root", seed=4)
    assert not list(tmp_path.rglob("escaped.txt"))


def test_a_truncated_zip_never_finishes(tmp_path):
    data = write_zip(members(5), io.BytesIO())
    unzip = StreamUnzip(tmp_path, lambda name: name)
    unzip.feed(data[: len(data) // 2])
    with pytest.raises(Unsupported):
        unzip.finish()


def test_a_stream_gives_freed_memory_back_every_so_many_inflated_bytes(tmp_path, monkeypatch):
    from fdlenv.store import streamzip

    calls = []
    monkeypatch.setattr(streamzip, "TRIM_EVERY", 1 << 18)
    monkeypatch.setattr(streamzip.memory, "give_back", lambda: calls.append(1))
    files = members(3)
    unzip = stream(write_zip(files, io.BytesIO()), tmp_path / "out", 3)
    assert unzip.written == sum(len(b) for b in files.values())
    # once per boundary crossed (a write of one inflated step may cross several at once)
    assert unzip.written // ((1 << 18) + streamzip.OUT_STEP) <= len(calls) <= unzip.written // (1 << 18)
    assert len(calls) >= 3


@pytest.mark.parametrize("shape", ["seekable", "pipe"])
def test_chunks_read_in_place_from_a_buffer_the_caller_refills_still_give_zipfiles_bytes(tmp_path, shape):
    # A download hands out views of one buffer it refills (netread.chunks): what the stream
    # keeps of a chunk past `feed` (a header the chunk cut) must be its own copy.
    files = members(6)
    data = write_zip(files, io.BytesIO()) if shape == "seekable" else write_zip(files, Pipe(), stored_big=False)
    rng = random.Random(7)
    buf = bytearray(1 << 20)
    unzip = StreamUnzip(tmp_path, lambda name: name)
    i = 0
    while i < len(data):
        n = min(rng.choice((1, 7, 29, 30, 31, 333, 4096, 65536)), len(data) - i)
        buf[:n] = data[i:i + n]
        unzip.feed(memoryview(buf)[:n])
        buf[:n] = b"\xa5" * n          # refilled: whatever the stream still pointed at is now garbage
        i += n
    unzip.finish()
    for name, content in files.items():
        assert (tmp_path / name).read_bytes() == content


@pytest.mark.parametrize("umask", [0o022, 0o077, 0o002])
def test_members_get_0644_or_0755_whatever_the_umask_the_files_were_made_under(tmp_path, umask):
    import os

    files = {"pkg/run.so": b"x" * 100, "pkg/data.txt": b"y" * 100}
    data = write_zip(files, io.BytesIO())
    old = os.umask(umask)
    try:
        stream(data, tmp_path, seed=8)
    finally:
        os.umask(old)
    assert (tmp_path / "pkg/run.so").stat().st_mode & 0o777 == 0o755
    assert (tmp_path / "pkg/data.txt").stat().st_mode & 0o777 == 0o644


def test_a_stream_given_up_halfway_leaves_no_file_open_once_closed(tmp_path):
    import os

    data = write_zip({"pkg/lib/libbig.so": random.Random(9).randbytes(3_000_000)}, io.BytesIO())
    before = len(os.listdir("/proc/self/fd"))
    unzip = StreamUnzip(tmp_path, lambda name: name)
    unzip.feed(data[:100_000])                      # inside the member: its file is open
    assert len(os.listdir("/proc/self/fd")) == before + 1
    unzip.close()
    assert len(os.listdir("/proc/self/fd")) == before


@pytest.mark.parametrize("under", [1, 1000])
def test_a_member_inflating_past_the_size_its_header_states_is_malformed(tmp_path, under):
    """The bound is checked as it inflates, a step at a time: a header that understates the
    size stops the member at one byte past it, never after inflating the rest."""
    body = b"x" * 3_000_000
    data = bytearray(write_zip({"pkg/big.txt": body}, io.BytesIO()))
    assert data[:4] == b"PK\x03\x04"
    struct.pack_into("<I", data, 22, len(body) - under)    # the local header's uncompressed size
    with pytest.raises(Malformed, match="inflates past"):
        stream(bytes(data), tmp_path, seed=3)
    assert (tmp_path / "pkg/big.txt").stat().st_size <= len(body) - under


def raw_zip(name: str, compressed: bytes, size: int, crc: int) -> bytes:
    """One deflated member, its sizes in the local header, written field by field (zipfile
    cannot write a member whose compressed bytes run past the end of its deflate stream)."""
    n = name.encode()
    local = struct.pack("<4sHHHHHIIIHH", b"PK\x03\x04", 20, 0, 8, 0, 0x21, crc, len(compressed), size, len(n), 0)
    central = struct.pack("<4sHHHHHHIIIHHHHHII", b"PK\x01\x02", 20, 20, 0, 8, 0, 0x21, crc, len(compressed), size,
                          len(n), 0, 0, 0, 0, 0o644 << 16, 0)
    body = local + n + compressed
    end = struct.pack("<4sHHHHIIH", b"PK\x05\x06", 0, 0, 1, 1, len(central) + len(n), len(body), 0)
    return body + central + n + end


def test_bytes_after_a_members_deflate_stream_within_its_stated_size_are_passed_over(tmp_path):
    """As zipfile reads it (and zlib's unused_data): the member is its deflate stream's bytes;
    ISA-L's inflater raises on input after the end, which the stream must not let out."""
    data = b"torch " * 50_000
    c = zlib.compressobj(6, zlib.DEFLATED, -15)
    compressed = c.compress(data) + c.flush() + b"\x00junk after the end" * 1000
    raw = raw_zip("pkg/a.txt", compressed, len(data), zlib.crc32(data))
    with zipfile.ZipFile(io.BytesIO(raw)) as z:
        assert z.read("pkg/a.txt") == data        # the oracle
    unzip = StreamUnzip(tmp_path, lambda name: name)
    for i in range(0, len(raw), 4096):    # the end of the stream and the bytes after it in two feeds
        unzip.feed(raw[i:i + 4096])
    unzip.finish()
    assert (tmp_path / "pkg/a.txt").read_bytes() == data
