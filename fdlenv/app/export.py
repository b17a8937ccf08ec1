"""A static mirror of exactly what the locks name: `fdlenv mirror export DIR`.

A fleet downloads once: the export holds every file the chosen locks name,
laid out so any static web server, an object store or `file://` serves it,
and the boxes point their index names at it (`--mirror pypi=URL/pypi`,
`--mirror pytorch=URL/pytorch`, `--mirror <channel>=URL/conda/<channel>`).
That is safe because every box checks every file against its lock's sha256.

Layout of DIR:
- `<index name>/<project>/index.html` (PEP 503, `#sha256=` fragments, PEP 658
  `data-dist-info-metadata`/`data-core-metadata`) and `index.json` (the same as
  PEP 691 JSON, with PEP 700's `size` of each file, which HTML cannot state: a
  server that answers `Accept: application/vnd.pypi.simple.v1+json` with it
  lets a client start the largest download first) beside the wheel and its
  `.metadata`; `pytorch/cu126/...` keeps PyTorch's `<root>/<variant>` shape;
- `conda/<channel name>/<subdir>/` with the packages and `repodata.json`
  (py-rattler's indexer);
- `.fdlenv-export.json`: what is there, by path, with its sha256.
Order, per file: already there with its recorded sha256 and size -> kept (an
export of an unchanged lock copies nothing); else copied from the home's own
download of it (a conda archive in `archives/`; a wheel lives there only
extracted, so it is fetched again), else fetched from where the box's own
settings say it is served, hashed while it streams, refused unless
the sha256 is the lock's, renamed into place; then the pages are rewritten
from the whole record (a grown lock adds to the mirror, never drops). First of
all, what an export killed by SIGKILL left (its `.NAME.PID` and `.NAME.PID.part`
temporary files, PID gone) is swept from DIR. One progress line past a second
(`base.progress.Tally`: bytes of the total, rate, ETA, files).
"""

from __future__ import annotations

import html
import json
import os
import urllib.parse
from pathlib import Path

from ..base import atomic, confine, hashing
from ..index import pipindex
from ..base.errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import IO, Any

    from ..base.progress import Tally
    from ..lock.file import Record
    from ..names.home import Home

    Done = dict[str, dict[str, Any]]   # the export's record (JSON): path -> sha256, size, metadata

RECORD = ".fdlenv-export.json"


_LEFTOVER = None   # compiled on first use: `.NAME.PID` (atomic.write_text) or `.NAME.PID.part` (_copy)


def _sweep(out: Path) -> None:
    """Remove what an export killed by SIGKILL left in `out`: its temporary files, named
    `.NAME.PID` (pages, `.metadata`, the record: atomic.write_text) or `.NAME.PID.part` (a
    download), whose PID is no live process. Another export running in `out` now keeps its
    own; nothing is followed through a link."""
    import re

    global _LEFTOVER
    _LEFTOVER = _LEFTOVER or re.compile(r"\..+\.([0-9]+)(\.part)?")
    for folder, _dirs, files in os.walk(out):
        for name in files:
            m = _LEFTOVER.fullmatch(name)
            if m is None or int(m.group(1)) == os.getpid() or _alive(int(m.group(1))):
                continue
            try:
                os.unlink(os.path.join(folder, name))
            except FileNotFoundError:
                pass


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:   # another user's live process
        return True
    return True


