"""At realise, a wheel's own METADATA must match what its lock says (issue 35).

The lock is made by `fdlenv lock` (`lock_envs`) from a real loopback index
(tests/helpers_simple_index.py) whose PEP 658 metadata differs from the
wheel's own METADATA, as a broken or hostile index's may: the sha256 the lock
records is the wheel's, so only the wheel's METADATA tells. Realising goes
through the CLI in a child process, as a user runs it.
"""

from __future__ import annotations

import json
from pathlib import Path

from helpers_conda import write_env
from helpers_simple_index import Release, serve
from helpers_cli import fdlenv

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs


def locked(tmp_path, projects, *requirements):
    """(home, lock, index) with the index still serving: the lock made from it by fdlenv."""
    index = serve(tmp_path / "index", projects)
    envs = tmp_path / "envs"
    path = write_env(envs, "cpu", [], [{"pip": list(requirements)}])
    path.write_text(path.read_text() + "pip-index: pypi\n")
    lock = tmp_path / "conda-lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, lock, mirrors={"pypi": index.simple}, home=home)
    return home, lock, index


def realise(home, lock, index):
    return fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--home", str(home.root),
                  "--mirror", f"pypi={index.simple}", "--json")


def nothing_realised(home: Home, dist: str) -> bool:
    """No env, and no package-cache entry (published or half-written) holds `dist`'s files."""
    envs = list(home.envs.iterdir()) if home.envs.is_dir() else []
    return not envs and not list(home.pkgs.glob(f"*/site/{dist}.dist-info"))


def test_a_requirement_only_in_the_wheels_own_metadata_is_exit_2_naming_the_index_and_the_requirement(tmp_path):
    # The index's PEP 658 file for a 1.0 omits `n>=2`, which the wheel itself requires: the lock
    # holds n 1.0, which the wheel does not accept.
    own = b"Metadata-Version: 2.1\nName: a\nVersion: 1.0\nRequires-Dist: n>=2\n"
    home, lock, index = locked(tmp_path, {"a": [Release("1.0", own=own)], "n": [Release("1.0")]}, "a", "n")
    with index:
        assert "n>=2" not in lock.read_text()
        res = realise(home, lock, index)
    assert res.returncode == 2, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert "a-1.0-py3-none-any.whl" in line and "the index pypi" in line and index.simple in line
    assert "requires n>=2, the lock holds n 1.0" in line
    assert "Traceback" not in res.stderr
    assert nothing_realised(home, "a-1.0")


def test_a_wheel_whose_metadata_states_another_version_than_the_lock_is_exit_2(tmp_path):
    # The index's PEP 658 file says 1.0, as the file name does; the wheel itself says 1.1.
    own = b"Metadata-Version: 2.1\nName: c\nVersion: 1.1\n"
    home, lock, index = locked(tmp_path, {"c": [Release("1.0", own=own)]}, "c")
    with index:
        res = realise(home, lock, index)
    assert res.returncode == 2, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert "c-1.0-py3-none-any.whl" in line and "version 1.1, the lock 1.0" in line and index.simple in line
    assert nothing_realised(home, "c-1.0")


def test_a_wheel_whose_metadata_matches_the_lock_realises_as_before(tmp_path):
    home, lock, index = locked(tmp_path, {"a": [Release("1.0", ("n>=1",))], "n": [Release("1.0")]}, "a", "n")
    with index:
        res = realise(home, lock, index)
    assert res.returncode == 0, res.stderr
    (site,) = Path(json.loads(res.stdout)["path"]).glob("lib/python3.*/site-packages")
    assert (site / "a-1.0.dist-info/METADATA").is_file() and (site / "n-1.0.dist-info/METADATA").is_file()


def test_the_index_a_refusal_names_is_shown_without_its_credentials():
    from fdlenv.lock.file import Record
    from fdlenv.store.wheelmeta import Against

    r = Record("pip", "a", "1.0", "", "pip+index://pypi/a/a-1.0-py3-none-any.whl", "0" * 64, None, "linux-64")
    shown = Against([r], {"pypi": "https://user:s3cret@mirror.example/simple"}).source(r)
    assert shown == "the index pypi (https://mirror.example/simple)"


