"""fdlenv pack libtorch: official-zip and wheel shapes, layout, reproducibility, zip-slip."""

from __future__ import annotations

import hashlib
import json
import os
import stat
import subprocess
import zipfile
from pathlib import Path

import pytest
from conda_lock.lockfile import parse_conda_lock_file
from helpers_conda import write_env

from fdlenv.front import cli
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.pack.libtorch import PACK_META, pack_libtorch


def _zip(path: Path, members: dict[str, bytes | str], symlinks: dict[str, str] | None = None) -> Path:
    with zipfile.ZipFile(path, "w") as z:
        for name, data in members.items():
            info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
            info.external_attr = (0o100755 if name.endswith(".so") else 0o100644) << 16
            z.writestr(info, data)
        for name, target in (symlinks or {}).items():
            info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
            info.external_attr = (stat.S_IFLNK | 0o777) << 16
            z.writestr(info, target)
    return path


def official_zip(tmp: Path, tag: str = "cu128") -> Path:
    return _zip(tmp / f"libtorch-shared-with-deps-2.10.0+{tag}.zip", {
        "libtorch/lib/libtorch.so": b"\x7fELF fake torch " + tag.encode(),
        "libtorch/lib/libc10.so": b"\x7fELF fake c10",
        "libtorch/include/torch/torch.h": "#pragma once\n",
        "libtorch/share/cmake/Torch/TorchConfig.cmake": "set(TORCH_FOUND 1)\n",
        "libtorch/build-version": f"2.10.0+{tag}\n",
    }, symlinks={"libtorch/lib/libtorch.so.2": "libtorch.so"})


def torch_wheel(tmp: Path, version: str = "2.10.0+cpu") -> Path:
    return _zip(tmp / f"torch-{version}-cp311-cp311-manylinux_2_28_x86_64.whl", {
        "torch/__init__.py": "# python side, not packed\n",
        "torch/lib/libtorch.so": b"\x7fELF wheel torch",
        "torch/lib/libtorch_cpu.so": b"\x7fELF wheel torch_cpu",
        "torch/include/ATen/ATen.h": "#pragma once\n",
        "torch/share/cmake/Torch/TorchConfig.cmake": "set(TORCH_FOUND 1)\n",
        f"torch-{version}.dist-info/WHEEL": "Wheel-Version: 1.0\n",
    })


def _unpack(conda: Path, dest: Path) -> Path:
    from rattler.package_streaming import extract

    extract(conda, dest)
    return dest


def _repodata(channel: Path) -> dict:
    return json.loads((channel / "linux-64" / "repodata.json").read_text())["packages.conda"]


