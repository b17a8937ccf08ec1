"""Test helpers: real conda packages and local channels, built in-process.

Every package is a real `.conda` written by `fdlenv.pack.condapkg` and every
channel is indexed by py-rattler, so locks and installs in tests go through
the same code paths as real ones. Shared by the lock, pack and store tests.

    pkgs = [
        Pkg("libtorch-cpu", "2.10.0", depends=["zlib >=1.2"],
            files={"libtorch/lib/libtorch.so": b"..."},
            activate={"libtorch-cpu.sh": 'export LIBTORCH="$CONDA_PREFIX/libtorch"\n'}),
        Pkg("zlib", "1.3", noarch="generic", files={"share/z.txt": "z"}),
        {"name": "hooks", "version": "1", "prefix_files": {"share/p.txt": f"at={PLACEHOLDER}\n"},
         "symlinks": {"share/link": "p.txt"}},
    ]
    channel = make_channel(tmp_path / "channel", pkgs)   # writes + indexes
    url = channel_url(channel)                            # file:// URL
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from pathlib import Path

from fdlenv.pack.condapkg import PkgFile, PkgMeta, index_channel, write_conda

# The placeholder conda-build uses; rattler rewrites it to the install prefix.
PLACEHOLDER = "/opt/anaconda1anaconda2anaconda3"


@dataclass
class Pkg:
    name: str
    version: str
    build: str = "0"
    build_number: int = 0
    subdir: str = "linux-64"                 # ignored when noarch is set
    depends: list[str] = field(default_factory=list)
    constrains: list[str] = field(default_factory=list)
    noarch: str | None = None                # "generic" -> written to noarch/
    files: dict[str, bytes | str] = field(default_factory=dict)         # path -> content
    executables: set[str] = field(default_factory=set)                  # paths in files to mark +x
    prefix_files: dict[str, str] = field(default_factory=dict)          # text holding PLACEHOLDER
    symlinks: dict[str, str] = field(default_factory=dict)              # path -> link target
    activate: dict[str, str] = field(default_factory=dict)              # activate.d name -> script

    def pkg_files(self) -> list[PkgFile]:
        out = [PkgFile(p, data=_bytes(d), executable=p in self.executables) for p, d in self.files.items()]
        out += [PkgFile(p, data=t.encode(), prefix_placeholder=PLACEHOLDER) for p, t in self.prefix_files.items()]
        out += [PkgFile(p, symlink=t) for p, t in self.symlinks.items()]
        out += [PkgFile(f"etc/conda/activate.d/{n}", data=s.encode()) for n, s in self.activate.items()]
        return out

    def meta(self) -> PkgMeta:
        return PkgMeta(name=self.name, version=self.version, build=self.build,
                       build_number=self.build_number,
                       subdir="noarch" if self.noarch else self.subdir,
                       depends=list(self.depends), constrains=list(self.constrains),
                       noarch=self.noarch)


def _bytes(data: bytes | str) -> bytes:
    return data.encode() if isinstance(data, str) else data


def make_package(channel: Path, pkg: Pkg | dict) -> Path:
    """Write one package into `channel/<subdir>/`; returns the archive path (channel not re-indexed)."""
    pkg = pkg if isinstance(pkg, Pkg) else Pkg(**pkg)
    meta = pkg.meta()
    return write_conda(channel / meta.subdir, meta, pkg.pkg_files())


def index(channel: Path) -> Path:
    asyncio.run(index_channel(channel))
    return channel


def make_channel(channel: Path, packages: list[Pkg | dict]) -> Path:
    """Write `packages` into `channel` (added to what is there) and index it."""
    for pkg in packages:
        make_package(channel, pkg)
    return index(channel)


def channel_url(channel: Path) -> str:
    return channel.resolve().as_uri()


def make_wheel(directory: Path, name: str, version: str, files: dict[str, bytes | str] | None = None, *,
               tag: str = "py3-none-any", requires: tuple[str, ...] = (), top: str | None = None) -> Path:
    """A minimal wheel with a valid RECORD: `files` live under `top/` (default: the
    project's import name), `requires` become Requires-Dist lines, `tag` is its tag."""
    import base64
    import hashlib
    import zipfile

    directory.mkdir(parents=True, exist_ok=True)
    dist = f"{name.replace('-', '_')}-{version}"
    top = top or name.replace("-", "_")
    members = {f"{top}/{k}": _bytes(v) for k, v in (files or {"__init__.py": f"VERSION = {version!r}\n"}).items()}
    import re

    extras = sorted({m for r in requires for m in re.findall(r'extra == "([^"]+)"', r)})
    meta = (f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"
            + "".join(f"Provides-Extra: {e}\n" for e in extras) + "".join(f"Requires-Dist: {r}\n" for r in requires))
    members[f"{dist}.dist-info/METADATA"] = meta.encode()
    members[f"{dist}.dist-info/WHEEL"] = (f"Wheel-Version: 1.0\nGenerator: tests\n"
                                          f"Root-Is-Purelib: {'true' if tag.endswith('-any') else 'false'}\nTag: {tag}\n").encode()
    record = "".join(
        f"{p},sha256={base64.urlsafe_b64encode(hashlib.sha256(d).digest()).rstrip(b'=').decode()},{len(d)}\n"
        for p, d in sorted(members.items()))
    members[f"{dist}.dist-info/RECORD"] = (record + f"{dist}.dist-info/RECORD,,\n").encode()
    path = directory / f"{dist}-{tag}.whl"
    with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
        for p, d in sorted(members.items()):
            info = zipfile.ZipInfo(p, date_time=(1980, 1, 1, 0, 0, 0))
            info.compress_type = zipfile.ZIP_DEFLATED
            info.external_attr = (0o755 if p.endswith(".so") or "/bin/" in p else 0o644) << 16
            z.writestr(info, d)
    return path


def write_env(envs: Path, variant: str, channels: list[str], deps: list, platforms=("linux-64",)) -> Path:
    """Write `envs/<variant>.yml` (conda environment.yml shape)."""
    import yaml

    envs.mkdir(parents=True, exist_ok=True)
    doc = {"name": f"test-{variant}", "channels": channels, "dependencies": deps}
    if platforms:
        doc["platforms"] = list(platforms)
    path = envs / f"{variant}.yml"
    path.write_text(yaml.safe_dump(doc, sort_keys=False))
    return path
