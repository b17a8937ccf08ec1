"""Small PEP 503 indexes of metadata-only wheels, served over loopback HTTP, for resolver tests.

Each release is one real `py3-none-any` wheel (a zip whose METADATA states
Name, Version, Requires-Dist and, where given, Requires-Python; or `own`:
other METADATA than the index serves of it) with its PEP 658 `.metadata` file
beside it, listed on `<root>/simple/<project>/` with `#sha256=`, `data-dist-info-metadata`/`data-core-metadata`, and, per release,
`data-requires-python` (or not: only the metadata says it) and `data-yanked`.
The same index is read by fdlenv's resolver and by `uv pip compile`
(tests/test_lock_vs_uv.py), served by tests/helpers_pytorch_index.Index.
"""

from __future__ import annotations

import base64
import hashlib
import html
import urllib.parse
import zipfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from helpers_pytorch_index import Index


@dataclass
class Release:
    version: str
    requires: tuple[str, ...] = ()
    python: str | None = None       # Requires-Python
    on_page: bool = True            # Requires-Python also as data-requires-python
    yanked: bool = False
    metadata: bytes | None = None   # other METADATA than this release's own (a lying index)
    sha256: str | None = None       # another `#sha256=` than the file's
    own: bytes | None = None        # the wheel's own METADATA, when not what the index serves of it
    unlisted: dict[str, bytes] | None = None    # members the wheel holds and its RECORD does not list
    rewrite: Callable[[bytes], bytes] | None = None   # the wheel's bytes as served (before hashing)


def metadata(name: str, r: Release) -> bytes:
    import re

    extras = sorted({m for q in r.requires for m in re.findall(r'extra == "([^"]+)"', q)})
    return (f"Metadata-Version: 2.1\nName: {name}\nVersion: {r.version}\n"
            + (f"Requires-Python: {r.python}\n" if r.python else "")
            + "".join(f"Provides-Extra: {e}\n" for e in extras)
            + "".join(f"Requires-Dist: {q}\n" for q in r.requires)).encode()


def lay_out(root: Path, projects: dict[str, list[Release]]) -> Path:
    """`root/simple/<project>/index.html` and the files under `root/files/`; returns root."""
    files = root / "files"
    files.mkdir(parents=True, exist_ok=True)
    for name, releases in projects.items():
        links = []
        for r in releases:
            dist = f"{name.replace('-', '_')}-{r.version}"
            path = files / f"{dist}-py3-none-any.whl"
            meta = metadata(name, r)
            members = {f"{dist}.dist-info/METADATA": r.own if r.own is not None else meta,
                       f"{dist}.dist-info/WHEEL":
                           b"Wheel-Version: 1.0\nGenerator: tests\nRoot-Is-Purelib: true\nTag: py3-none-any\n"}
            record = "".join(f"{n},sha256={base64.urlsafe_b64encode(hashlib.sha256(b).digest()).rstrip(b'=').decode()},"
                             f"{len(b)}\n" for n, b in members.items()) + f"{dist}.dist-info/RECORD,,\n"
            with zipfile.ZipFile(path, "w", zipfile.ZIP_DEFLATED) as z:
                for n, b in {**members, **(r.unlisted or {}), f"{dist}.dist-info/RECORD": record.encode()}.items():
                    z.writestr(zipfile.ZipInfo(n, (1980, 1, 1, 0, 0, 0)), b)
            if r.rewrite is not None:
                path.write_bytes(r.rewrite(path.read_bytes()))
            served = r.metadata if r.metadata is not None else meta
            Path(str(path) + ".metadata").write_bytes(served)
            msha = hashlib.sha256(served).hexdigest()
            sha = r.sha256 if r.sha256 is not None else hashlib.sha256(path.read_bytes()).hexdigest()
            attrs = f' data-dist-info-metadata="sha256={msha}" data-core-metadata="sha256={msha}"'
            if r.python and r.on_page:
                attrs += f' data-requires-python="{html.escape(r.python)}"'
            if r.yanked:
                attrs += ' data-yanked=""'
            href = f"../../files/{urllib.parse.quote(path.name)}#sha256={sha}"
            links.append(f'<a href="{href}"{attrs}>{html.escape(path.name)}</a><br/>')
        page = root / "simple" / name
        page.mkdir(parents=True, exist_ok=True)
        (page / "index.html").write_text("<!DOCTYPE html><html><body>\n" + "\n".join(links) + "\n</body></html>\n")
    return root


def serve(root: Path, projects: dict[str, list[Release]]) -> Index:
    """A running loopback index over `projects`; its base URL is `.simple`."""
    return Index(lay_out(root, projects))
