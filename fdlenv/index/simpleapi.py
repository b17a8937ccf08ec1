"""Reading a wheel index: project pages (PEP 691 JSON, PEP 503 HTML) and core metadata.

Both the lock resolver (`lock.closure`: which files, which requirements) and
the store (`store.wheels`: where a locked file is served today) read an index
through this module, so every index shape is handled once:
- a project page is `<base>/<project>/`, asked for as JSON, read as what comes (PyTorch's: HTML);
- a file's name is the link text, else the unquoted last part of its href, so
  `torch-2.10.0%2Brocm7.1-...whl` and `torch-2.10.0+rocm7.1-...whl` are one
  name (the lock records the unquoted one); hrefs may be relative, absolute
  (`/whl/rocm7.1/torch-...whl`, files beside the project pages) or full URLs;
- hashes come from `#sha256=` fragments or JSON `hashes`; sizes from JSON
  `size` (PEP 700; HTML pages state none), and where a page states none
  `sizes_of` asks (a HEAD side by side, bounded, a failure only "unknown");
- core metadata (Requires-Dist, Requires-Python) is read from the file's PEP
  658/714 `.metadata` (`data-core-metadata`, `data-dist-info-metadata`,
  JSON `core-metadata`), checked against its stated sha256; an index without
  it is read with HTTP range requests into the wheel's zip directory, as
  pip's lazy wheel does (`index/lazywheel.py`), never by downloading a multi-GB wheel; the METADATA
  member it inflates is capped (`lazywheel.INFLATE_LIMIT`: refused, transient, before more than that is held).

Failures, by what can fix them (exit 1 transient: `--persist` re-dials and the
box heals when the index or its mirror catches up; exit 2 permanent: no sync fixes it):
- transient, a lag: a project page that is missing (`Missing`), a page with no
  files at all (a cold pull-through cache answers so while it fetches upstream),
  a page that lists the project but not the file a lock names, a `.metadata`
  file its page states that is not there yet;
- transient, the way there (once `netread` tried each request again): an index that
  cannot be reached, times out, refuses, or answers an error (`Unreachable`); the
  message names the URL, the caller adds the ways out (`pipindex.ways_out`);
- permanent, a person's: credentials, proxy or CA refused (`netconf.refused`);
- permanent, other bytes: what the index serves differs from what it states or
  the lock holds (a `.metadata` file or a wheel whose sha256 is not the stated
  one, an index sha256 that is not the lock's), a page that is not a page,
  a body past its limit: a mirror that syncs serves the same bytes again.
"""

from __future__ import annotations

import json
import os
import urllib.parse
from typing import NamedTuple

from ..base.errors import Fail
from ..base.netread import fetch, open_url, read_all, why
from . import checked

JSON_TYPE = "application/vnd.pypi.simple.v1+json"
# An index answers pages and metadata of kilobytes (PyTorch's torch page: ~1 MB); a body past
# these is a broken or hostile index, refused before it fills memory.
PAGE_LIMIT = 64 << 20
META_LIMIT = 16 << 20


class Missing(Fail):
    """A project page the index does not have (yet): transient, a mirror may not have synced it.
    A resolver walking optional dependencies tells it from other failures by its type."""


class Unreachable(Fail):
    """The index could not be read at all (no route, a refused connection, a timeout, an HTTP
    error other than 404): transient; the caller names the ways out. `url`: the URL tried."""

    url = ""

    @classmethod
    def at(cls, url: str, message: str) -> Unreachable:
        e = cls(message, transient=True)
        e.url = url
        return e


class IndexFile(NamedTuple):
    """One file of a project page."""
    filename: str                 # unquoted: torch-2.10.0+rocm7.1-cp312-cp312-manylinux_2_28_x86_64.whl
    url: str                      # absolute
    sha256: str | None
    size: int | None
    requires_python: str | None
    yanked: bool
    metadata: str | None          # None: no PEP 658 file; "": one, no hash stated; else its sha256


def _read_page(url: str) -> tuple[bytes, str, str]:
    """(body, content type, final URL) of a page; a file:// directory reads its index.html or
    lists its entries."""
    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.parse.unquote(parsed.path)
        if os.path.isdir(path):
            page = os.path.join(path, "index.html")
            if os.path.isfile(page):
                with open(page, "rb") as f:
                    return read_all(f, PAGE_LIMIT, page), "text/html", url.rstrip("/") + "/"
            links = "".join(f'<a href="{urllib.parse.quote(n)}">{n}</a>' for n in sorted(os.listdir(path)))
            return links.encode(), "text/html", url.rstrip("/") + "/"
        raise FileNotFoundError(path)
    body, resp = fetch(url, PAGE_LIMIT, {"Accept": f"{JSON_TYPE}, text/html;q=0.01"})
    return body, resp.headers.get("Content-Type", ""), resp.geturl()