def export(home: Home, lock_files: list[Path], variants: list[str] | None, platforms: list[str] | None,
           mirrors: dict[str, str], out: Path) -> dict[str, Any]:
    """Copy what `lock_files` name for `variants` (default: every one each holds) into `out`."""
    records = _records(lock_files, variants, platforms)
    if not records:
        raise Fail.permanent("mirror export: the locks hold nothing for the variants and platforms asked "
                             f"({', '.join(map(str, lock_files)) or 'no lock found'})")
    out.mkdir(parents=True, exist_ok=True)
    _sweep(out)
    done = _load(out)
    pip = [r for r in records if pipindex.is_entry_url(r.url)]
    conda = [r for r in records if r.manager == "conda"]
    for r in records:
        if r.manager == "pip" and not pipindex.is_entry_url(r.url):
            raise Fail.permanent(f"mirror export: {r.name} is locked by URL ({r.url}), not through an index or "
                                 "channel; a static mirror serves index and channel entries only")
    todo = [(r, rel) for r in pip if not _kept(out, done, rel := _pip_path(out, r), r.sha256)]
    todo += [(r, rel) for r in conda if not _kept(out, done, rel := _conda_path(out, r), r.sha256)]
    copied, from_home = 0, 0
    if todo:
        from ..base.progress import Tally
        from ..store.wheelfetch import where_served

        served = where_served([r for r, _ in todo if r in pip], mirrors)
        sources = [_source(home, r, served, mirrors) for r, _ in todo]
        from_home = sum(1 for _, _, ours in sources if ours)
        mine = f", {from_home} from the home's archives" if from_home else ""
        tally = Tally(f"exporting {len(todo)} file(s){mine}")
        tally(0, 0, len(todo), sum(size or 0 for _, size, _ in sources))
        try:
            for (r, rel), (url, _, ours) in zip(todo, sources, strict=True):
                try:
                    copied += _copy(url, r, out / rel, tally)
                except Fail:
                    if not ours:
                        raise
                    from_home -= 1   # the home's copy does not hash to the lock: fetched after all
                    copied += _copy(_conda_url(r, mirrors), r, out / rel, tally)
                tally(1, 0)
                _publish(out, rel, r, done)
        finally:
            tally.close()
    _pages(out, done)
    channels = sorted({rel.split("/")[1] for rel in done if rel.startswith("conda/")})
    if channels:
        _index_channels(out, channels)
    names = sorted({rel.split("/")[0] for rel in done if not rel.startswith("conda/")})
    return {"dir": str(out), "copied": len(todo), "bytes": copied, "kept": len(pip) + len(conda) - len(todo),
            "from_home": from_home,
            "mirrors": {**{n: (out / n).absolute().as_uri() for n in names},
                        **{c: (out / "conda" / c).absolute().as_uri() for c in channels}}}


def _source(home: Home, r: Record, served: dict[str, tuple[str, int | None]], mirrors: dict[str, str]) -> tuple[str, int | None, bool]:
    """(where `r`'s bytes are read from, their size when known, whether from the home): a conda
    archive the home already downloaded (`archives/<sha256><ext>`, hashed again as it is copied),
    else where the box's settings serve it. A wheel is kept extracted in the package cache, not
    as the wheel's bytes, so it is fetched again."""
    from ..store.archives import _ext

    if r.manager == "conda":
        cached = home.archive(r.sha256, _ext(r.filename))
        try:
            return str(cached), cached.stat().st_size, True
        except OSError:
            return _conda_url(r, mirrors), r.size, False
    url, size = served[r.sha256]
    return url, size or r.size, False


def _publish(out: Path, rel: str, r: Record, done: Done) -> None:
    """Record an exported file (and a wheel's PEP 658 metadata beside it)."""
    done[rel] = {"sha256": r.sha256, "size": (out / rel).stat().st_size}
    if rel.endswith(".whl"):
        meta = _metadata(out / rel)
        atomic.write_text(out / (rel + ".metadata"), meta.decode("utf-8", "surrogateescape"))
        done[rel]["metadata"] = hashing.of_bytes(meta)
    atomic.write_text(out / RECORD, json.dumps(done, indent=1, sort_keys=True))


def _records(lock_files: list[Path], variants: list[str] | None, platforms: list[str] | None) -> list[Record]:
    from ..names import variants as _variants
    from ..lock.file import holds, load_lock, read_variant

    seen: set[tuple[str, str]] = set()
    out: list[Record] = []
    for lock in lock_files:
        doc = load_lock(lock)
        plats = [p for p in (doc.get("metadata") or {}).get("platforms") or [] if not platforms or p in platforms]
        for v in variants or list(_variants.VARIANTS):
            for p in plats:
                if holds(lock, v, p):
                    for r in read_variant(lock, v, p):
                        if (r.sha256, r.platform) not in seen:
                            seen.add((r.sha256, r.platform))
                            out.append(r)
    return out


def _pip_path(out: Path, r: Record) -> str:
    index, project, filename = pipindex.parse_entry_url(r.url)
    return _confined(out, f"{index}/{project}/{urllib.parse.unquote(filename)}", r)


def _conda_path(out: Path, r: Record) -> str:
    from ..index.mirrors import channel_name, split_url

    channel, subdir, filename = split_url(r.url)
    return _confined(out, f"conda/{channel_name(channel)}/{subdir}/{filename}", r)


def _confined(out: Path, rel: str, r: Record) -> str:
    """`rel` under `out`, normalised, or the permanent refusal naming the lock entry (its index,
    project or file name climbs out, is absolute or runs through a link: `confine.inside`)."""
    return confine.inside(out, rel, f"mirror export: the lock entry {r.name} ({r.url})").relative_to(out).as_posix()


def _conda_url(r: Record, mirrors: dict[str, str]) -> str:
    from ..index.mirrors import rewrite

    return rewrite(r.url, mirrors)


