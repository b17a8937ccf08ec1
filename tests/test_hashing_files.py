"""`hashing.of_file` reads a file chunk by chunk: the digest is hashlib's over the
whole file, whatever the size against the chunk, with progress after each chunk."""

from __future__ import annotations

import hashlib
import os

import pytest

from fdlenv import hashing


@pytest.mark.parametrize("size", [0, 1, 63, 64, 65, 200, 1000])
def test_a_file_of_any_size_against_the_chunk_hashes_to_hashlibs_digest(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    seen: list[int] = []
    d = hashing.of_file(path, md5=True, chunk=64, tick=seen.append)
    assert d.sha256 == hashlib.sha256(data).hexdigest()
    assert d.md5 == hashlib.md5(data).hexdigest()
    assert d.size == size
    assert seen == list(range(64, size, 64)) + ([size] if size else [])
