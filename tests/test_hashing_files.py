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


@pytest.mark.parametrize("told", [0, 5, hashing.MAPPED - 1, hashing.MAPPED, 10 * hashing.MAPPED])
@pytest.mark.parametrize("size", [10, hashing.MAPPED + 3])
def test_the_size_a_caller_stated_chooses_the_read_never_what_is_hashed(tmp_path, size, told):
    """verify --full hands each file's size from its RECORD walk; a file that grew or shrank
    since is still hashed whole, as it is now (a stale size that mapped past its end would fault)."""
    data = os.urandom(size)
    path = tmp_path / "f"
    path.write_bytes(data)
    assert hashing.sha256_of_file(path, size=told) == hashlib.sha256(data).hexdigest()


def test_verify_fulls_digest_of_a_300_mb_file_holds_its_memory_to_a_window(tmp_path):
    """A whole-file mapping made the resident set as large as the file (1.4-1.7 GB for a
    cu128 env); a window at a time keeps it under one window over the interpreter's own."""
    import subprocess
    import sys

    path = tmp_path / "big"
    with open(path, "wb") as f:
        f.truncate(300 << 20)          # 300 MB of zeros, read back through the page cache
    code = ("import resource, sys; from fdlenv.base import hashing; "
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; "
            "print(hashing.sha256_of_file(sys.argv[1]), before)")
    res = subprocess.run([sys.executable, "-c", code, str(path)], capture_output=True, text=True, check=True)
    digest, before = res.stdout.split()
    peak_kib = _peak_of([sys.executable, "-c", code, str(path)])
    zeros = hashlib.sha256()
    block = bytes(1 << 20)
    for _ in range(300):
        zeros.update(block)
    assert digest == zeros.hexdigest()
    assert (peak_kib - int(before)) * 1024 <= 4 * hashing.WINDOW, (peak_kib, before)


def _peak_of(argv: list[str]) -> int:
    """The peak resident set of a child, in KiB (wait4's maxrss)."""
    import subprocess

    proc = subprocess.Popen(argv, stdout=subprocess.DEVNULL)
    _, status, usage = os.wait4(proc.pid, 0)
    assert os.waitstatus_to_exitcode(status) == 0
    return usage.ru_maxrss