def _sha256(path: Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_pack_official_zip_layout_and_metadata(tmp_path):
    src = official_zip(tmp_path)
    channel = tmp_path / "channel"
    packed = pack_libtorch("12.8", str(src), channel)
    assert packed.path.parent == channel / "linux-64" and packed.path.is_file()
    assert (packed.package, packed.version, packed.variant, packed.source_kind) == (
        "libtorch-cu128", "2.10.0", "cu128", "zip")
    record = _repodata(channel)[packed.path.name]
    assert record["name"] == "libtorch-cu128" and record["sha256"] == _sha256(packed.path)
    assert "__cuda >=12.8" in record["depends"] and any(d.startswith("__glibc >=") for d in record["depends"])

    prefix = _unpack(packed.path, tmp_path / "x")
    root = prefix / "libtorch"
    assert (root / "lib" / "libtorch.so").read_bytes() == b"\x7fELF fake torch cu128"
    assert os.readlink(root / "lib" / "libtorch.so.2") == "libtorch.so"
    assert (root / "include" / "torch" / "torch.h").is_file()
    assert (root / "share" / "cmake" / "Torch" / "TorchConfig.cmake").is_file()
    assert (root / "build-version").read_text().strip() == "2.10.0+cu128"
    meta = json.loads((root / PACK_META).read_text())
    assert meta["source_sha256"] == _sha256(src) == packed.source_sha256
    assert (meta["variant"], meta["version"], meta["cuda"], meta["source_kind"]) == ("cu128", "2.10.0", "12.8", "zip")
    assert "12.0" in meta["archs"] and "5.0" not in meta["archs"]
    script = (prefix / "etc" / "conda" / "activate.d" / "libtorch-cu128.sh").read_text()
    assert script.strip() == 'export LIBTORCH="$CONDA_PREFIX/libtorch"'
    out = subprocess.run(["bash", "--noprofile", "--norc", "-c", f'CONDA_PREFIX=/p; . "{prefix}/etc/conda/activate.d/libtorch-cu128.sh"; echo $LIBTORCH'],
                         capture_output=True, text=True, check=True).stdout
    assert out.strip() == "/p/libtorch"


def test_pack_is_reproducible(tmp_path):
    src = official_zip(tmp_path)
    a = pack_libtorch("cu128", str(src), tmp_path / "a")
    b = pack_libtorch("cu128", src.as_uri(), tmp_path / "b")
    assert a.path.name == b.path.name
    assert _sha256(a.path) == _sha256(b.path)


def test_pack_wheel_and_version_override(tmp_path):
    wheel = torch_wheel(tmp_path)
    packed = pack_libtorch("cpu", str(wheel), tmp_path / "ch")
    assert (packed.version, packed.source_kind, packed.package) == ("2.10.0", "wheel", "libtorch-cpu")
    prefix = _unpack(packed.path, tmp_path / "x")
    files = sorted(str(p.relative_to(prefix)) for p in prefix.rglob("*") if p.is_file())
    assert "libtorch/lib/libtorch_cpu.so" in files and "libtorch/include/ATen/ATen.h" in files
    assert not any("__init__" in f or "dist-info" in f for f in files)
    assert (prefix / "libtorch" / "build-version").read_text().strip() == "2.10.0+cpu"
    meta = json.loads((prefix / "libtorch" / PACK_META).read_text())
    assert meta["cuda"] == "none" and meta["archs"] == ["cpu"] and meta["source_sha256"] == _sha256(wheel)
    record = _repodata(tmp_path / "ch")[packed.path.name]
    assert not any(d.startswith("__cuda") for d in record["depends"])

    again = pack_libtorch("cpu", str(wheel), tmp_path / "ch", version="2.10.0.post1")
    assert again.version == "2.10.0.post1"
    assert {r["version"] for r in _repodata(tmp_path / "ch").values()} == {"2.10.0", "2.10.0.post1"}


def test_packed_channel_locks_with_real_hashes(tmp_path):
    home = Home(tmp_path / "home")
    packed = pack_libtorch("cu128", str(official_zip(tmp_path)), home.channel)
    write_env(tmp_path / "envs", "cu128", ["flodl"], ["flodl::libtorch-cu128 2.10.0"])
    out = tmp_path / "conda-lock.yml"
    lock_envs(tmp_path / "envs", out, home=home)
    (entry,) = parse_conda_lock_file(out).package
    assert entry.url == packed.path.as_uri()
    assert entry.hash.sha256 == _sha256(packed.path)
    assert entry.hash.md5 == hashlib.md5(packed.path.read_bytes()).hexdigest()


@pytest.mark.parametrize("members, symlinks", [
    ({"libtorch/lib/libtorch.so": b"x", "libtorch/../evil.sh": b"boom"}, None),
    ({"libtorch/lib/libtorch.so": b"x", "/etc/evil": b"boom"}, None),
    ({"libtorch/lib/libtorch.so": b"x", "outside.txt": b"boom"}, None),
    ({"libtorch/lib/libtorch.so": b"x"}, {"libtorch/lib/libevil.so": "../../../etc/passwd"}),
    ({"libtorch/lib/libtorch.so": b"x"}, {"libtorch/lib/abs.so": "/etc/passwd"}),
])
def test_zip_slip_refused(tmp_path, members, symlinks):
    src = _zip(tmp_path / "evil.zip", {**members, "libtorch/build-version": "2.10.0+cpu\n"}, symlinks)
    channel = tmp_path / "ch"
    with pytest.raises(Fail) as e:
        pack_libtorch("cpu", str(src), channel)
    assert "escapes" in str(e.value) and e.value.exit_code == 2
    assert not list(channel.rglob("*.conda")) and not list(channel.glob(".pack-*"))
    assert not (tmp_path / "evil.sh").exists()


def test_bad_sources_refused(tmp_path):
    with pytest.raises(Fail, match="no such file"):
        pack_libtorch("cpu", str(tmp_path / "missing.zip"), tmp_path / "ch")
    (tmp_path / "junk.zip").write_bytes(b"not a zip")
    with pytest.raises(Fail, match="not a zip"):
        pack_libtorch("cpu", str(tmp_path / "junk.zip"), tmp_path / "ch")
    other = _zip(tmp_path / "other.zip", {"stuff/lib/x.so": b"x"})
    with pytest.raises(Fail, match="neither libtorch/lib/ nor torch/lib/"):
        pack_libtorch("cpu", str(other), tmp_path / "ch")
    with pytest.raises(Fail, match="is a cu128 build"):
        pack_libtorch("cu126", str(official_zip(tmp_path, "cu128")), tmp_path / "ch")
    with pytest.raises(Fail, match="--version"):
        pack_libtorch("cpu", str(torch_wheel(tmp_path)), tmp_path / "ch", version="2.10-0")
    with pytest.raises(Fail, match="unknown variant"):
        pack_libtorch("cu999", str(torch_wheel(tmp_path)), tmp_path / "ch")


def test_cli_pack_default_channel_is_the_home(tmp_path, capsys):
    home = tmp_path / "home"
    rc = cli.main(["pack", "libtorch", "--variant", "rocm71", "--from",
                   str(official_zip(tmp_path, "rocm7.1")), "--home", str(home), "--json"])
    assert rc == 0
    result = json.loads(capsys.readouterr().out)
    assert result["package"] == "libtorch-rocm71"
    assert Path(result["path"]).parent == Home(home).channel / "linux-64"


def test_a_chain_of_links_cannot_carry_a_write_outside_the_tree(tmp_path):
    """`u2 -> u1/..` looks inside to a lexical check; on disk, after `u1 -> ..`, it is not."""
    src = tmp_path / "chain.zip"
    with zipfile.ZipFile(src, "w") as z:
        def add(name, data, mode):
            info = zipfile.ZipInfo(name, date_time=(2025, 1, 1, 0, 0, 0))
            info.external_attr = mode << 16
            z.writestr(info, data)
        add("libtorch/build-version", "2.10.0+cpu\n", 0o100644)
        add("libtorch/lib/libtorch.so", "x", 0o100755)
        add("libtorch/lib/u1", "..", stat.S_IFLNK | 0o777)
        for i in range(2, 6):   # each link climbs one more level: u5 reaches above tmp_path/ch
            add(f"libtorch/lib/u{i}", f"u{i - 1}/..", stat.S_IFLNK | 0o777)
        add("libtorch/lib/u5/escaped.txt", "gotcha", 0o100644)
    channel = tmp_path / "ch"
    with pytest.raises(Fail) as e:
        pack_libtorch("cpu", str(src), channel)
    assert e.value.exit_code == 2 and ("link" in str(e.value) or "escapes" in str(e.value))
    assert not list(tmp_path.parent.rglob("escaped.txt")) and not list(tmp_path.rglob("escaped.txt"))
    assert not list(channel.rglob("*.conda")) and not list(channel.glob(".pack-*"))
