"""`hashing.of_file` reads a file chunk by chunk: the digest is hashlib's over the
whole file, whatever the size against the chunk, with progress after each chunk; `sha256_of_file`
(verify --full's) is hashlib's too, below, at and over the size from which it maps the file."""

from __future__ import annotations

import hashlib
import os

import pytest

from fdlenv.base import hashing


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


@pytest.mark.parametrize("size", [0, 1, hashing.MAPPED - 1, hashing.MAPPED, hashing.MAPPED + 1,
                                  3 * hashing.MAPPED + 7])
def test_verify_fulls_whole_file_digest_is_hashlibs_below_at_and_over_the_mapping_size(tmp_path, size):
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert hashing.sha256_of_file(path) == hashlib.sha256(data).hexdigest()
