"""A wheel whose member states a huge size over tiny data: the realise refuses it with one error
line and its memory stays bounded (store/streamzip.py, store/wheelfile.py).

The stated size is only a bound, never an allocation: a member that inflates short of what
its header says is bytes that are not what they claim (exit 2), found as the stream ends.
The wheels are real (helpers_wheels), rewritten with the lie patched into their headers, and
locked by `fdlenv lock` from the index that serves them; the realise is a child process whose
peak RSS (its own and its children's, from wait4) is measured.
"""

from __future__ import annotations

import struct
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

MEMBER = "torch/lib/libtorch.so"
GIB = 1 << 30
RSS_BOUND_MIB = 256        # a realise of these wheels peaks near 50 MiB; a stated GiB would show


def _lying(wheel: Path, how: str) -> None:
    """Rewrite `wheel` with MEMBER stating a size it does not hold (`how`: the lie)."""
    with zipfile.ZipFile(wheel) as z:
        items = [(i, z.read(i)) for i in z.infolist()]
    with zipfile.ZipFile(wheel, "w") as z:
        for info, data in items:
            method = zipfile.ZIP_STORED if how == "stored" and info.filename == MEMBER else zipfile.ZIP_DEFLATED
            fresh = zipfile.ZipInfo(info.filename, info.date_time)
            fresh.compress_type, fresh.external_attr = method, info.external_attr
            with z.open(fresh, "w", force_zip64=how == "zip64" and info.filename == MEMBER) as f:
                f.write(data)
    raw = bytearray(wheel.read_bytes())
    name = MEMBER.encode()
    local = next(i for i in _all(raw, b"PK\x03\x04") if raw[i + 30:i + 30 + len(name)] == name)
    central = next(i for i in _all(raw, b"PK\x01\x02") if raw[i + 46:i + 46 + len(name)] == name)
    if how == "zip64":                       # the local zip64 extra: usize, csize (8 bytes each)
        nlen = struct.unpack_from("<H", raw, local + 26)[0]
        extra = local + 30 + nlen
        assert struct.unpack_from("<H", raw, extra)[0] == 1
        struct.pack_into("<Q", raw, extra + 4, 4 * GIB)
    else:
        struct.pack_into("<I", raw, local + 22, GIB)       # usize in the local header
        struct.pack_into("<I", raw, central + 24, GIB)     # ... and in the central directory
        if how == "stored":                                # a stored member's data is its csize
            struct.pack_into("<I", raw, local + 18, GIB)
            struct.pack_into("<I", raw, central + 20, GIB)
    wheel.write_bytes(bytes(raw))


def _all(raw: bytearray, sig: bytes):
    i = raw.find(sig)
    while i >= 0:
        yield i
        i = raw.find(sig, i + 1)


def _realise_measured(home: Path, lock: Path, url: str) -> tuple[int, str, int]:
    """(exit code, stderr, peak RSS in MiB of the realise and its children)."""
    err = home.parent / "stderr.txt"
    with open(err, "w") as f:
        # Measured by a small launcher, not by this worker: a child made by vfork (as Popen
        # does) starts its peak RSS at its parent's, so the worker's own would be counted.
        proc = subprocess.run([sys.executable, "-c", LAUNCHER, sys.executable, "-m", "fdlenv", "env", "realize",
                               "--libtorch", "cu128", "--lock", str(lock), "--home", str(home), "--mirror",
                               f"pypi={url}"], stdout=subprocess.PIPE, stderr=f, text=True)
    return proc.returncode, err.read_text(), int(proc.stdout.split()[-1]) >> 10


LAUNCHER = ("import resource, subprocess, sys; rc = subprocess.run(sys.argv[1:], stdout=subprocess.DEVNULL).returncode; "
            "print(resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss); sys.exit(rc)")


@pytest.mark.parametrize("how", ["deflated", "zip64", "stored"])
def test_a_member_stating_gigabytes_over_tiny_data_is_refused_with_memory_bounded(tmp_path, how):
    wheels = make_wheels(tmp_path / "built")
    _lying(next(w for w in wheels if w.name.startswith("torch-")), how)
    url = make_index(tmp_path / "simple", wheels)
    write_wheel_env(tmp_path / "envs", "cu128")
    home = Home(tmp_path / "home")
    lock_envs(tmp_path / "envs", tmp_path / "lock.yml", mirrors={"pypi": url}, home=home)
    code, err, peak = _realise_measured(home.root, tmp_path / "lock.yml", url)
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert code == 2 and len(errors) == 1 and "Traceback" not in err, err
    assert "torch" in errors[0], errors[0]
    assert peak < RSS_BOUND_MIB, (peak, err)
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))       # nothing published
