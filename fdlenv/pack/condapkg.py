"""Write `.conda` packages, byte-reproducibly.

No conda-build or rattler-build exists on the machines fdlenv targets and
py-rattler can read packages but not make them, so fdlenv writes the format
itself: a stored zip holding `metadata.json`, `pkg-<stem>.tar.zst` (the
payload) and `info-<stem>.tar.zst` (index.json, paths.json, files,
has_prefix), in that order.

Reproducibility is a contract (`fdlenv pack` twice gives the same sha256):
members are sorted, every timestamp is fixed, owners are 0/root-less, and
index.json carries no build timestamp. Payload files are streamed from disk
so a multi-GB libtorch never sits in memory.
"""

from __future__ import annotations

import io
import json
import os
import tarfile
import tempfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path

from ..base import hashing

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable, Iterator
    from typing import IO

    # A tar member: its header and, for a regular file, where its bytes are read from.
    Member = tuple[tarfile.TarInfo, IO[bytes] | None]

FIXED_MTIME = 0            # tar mtime of every member
ZIP_DATE = (1980, 1, 1, 0, 0, 0)
ZSTD_LEVEL = 3             # fast; libtorch is mostly already-dense machine code


@dataclass(frozen=True)
class PkgFile:
    """One payload entry: bytes in memory, a file on disk, or a symlink."""

    path: str                            # relative to the prefix
    data: bytes | None = None
    source: Path | None = None
    symlink: str | None = None
    executable: bool = False
    prefix_placeholder: str | None = None  # text files whose placeholder is rewritten at install


@dataclass
class PkgMeta:
    name: str
    version: str
    build: str = "0"
    build_number: int = 0
    subdir: str = "linux-64"
    depends: list[str] = field(default_factory=list)
    constrains: list[str] = field(default_factory=list)
    noarch: str | None = None            # None or "generic" ("python" needs a python in the env)
    license: str | None = None
    extra_info: dict[str, bytes] = field(default_factory=dict)  # more info/ members

    @property
    def stem(self) -> str:
        return f"{self.name}-{self.version}-{self.build}"


def _tarinfo(name: str, size: int = 0, mode: int = 0o644) -> tarfile.TarInfo:
    ti = tarfile.TarInfo(name)
    ti.size = size
    ti.mode = mode
    ti.mtime = FIXED_MTIME
    ti.uid = ti.gid = 0
    ti.uname = ti.gname = ""
    return ti


def _write_tar_zst(out: IO[bytes], members: Iterable[Member]) -> None:
    """members: iterable of (TarInfo, fileobj|None), already in final order."""
    import zstandard

    cctx = zstandard.ZstdCompressor(level=ZSTD_LEVEL, threads=-1)
    with cctx.stream_writer(out, closefd=False) as zw:
        with tarfile.open(fileobj=zw, mode="w|", format=tarfile.PAX_FORMAT) as tar:
            for ti, fobj in members:
                tar.addfile(ti, fobj)


def _payload_members(files: list[PkgFile]) -> Iterator[Member]:
    for f in files:
        if f.symlink is not None:
            ti = _tarinfo(f.path)
            ti.type = tarfile.SYMTYPE
            ti.linkname = f.symlink
            ti.mode = 0o777
            yield ti, None
            continue
        mode = 0o755 if f.executable else 0o644
        if f.source is not None:
            size = f.source.stat().st_size
            with open(f.source, "rb") as fobj:
                yield _tarinfo(f.path, size, mode), fobj
        else:
            yield _tarinfo(f.path, len(f.data or b""), mode), io.BytesIO(f.data or b"")


def _paths_entry(f: PkgFile) -> dict[str, str | int]:
    if f.symlink is not None:
        return {"_path": f.path, "path_type": "softlink", "size_in_bytes": 0}
    if f.source is not None:
        d = hashing.of_file(f.source)
        digest, size = d.sha256, d.size
    else:
        data = f.data or b""
        digest, size = hashing.of_bytes(data), len(data)
    entry: dict[str, str | int] = {"_path": f.path, "path_type": "hardlink", "sha256": digest, "size_in_bytes": size}
    if f.prefix_placeholder:
        entry["file_mode"] = "text"
        entry["prefix_placeholder"] = f.prefix_placeholder
    return entry


