"""`fdlenv pack libtorch`: PyTorch's own artifact -> conda package `libtorch-<variant>`.

conda-forge lacks linux-64 cu128 and ROCm builds, so fdlenv repackages what
PyTorch publishes: an official `libtorch-shared-with-deps-*.zip` (top-level
`libtorch/` with lib/, include/, share/, build-version) or a torch wheel
(torch/lib, torch/include, torch/share).

Layout contract with the store: the package puts the libtorch tree under
`<prefix>/libtorch/` (lib, include, share, build-version) next to
`libtorch/.fdlenv-pack.json` = {variant, version, build_version,
source_sha256, source_kind, archs, cuda} (cuda "12.6"/"12.8"/"none", archs the
list flodl writes into `.arch`), and `etc/conda/activate.d/<package>.sh`
exporting `LIBTORCH="$CONDA_PREFIX/libtorch"`.

Order: hash the source, check every member of the archive stays inside its
root (`..`, absolute paths and symlinks pointing out are refused before
anything is extracted), extract into a staging dir inside the channel, write
the package (reproducible bytes: the same source gives the same sha256), then
re-index the channel. The package only appears in the channel by rename.
"""

from __future__ import annotations

import asyncio
import json
import os
import posixpath
import re
import stat
import tempfile
import time
import urllib.parse
import zipfile
from dataclasses import dataclass
from pathlib import Path

from ..base import hashing, netauth, netread
from ..base.errors import Fail
from ..names.platforms import GLIBC_BASELINE
from ..base.progress import Meter, during, say
from ..names.variants import get as get_variant
from .condapkg import PkgFile, PkgMeta, files_from_tree, index_channel, write_conda

# The `.arch` facts of each variant (flodl 0.8.0's table): CUDA compute
# capabilities or ROCm gfx targets PyTorch 2.10 ships kernels for.
_GFX = ("gfx908 gfx90a gfx942 gfx950 gfx1030 gfx1100 gfx1101 gfx1102 "
        "gfx1150 gfx1151 gfx1200 gfx1201").split()
ARCHS: dict[str, list[str]] = {
    "cpu": ["cpu"],
    "cu126": "5.0 5.2 6.0 6.1 7.0 7.5 8.0 8.6 8.9 9.0".split(),
    "cu128": "7.0 7.5 8.0 8.6 8.9 9.0 12.0".split(),
    "cu130": "7.5 8.0 8.6 9.0 10.0 12.0".split(),
    "rocm7.0": _GFX,
    "rocm7.1": _GFX,
}
WHEEL_PARTS = ("lib", "include", "share")     # torch/<part> -> libtorch/<part>
PACK_META = ".fdlenv-pack.json"
DOWNLOAD_LIMIT = 16 << 30                     # bytes: libtorch zips are 2-4 GB


@dataclass(frozen=True)
class Packed:
    path: Path            # the .conda in the channel
    package: str
    version: str
    build: str
    variant: str
    source_sha256: str
    source_kind: str      # zip | wheel
    seconds: float


def build_string(variant: str, source_sha256: str) -> str:
    """The package's build string: variant + source digest, so two sources never collide."""
    return f"{get_variant(variant).flodl_dir}_{source_sha256[:12]}_0"