def test_a_native_wheel_the_metadata_requires_must_be_an_edge_the_lock_records_and_python_packages_pass():
    from fdlenv.index.provider import Meta
    from fdlenv.lock.file import Record
    from fdlenv.store.wheelmeta import Against

    def entry(name, version, tag, deps=()):
        url = f"pip+index://pypi/{name}/{name.replace('-', '_')}-{version}-{tag}.whl"
        return Record("pip", name, version, "", url, "0" * 64, None, "linux-64", deps)

    torch = entry("torch", "2.10.0", "cp312-cp312-manylinux_2_28_x86_64", (("nvidia-a-cu12", "==1.0"),))
    held = [torch, entry("nvidia-a-cu12", "1.0", "py3-none-manylinux_2_27_x86_64"),
            entry("nvidia-b-cu12", "2.0", "py3-none-manylinux_2_27_x86_64"), entry("helper", "1.0", "py3-none-any")]
    check = Against(held, {})
    meta = Meta(b"Metadata-Version: 2.1\nName: torch\nVersion: 2.10.0\n"
                b"Requires-Dist: nvidia-a-cu12==1.0; platform_system == 'Linux'\n"
                b"Requires-Dist: nvidia-b-cu12>=2\nRequires-Dist: helper\nRequires-Dist: sympy>=1.13\n"
                b"Requires-Dist: nvidia-b-cu12<2; platform_machine == 'aarch64'\n", "torch")
    assert check.differences(torch, meta) == [
        "it requires nvidia-b-cu12>=2, which the lock does not record as its dependency"]


# ------------------------------------------------------------------ RECORD both ways, one zip

def _streamed(data: bytes) -> bytes:
    """The same members written through a stream zipfile cannot seek back in: each deflated
    member's sizes come after its data, in a data descriptor (as a streaming builder writes)."""
    import io
    import zipfile

    class Unseekable(io.RawIOBase):
        def __init__(self) -> None:
            self.out = bytearray()

        def writable(self) -> bool:
            return True

        def write(self, b) -> int:
            self.out += b
            return len(b)

    sink = Unseekable()
    with zipfile.ZipFile(io.BytesIO(data)) as src, zipfile.ZipFile(sink, "w", zipfile.ZIP_DEFLATED) as z:
        for info in src.infolist():
            z.writestr(zipfile.ZipInfo(info.filename, info.date_time), src.read(info), zipfile.ZIP_DEFLATED)
    return bytes(sink.out)


def _descriptor_lies(data: bytes) -> bytes:
    """The first data descriptor states one byte more than its member holds."""
    import struct

    data = bytearray(_streamed(data))
    at = data.index(b"PK\x07\x08") + 12          # signature, crc, compressed size: then the size
    struct.pack_into("<I", data, at, struct.unpack_from("<I", data, at)[0] + 1)
    return bytes(data)


def _central_lies(data: bytes) -> bytes:
    """The central directory states one byte more for the first member than its local header."""
    import struct

    data = bytearray(data)
    at = data.index(b"PK\x01\x02") + 24          # the central record's uncompressed size
    struct.pack_into("<I", data, at, struct.unpack_from("<I", data, at)[0] + 1)
    return bytes(data)


def test_a_wheel_holding_a_member_its_record_does_not_list_is_exit_2_and_nothing_is_published(tmp_path):
    """PEP 376/627: RECORD lists every file. A member it leaves out would be installed
    unchecked (and pass `env verify --full`): refused at extraction, nothing published."""
    home, lock, index = locked(tmp_path, {"c": [Release("1.0", unlisted={"c/evil.py": b"import os\n"})]}, "c")
    with index:
        res = realise(home, lock, index)
    assert res.returncode == 2, res.stderr
    (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    print(line)
    assert "c-1.0-py3-none-any.whl holds 'c/evil.py', which its RECORD does not list" in line
    assert "Traceback" not in res.stderr and nothing_realised(home, "c-1.0")


def test_a_streamed_wheel_realises_and_one_whose_descriptor_or_central_directory_lies_is_exit_2(tmp_path):
    """Sizes after the data (a data descriptor) are read, not skipped: one that states another
    size than the member holds, or a central directory that states another size than the local
    header, is a zip two readers read two ways: exit 2, nothing published."""
    home, lock, index = locked(tmp_path / "ok", {"c": [Release("1.0", rewrite=_streamed)]}, "c")
    with index:
        assert realise(home, lock, index).returncode == 0
    for name, rewrite, said in (("descriptor", _descriptor_lies, "its data descriptor states"),
                                ("central", _central_lies, "the central directory states")):
        home, lock, index = locked(tmp_path / name, {"c": [Release("1.0", rewrite=rewrite)]}, "c")
        with index:
            res = realise(home, lock, index)
        assert res.returncode == 2, res.stderr
        (line,) = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        print(line)
        assert "c-1.0-py3-none-any.whl" in line and said in line and "refusing it" in line
        assert "Traceback" not in res.stderr and nothing_realised(home, "c-1.0")