def _info_members(meta: PkgMeta, files: list[PkgFile]) -> dict[str, bytes]:
    index = {
        "name": meta.name,
        "version": meta.version,
        "build": meta.build,
        "build_number": meta.build_number,
        "depends": sorted(meta.depends),
        "constrains": sorted(meta.constrains),
        "subdir": meta.subdir,
    }
    if meta.noarch:
        index["noarch"] = meta.noarch
    else:
        osname, _, plat = meta.subdir.partition("-")
        index["platform"] = osname
        index["arch"] = {"64": "x86_64"}.get(plat, plat)
    if meta.license:
        index["license"] = meta.license
    paths = {"paths": [_paths_entry(f) for f in files], "paths_version": 1}
    info = {
        "info/index.json": json.dumps(index, indent=2, sort_keys=True).encode(),
        "info/paths.json": json.dumps(paths, indent=2, sort_keys=True).encode(),
        "info/files": "".join(f.path + "\n" for f in files).encode(),
        "info/about.json": json.dumps({"summary": meta.name}, sort_keys=True).encode(),
    }
    placeholders = [f for f in files if f.prefix_placeholder]
    if placeholders:
        info["info/has_prefix"] = "".join(
            f"{f.prefix_placeholder} text {f.path}\n" for f in placeholders).encode()
    info.update(meta.extra_info)
    return info


def write_conda(out_dir: Path, meta: PkgMeta, files: list[PkgFile]) -> Path:
    """Write `<out_dir>/<name>-<version>-<build>.conda`; returns its path.

    Written to a temp name and renamed, so a channel never shows half a file.
    """
    files = sorted(files, key=lambda f: f.path)
    out_dir.mkdir(parents=True, exist_ok=True)
    target = out_dir / f"{meta.stem}.conda"
    info = _info_members(meta, files)
    with tempfile.TemporaryDirectory(dir=out_dir, prefix=".pack-") as tmp:
        pkg_tar = Path(tmp) / "pkg.tar.zst"
        with open(pkg_tar, "wb") as out:
            _write_tar_zst(out, _payload_members(files))
        info_buf = io.BytesIO()
        _write_tar_zst(info_buf, ((_tarinfo(n, len(b)), io.BytesIO(b)) for n, b in sorted(info.items())))
        partial = Path(tmp) / "out.conda"
        with zipfile.ZipFile(partial, "w", compression=zipfile.ZIP_STORED) as z:
            def add(name: str, writer: Callable[[IO[bytes]], object]) -> None:
                zi = zipfile.ZipInfo(name, date_time=ZIP_DATE)
                zi.external_attr = 0o644 << 16
                with z.open(zi, "w", force_zip64=True) as dst:
                    writer(dst)
            add("metadata.json", lambda d: d.write(b'{"conda_pkg_format_version": 2}'))
            add(f"pkg-{meta.stem}.tar.zst", lambda d: _copy(pkg_tar, d))
            add(f"info-{meta.stem}.tar.zst", lambda d: d.write(info_buf.getvalue()))
        os.replace(partial, target)
    return target


def _copy(src: Path, dst: IO[bytes]) -> None:
    with open(src, "rb") as f:
        while chunk := f.read(1 << 20):
            dst.write(chunk)


def files_from_tree(root: Path, under: str = "") -> list[PkgFile]:
    """Every file and symlink below `root`, placed at `under/<relpath>` in the prefix."""
    out = []
    for dirpath, dirnames, filenames in os.walk(root):
        dirnames.sort()
        base = Path(dirpath)
        for name in sorted(filenames) + sorted(d for d in dirnames if (base / d).is_symlink()):
            p = base / name
            rel = str(Path(under) / p.relative_to(root)) if under else str(p.relative_to(root))
            if p.is_symlink():
                out.append(PkgFile(rel, symlink=os.readlink(p)))
            else:
                out.append(PkgFile(rel, source=p, executable=os.access(p, os.X_OK)))
    return out


async def index_channel(channel: Path) -> None:
    """(Re)write repodata.json for every subdir of a local channel."""
    import rattler.index

    (channel / "noarch").mkdir(parents=True, exist_ok=True)
    await rattler.index.index_fs(channel, write_zst=False, write_shards=False, force=True)