def pack_libtorch(variant: str, source: str, channel: Path, version: str | None = None) -> Packed:
    """Pack `source` (path or URL of an official zip or a torch wheel) into `channel/linux-64`."""
    t0 = time.monotonic()
    v = get_variant(variant)
    channel = Path(channel)
    channel.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(dir=channel, prefix=".pack-") as tmp:
        archive = _local(source, Path(tmp))
        sha256 = sha256_file(archive)
        try:
            zf = zipfile.ZipFile(archive)
        except (zipfile.BadZipFile, OSError) as e:
            raise Fail.permanent(f"--from: {source} is not a zip or wheel ({e}); accepted: "
                                 "libtorch-shared-with-deps-*.zip or torch-*.whl") from None
        with zf:
            kind, root = _kind(zf, archive.name, source)
            _refuse_escapes(zf, root, source)
            tree = Path(tmp) / "libtorch"
            _extract(zf, kind, tree)
        build_version = _build_version(kind, archive.name, tree)
        tag = build_version.partition("+")[2]
        if tag and tag.replace(".", "") != v.name.replace(".", ""):
            raise Fail.permanent(f"--from: {source} is a {tag} build ({build_version}), "
                                 f"not variant {v.name}; pass the matching --libtorch")
        pkg_version = version or build_version.partition("+")[0]
        _check_version(pkg_version)
        meta_doc = {
            "variant": v.name, "version": pkg_version, "build_version": build_version,
            "source_sha256": sha256, "source_kind": kind, "archs": ARCHS[v.name],
            "cuda": v.cuda or "none",
        }
        (tree / PACK_META).write_text(json.dumps(meta_doc, indent=2, sort_keys=True) + "\n")
        files = files_from_tree(tree, under="libtorch") + [
            PkgFile(f"etc/conda/activate.d/{v.package}.sh",
                    data=b'export LIBTORCH="$CONDA_PREFIX/libtorch"\n'),
            PkgFile(f"etc/conda/deactivate.d/{v.package}.sh", data=b"unset LIBTORCH\n"),
        ]
        depends = [f"__glibc >={GLIBC_BASELINE}"] + ([f"__cuda >={v.cuda}"] if v.cuda else [])
        meta = PkgMeta(name=v.package, version=pkg_version, build=build_string(v.name, sha256),
                       depends=depends, license="BSD-3-Clause")
        size = sum(f.source.stat().st_size for f in files if f.source is not None)
        with during(f"writing {meta.stem}.conda ({len(files)} files, {size / 1e6:.0f} MB)"):
            path = write_conda(channel / "linux-64", meta, files)
    with during(f"indexing {channel}"):
        asyncio.run(index_channel(channel))
    packed = Packed(path=path, package=v.package, version=pkg_version, build=meta.build,
                    variant=v.name, source_sha256=sha256, source_kind=kind,
                    seconds=round(time.monotonic() - t0, 3))
    say(f"packed {path.name} in {packed.seconds:.1f} s")
    return packed


def _local(source: str, tmp: Path) -> Path:
    """A local path for `source`, downloading an http(s) URL into `tmp`."""
    if source.startswith("file://"):
        source = urllib.parse.unquote(urllib.parse.urlparse(source).path)
    if "://" not in source:
        path = Path(source)
        if not path.is_file():
            raise Fail.permanent(f"--from: no such file {source}")
        return path
    import http.client

    source = netauth.split(source, "--from's URL")   # its user:password, for its origin only
    target = tmp / urllib.parse.unquote(source.rstrip("/").rpartition("/")[2] or "download")

    def download() -> None:
        with open(target, "wb") as out, netread.open_url(source) as r, \
                Meter(f"downloading {target.name}", int(r.headers.get("Content-Length") or 0)) as meter:
            for piece in netread.chunks(r, source, DOWNLOAD_LIMIT):
                out.write(piece)
                meter.add(len(piece))
    try:
        netread.retrying(download, source)
    except (OSError, http.client.HTTPException) as e:
        raise Fail.retry(f"--from: cannot download {source}: {netread.why(e)}") from None
    return target


def sha256_file(path: Path) -> str:
    """sha256 of a (large) file, saying how far it got every few seconds."""
    with Meter(f"hashing {path.name}", path.stat().st_size) as meter:
        def tick(n: int) -> None:
            meter.done = n
        return hashing.of_file(path, chunk=1 << 22, tick=tick).sha256


def _kind(zf: zipfile.ZipFile, filename: str, source: str) -> tuple[str, str]:
    """("zip", "libtorch/") for PyTorch's libtorch zip, ("wheel", "") for a torch wheel."""
    names = zf.namelist()
    if filename.endswith(".whl") or any(n.startswith("torch/lib/") for n in names):
        if not any(n.startswith("torch/lib/") for n in names):
            raise Fail.permanent(f"--from: {source} is a wheel without torch/lib/; accepted: a torch wheel")
        return "wheel", ""
    if any(n.startswith("libtorch/lib/") for n in names):
        return "zip", "libtorch/"
    raise Fail.permanent(f"--from: {source} has neither libtorch/lib/ nor torch/lib/; accepted: "
                         "libtorch-shared-with-deps-*.zip or torch-*.whl")


def _is_symlink(info: zipfile.ZipInfo) -> bool:
    return stat.S_ISLNK(info.external_attr >> 16)