def _anchors(text: str) -> list[tuple[dict[str, str | None], str]]:
    """Every `<a>` of an HTML page: (its attributes, its text). html.parser is imported here,
    only for an index that answers in HTML."""
    from html.parser import HTMLParser

    links: list[tuple[dict[str, str | None], str]] = []

    class Anchors(HTMLParser):
        _open: dict[str, str | None] | None = None
        _text: list[str] = []

        def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
            if tag == "a":
                self._open, self._text = dict(attrs), []

        def handle_data(self, data: str) -> None:
            if self._open is not None:
                self._text.append(data)

        def handle_endtag(self, tag: str) -> None:
            if tag == "a" and self._open is not None:
                links.append((self._open, "".join(self._text).strip()))
                self._open = None

    Anchors(convert_charrefs=True).feed(text)
    return links


def _hash_of(value: object) -> str | None:
    """`sha256=<hex>` (HTML attributes, fragments) or {"sha256": hex} (JSON) -> hex or None."""
    if isinstance(value, dict):
        h = value.get("sha256")
        return h.lower() if isinstance(h, str) else None
    if isinstance(value, str) and value.startswith("sha256="):
        return value[len("sha256="):].lower()
    return None


def _metadata_flag(value: object) -> str | None:
    """A PEP 658/714 attribute or JSON key -> None (no file), "" (a file, no hash), or its sha256."""
    if value is None or value is False or value == "false":
        return None
    return _hash_of(value) or ""


def _from_html(body: bytes, final: str) -> list[IndexFile]:
    out = []
    for attrs, text in _anchors(body.decode("utf-8", "replace")):
        href = attrs.get("href")
        if not href:
            continue
        url, _, frag = href.partition("#")
        tail = urllib.parse.unquote(url.rstrip("/").rsplit("/", 1)[-1])
        name = text if text.endswith((".whl", ".tar.gz", ".zip")) else tail
        key = next((k for k in ("data-core-metadata", "data-dist-info-metadata") if k in attrs), None)
        meta = None if key is None else _metadata_flag(attrs[key] if attrs[key] is not None else True)
        try:
            absolute = urllib.parse.urljoin(final, url)
            urllib.parse.urlparse(absolute)
        except ValueError:      # not a URL at all (`http://[::1`): a link nobody can follow
            continue
        out.append(IndexFile(name, absolute, _hash_of(frag), None,
                             attrs.get("data-requires-python"), "data-yanked" in attrs, meta))
    return out


def _from_json(body: bytes, final: str, page: str) -> list[IndexFile]:
    try:
        files = json.loads(body).get("files", [])
        out = []
        for f in files:
            meta = f.get("core-metadata", f.get("data-dist-info-metadata", f.get("dist-info-metadata")))
            size = f.get("size")
            out.append(IndexFile(str(f["filename"]), urllib.parse.urljoin(final, str(f["url"])),
                                 _hash_of(f.get("hashes") or {}), size if isinstance(size, int) else None,
                                 f.get("requires-python"), bool(f.get("yanked")), _metadata_flag(meta)))
        return out
    except (ValueError, KeyError, TypeError, AttributeError) as e:
        raise Fail.permanent(f"wheel index: {page} is not a PEP 691 project page ({e})") from None


def project_files(base: str, project: str) -> list[IndexFile]:
    """Every file `base` lists for `project` (a PEP 503-normalised name). A remote index's links
    are followed only on its own scheme (or https): a `file:///...` href or JSON url is dropped,
    since an index names files it serves, never files of the machine reading it."""
    return _listing(base, project)[0]


def _listing(base: str, project: str) -> tuple[list[IndexFile], int]:
    """(the files `project_files` keeps, how many links it dropped)."""
    page = f"{base.rstrip('/')}/{project}/"
    try:
        body, ctype, final = _read_page(page)
    except OSError as e:
        if getattr(e, "code", None) == 404 or isinstance(e, FileNotFoundError):
            raise Missing.retry(f"wheel index {base}: no project {project!r} (its page {page} is missing; "
                                "a mirror that has not synced it yet? tried again on the next attempt)") from None
        raise Unreachable.at(page, f"wheel index {base}: cannot read {page}: {why(e)}") from None
    except Fail as e:
        if e.transient:     # a page cut or too slow: the way there, as above
            raise Unreachable.at(page, e.message) from None
        raise
    files = checked.parsed(body, JSON_TYPE in ctype, base, project,   # bounded, every name checked
                           lambda j: _from_json(body, final, page) if j else _from_html(body, final))
    scheme = urllib.parse.urlparse(final).scheme
    allowed = {"file", "http", "https"} if scheme == "file" else {scheme, "https"} & {"http", "https"}
    kept = [f for f in files if urllib.parse.urlparse(f.url).scheme in allowed]
    return kept, len(files) - len(kept)