def _kept(out: Path, done: Done, rel: str, sha256: str) -> bool:
    d = done.get(rel)
    if not d:
        return False
    try:
        return bool(d["sha256"] == sha256 and (out / rel).stat().st_size == d["size"])
    except OSError:
        return False


def _load(out: Path) -> Done:
    """The record of what DIR holds; an entry whose path would leave DIR (a record an earlier,
    unconfined export wrote) is dropped, so no page is written for it."""
    try:
        d = json.loads((out / RECORD).read_text())
        return {k: v for k, v in d.items() if confine.problem(k) is None} if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def _copy(url: str, r: Record, dest: Path, tally: Tally | None = None) -> int:
    """Stream `url` to `dest`, published only when its sha256 is the lock's; returns its size."""
    dest.parent.mkdir(parents=True, exist_ok=True)
    part = dest.with_name(f".{dest.name}.{os.getpid()}.part")
    digest = hashing.Digest()
    try:
        with _open(url) as src, open(part, "wb") as f:
            while chunk := src.read(hashing.CHUNK):
                digest.update(chunk)
                f.write(chunk)
                if tally is not None:
                    tally(0, len(chunk))
        if digest.sha256 != r.sha256:
            raise Fail.permanent(f"mirror export: {url} does not match the lock (sha256 {digest.sha256} != "
                                 f"{r.sha256}); nothing of it was exported")
        os.replace(part, dest)
    except OSError as e:
        from ..base.netread import why
        raise Fail.retry(f"mirror export: cannot copy {url}: {why(e)}") from None
    finally:
        part.unlink(missing_ok=True)
    return digest.size


def _open(url: str) -> IO[bytes]:
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme in ("", "file"):
        return open(urllib.parse.unquote(parsed.path) if parsed.scheme else url, "rb")
    from ..base.netread import open_url
    return open_url(url)


def _metadata(wheel: Path) -> bytes:
    import zipfile

    with zipfile.ZipFile(wheel) as z:
        names = [n for n in z.namelist() if n.count("/") == 1 and n.endswith(".dist-info/METADATA")]
        if len(names) != 1:
            raise Fail.permanent(f"mirror export: {wheel.name} has {len(names)} .dist-info/METADATA files")
        return z.read(names[0])


def _pages(out: Path, done: Done) -> None:
    """PEP 503 pages and their PEP 691/700 JSON twins for every project of every index the record holds."""
    projects: dict[str, list[tuple[str, dict[str, Any]]]] = {}
    for rel, d in done.items():
        if rel.startswith("conda/") or not rel.endswith(".whl"):
            continue
        folder, _, filename = rel.rpartition("/")
        projects.setdefault(folder, []).append((filename, d))
    indexes: dict[str, set[str]] = {}
    for folder, files in projects.items():
        index, _, project = folder.rpartition("/")
        indexes.setdefault(index, set()).add(project)
        links = "".join(
            f'<a href="{urllib.parse.quote(name)}#sha256={d["sha256"]}" data-dist-info-metadata="sha256='
            f'{d["metadata"]}" data-core-metadata="sha256={d["metadata"]}">{html.escape(name)}</a><br/>\n'
            for name, d in sorted(files))
        atomic.write_text(out / folder / "index.html", "<!DOCTYPE html>\n<html><body>\n"
                          f"<h1>Links for {html.escape(project)}</h1>\n{links}</body></html>\n")
        atomic.write_text(out / folder / "index.json", json.dumps({
            "meta": {"api-version": "1.1"}, "name": project,
            "versions": sorted({name.split("-")[1] for name, _ in files}),
            "files": [{"filename": name, "url": urllib.parse.quote(name), "hashes": {"sha256": d["sha256"]},
                       "size": d["size"], "core-metadata": {"sha256": d["metadata"]},
                       "data-dist-info-metadata": {"sha256": d["metadata"]}} for name, d in sorted(files)]},
            indent=1))
    for index, names in indexes.items():
        atomic.write_text(out / index / "index.html", "<!DOCTYPE html>\n<html><body>\n" + "".join(
            f'<a href="{n}/">{n}</a><br/>\n' for n in sorted(names)) + "</body></html>\n")
        atomic.write_text(out / index / "index.json", json.dumps({
            "meta": {"api-version": "1.1"}, "projects": [{"name": n} for n in sorted(names)]}, indent=1))


def _index_channels(out: Path, channels: list[str]) -> None:
    import asyncio

    from ..pack.condapkg import index_channel   # py-rattler's indexer, as `fdlenv pack` uses it

    for c in channels:
        asyncio.run(index_channel(out / "conda" / c))