def _refuse_escapes(zf: zipfile.ZipFile, root: str, source: str) -> None:
    """Every member (and every symlink's target) must stay inside `root` (zip-slip)."""
    for info in zf.infolist():
        name = info.filename
        normal = posixpath.normpath(name)
        escapes = (name.startswith("/") or "\\" in name or re.match(r"^[A-Za-z]:", name)
                   or normal == ".." or normal.startswith("../") or not (normal + "/").startswith(root))
        if not escapes and _is_symlink(info):
            target = zf.read(info).decode("utf-8", "replace")
            resolved = posixpath.normpath(posixpath.join(posixpath.dirname(normal), target))
            escapes = target.startswith("/") or resolved == ".." or resolved.startswith("../") \
                or not (resolved + "/").startswith(root)
            name = f"{name} -> {target}"
        if escapes:
            raise Fail.permanent(f"--from: {source}: member {name!r} escapes the archive's "
                                 f"root {root or '.'!r}; refusing to unpack it")


def _extract(zf: zipfile.ZipFile, kind: str, tree: Path) -> None:
    """Write the libtorch part of the archive under `tree` (= the future <prefix>/libtorch)."""
    if kind == "zip":
        wanted = [(i, i.filename.removeprefix("libtorch/")) for i in zf.infolist()]
    else:
        wanted = [(i, i.filename.removeprefix("torch/")) for i in zf.infolist()
                  if i.filename.split("/")[0] == "torch" and i.filename.count("/") >= 2
                  and i.filename.split("/")[1] in WHEEL_PARTS]
    with Meter("unpacking", sum(i.file_size for i, _ in wanted)) as meter:
        _write_members(zf, wanted, tree, meter)


def _write_members(zf: zipfile.ZipFile, wanted: list[tuple[zipfile.ZipInfo, str]], tree: Path, meter: Meter) -> None:
    tree.mkdir(parents=True, exist_ok=True)
    real_tree = os.path.realpath(tree)
    links = []
    for info, rel in wanted:
        if not rel or info.is_dir():
            continue
        dest = tree / rel
        _inside_before_write(dest, real_tree, info.filename)
        dest.parent.mkdir(parents=True, exist_ok=True)
        if _is_symlink(info):
            dest.symlink_to(zf.read(info).decode())
            links.append((dest, info.filename))
            continue
        # O_NOFOLLOW | O_EXCL: never write through a link, never over what is there
        fd = os.open(dest, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with zf.open(info) as src, os.fdopen(fd, "wb") as out:
            while chunk := src.read(1 << 22):
                out.write(chunk)
                meter.add(len(chunk))
        mode = info.external_attr >> 16
        dest.chmod(0o755 if mode & 0o111 else 0o644)
    for link, name in links:   # a chain of links (u2 -> u1/.., u1 -> ..) resolves only now
        target = os.path.realpath(link)
        if not (target == real_tree or target.startswith(real_tree + os.sep)):
            raise Fail.permanent(f"--from: member {name!r} is a link that resolves outside the archive's "
                                 "tree; refusing to unpack it")
    if not (tree / "lib").is_dir():
        raise Fail.permanent("--from: the archive's libtorch has no lib/ directory")


def _inside_before_write(dest: Path, real_tree: str, name: str) -> None:
    """The real location of `dest`'s nearest existing ancestor must be inside the tree: links
    unpacked earlier may point anywhere, and mkdir/open would follow them."""
    parent = dest.parent
    while not os.path.lexists(parent):
        parent = parent.parent
    real = os.path.realpath(parent)
    if not (real == real_tree or real.startswith(real_tree + os.sep)) or os.path.islink(dest):
        raise Fail.permanent(f"--from: member {name!r} would be written through a link, outside the "
                             "archive's tree; refusing to unpack it")


def _build_version(kind: str, filename: str, tree: Path) -> str:
    """PyTorch's own version string (`2.10.0+cu128`); a wheel's goes into build-version too."""
    marker = tree / "build-version"
    if kind == "zip":
        if not marker.is_file():
            raise Fail.permanent("--from: the libtorch zip has no libtorch/build-version")
        return marker.read_text().strip()
    m = re.match(r"^torch-([^-]+)-", filename)
    if not m:
        raise Fail.permanent(f"--from: {filename} is not named like a wheel (torch-VERSION-...whl)")
    version = urllib.parse.unquote(m[1])
    marker.write_text(version + "\n")
    return version


def _check_version(version: str) -> None:
    import rattler

    try:
        rattler.Version(version)
    except Exception:  # noqa: BLE001 - rattler's InvalidVersionError has no stable import path
        raise Fail.permanent(f"--version: {version!r} is not a conda version (e.g. 2.10.0)") from None
    if "-" in version or "+" in version:
        raise Fail.permanent(f"--version: {version!r} may not contain '-' or '+' (e.g. 2.10.0)")