def find_file(base: str, project: str, filename: str) -> tuple[str, str | None, int | None]:
    """(absolute URL, sha256 the index states or None, size or None) of `filename` on `project`'s
    page; `filename` as the lock records it (unquoted)."""
    wanted = urllib.parse.unquote(filename)
    files, dropped = _listing(base, project)
    for f in files:
        if f.filename == wanted:
            return f.url, f.sha256, f.size
    if dropped and not files:   # not a lag: the index points at places no client of it may follow
        raise Fail.permanent(f"wheel index {base}: the page of {project!r} links its files only where fdlenv "
                             "does not follow (file:// from a remote index); the index is broken or hostile")
    raise empty_page(base, project) if not files else Fail.retry(
        f"wheel index {base}: {project!r} lists {len(files)} file(s) but not {wanted}, which the lock names; "
        "a mirror that has not synced it yet is tried again on the next attempt (if it never comes, the "
        "index does not serve what the lock names: point --mirror at one that does, or re-lock)")


def empty_page(base: str, project: str) -> Fail:
    """A project page with no files at all: a cold or syncing mirror (transient)."""
    return Fail.retry(f"wheel index {base}: the page of {project!r} lists no files (a mirror still "
                      "fetching it from upstream?); tried again on the next attempt")


# ---------------------------------------------------------------- file sizes

SIZE_WAIT = 5.0     # seconds a HEAD may take (or FDLENV_REQUEST_TIMEOUT, if shorter): it only orders


def sizes_of(urls: list[str]) -> list[int | None]:
    """The size of each file whose page states none, asked side by side: a local file's by
    `stat`, a remote one's by a HEAD (its Content-Length), within SIZE_WAIT s. A size only
    orders the downloads, so any failure (no answer, an error status, no length) is None."""
    if len(urls) < 2:
        return [_size_of(u) for u in urls]
    from ..base.deadlines import threads

    with threads(min(16, len(urls)), "fdlenv-size") as pool:   # a stop leaves the HEADs, never waits
        return list(pool.map(_size_of, urls))


def _size_of(url: str) -> int | None:
    import http.client

    parsed = urllib.parse.urlparse(url.partition("#")[0])
    try:
        if parsed.scheme in ("", "file"):
            return os.stat(urllib.parse.unquote(parsed.path)).st_size
        if parsed.scheme not in ("http", "https"):
            return None
        with open_url(parsed.geturl(), {"Accept-Encoding": "identity"}, "HEAD", SIZE_WAIT) as resp:
            resp.fdlenv_watch.cancel()   # a HEAD has no body: its deadline ends with its headers
            length = resp.headers.get("Content-Length", "")
            return int(length) if resp.status == 200 and length.isdigit() else None
    except (OSError, ValueError, http.client.HTTPException, Fail):
        return None


# ---------------------------------------------------------------- core metadata

def core_metadata(f: IndexFile, listing: list[str] | None = None) -> bytes:
    """The METADATA of wheel `f`: its PEP 658 file when the index has one, else read out of the
    wheel's zip with range requests (a local file is opened in place); then the wheel's member
    names are appended to `listing` when given (what a variant check reads)."""
    if f.metadata is not None:
        url = f.url.partition("#")[0] + ".metadata"
        body = _fetch(url)
        if f.metadata:
            import hashlib

            if hashlib.sha256(body).hexdigest() != f.metadata:
                raise Fail.permanent(f"wheel index: {url} does not match the sha256 its page states")
        return body
    from .lazywheel import metadata_from_zip

    return metadata_from_zip(f.url, f.filename, listing)


def _fetch(url: str) -> bytes:
    parsed = urllib.parse.urlparse(url)
    try:
        if parsed.scheme == "file":
            with open(urllib.parse.unquote(parsed.path), "rb") as fh:
                return read_all(fh, META_LIMIT, url)
        return fetch(url, META_LIMIT)[0]
    except OSError as e:
        if getattr(e, "code", None) == 404 or isinstance(e, FileNotFoundError):
            raise Fail.retry(f"wheel index: {url} is missing though its page says it exists (a mirror "
                             "syncing it?); tried again on the next attempt") from None
        raise Unreachable.at(url, f"wheel index: cannot read {url}: {why(e)}") from None
