"""Wheel indexes by name: how a lock names a wheel without naming a host.

A lock entry for an index wheel records `pip+index://<index>/<project>/<file>`
and its sha256, never the absolute URL the index happened to serve (no file in
fdlenv names a registry's host, and the same lock must work behind a mirror).
At realise time the index name becomes a base URL, the project's page of the
PEP 691 (JSON) or PEP 503 (HTML) simple API is read, and the file is found
there by name; the sha256 of the lock then makes any index safe.

Index names and where their URL comes from, first hit wins:
- `--mirror NAME=URL` / `fdlenv: mirrors:` for the exact name (`pypi`,
  `pytorch/cu126`), else for its longest prefix (`pytorch=URL` serves
  `pytorch/cu126` as `URL/cu126`, the layout of PyTorch's wheel index);
- `pypi` only: the index your pip is configured with (`PIP_INDEX_URL`, pip's
  config files, else pip's own default).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import urllib.parse

from .errors import Fail

SCHEME = "pip+index://"
DEFAULT = "pypi"
JSON_TYPE = "application/vnd.pypi.simple.v1+json"
_HREF = re.compile(r"""<a\s[^>]*href\s*=\s*["']([^"']+)["']""", re.I)


def entry_url(index: str, project: str, filename: str) -> str:
    return f"{SCHEME}{index}/{normalize(project)}/{filename}"


def is_entry_url(url: str) -> bool:
    return url.startswith(SCHEME)


def parse_entry_url(url: str) -> tuple[str, str, str]:
    """`pip+index://pytorch/cu126/torch/torch-...whl` -> (`pytorch/cu126`, `torch`, file name)."""
    index, _, rest = url[len(SCHEME):].rpartition("/")
    index, _, project = index.rpartition("/")
    if not (index and project and rest):
        raise Fail.permanent(f"--lock: bad wheel URL {url!r}; accepted: {SCHEME}INDEX/PROJECT/FILE.whl")
    return index, project, rest


def normalize(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def base_url(index: str, mirrors: dict[str, str] | None = None) -> str:
    """The simple-API root URL serving index name `index`."""
    mirrors = mirrors or {}
    parts = index.split("/")
    for n in range(len(parts), 0, -1):
        head = "/".join(parts[:n])
        if head in mirrors:
            return "/".join([mirrors[head].rstrip("/"), *parts[n:]])
    if index == DEFAULT:
        return configured_pip_index()
    raise Fail.permanent(
        f"--mirror: no URL for the wheel index {index!r}; give --mirror {parts[0]}=URL "
        f"(or `fdlenv: mirrors: {{{parts[0]}: URL}}` in fdl.yml)"
        + (", URL being the root of PyTorch's wheel index (the --index-url its install page "
           "gives, without the variant folder)" if parts[0] == "pytorch" else ""))


_PIP_CONFIG = r"""
import json
try:
    from pip._internal.configuration import Configuration
    c = Configuration(isolated=False); c.load()
    vals = dict(c.items())
except Exception:
    vals = {}
url = None
for k in (":env:.index-url", "install.index-url", "download.index-url", "global.index-url"):
    if vals.get(k):
        url = vals[k]; break
if url is None:
    from pip._internal.models.index import PyPI
    url = PyPI.simple_url
print(json.dumps(url.split()[0]))
"""


def configured_pip_index() -> str:
    """The index URL pip would use here (asked of pip itself: its config files and PIP_INDEX_URL)."""
    env = os.environ.get("PIP_INDEX_URL")
    if env:
        return env.split()[0]
    try:
        proc = subprocess.run([sys.executable, "-c", _PIP_CONFIG], capture_output=True, text=True, timeout=60)
        if proc.returncode == 0:
            return json.loads(proc.stdout)
    except (OSError, ValueError, subprocess.TimeoutExpired):
        pass
    raise Fail.permanent("--mirror: cannot ask pip for its index URL (is pip installed beside fdlenv?); "
                         "give --mirror pypi=URL")


def _read(url: str) -> tuple[bytes, str, str]:
    """(body, content type, final URL) of an index page; file:// directories read index.html."""
    import urllib.request

    parsed = urllib.parse.urlparse(url)
    if parsed.scheme == "file":
        path = urllib.parse.unquote(parsed.path)
        if os.path.isdir(path):
            page = os.path.join(path, "index.html")
            if os.path.isfile(page):
                with open(page, "rb") as f:
                    return f.read(), "text/html", url.rstrip("/") + "/"
            links = "".join(f'<a href="{urllib.parse.quote(n)}">{n}</a>' for n in sorted(os.listdir(path)))
            return links.encode(), "text/html", url.rstrip("/") + "/"
        raise FileNotFoundError(path)
    req = urllib.request.Request(url, headers={"Accept": f"{JSON_TYPE}, text/html;q=0.01"})
    with urllib.request.urlopen(req, timeout=60) as resp:
        return resp.read(), resp.headers.get("Content-Type", ""), resp.geturl()


def find_file(base: str, project: str, filename: str) -> tuple[str, str | None, int | None]:
    """(absolute URL, sha256 the index states or None, size or None) of `filename` on `project`'s page."""
    page = f"{base.rstrip('/')}/{normalize(project)}/"
    try:
        body, ctype, final = _read(page)
    except OSError as e:
        code = getattr(e, "code", None)
        if code == 404 or isinstance(e, FileNotFoundError):
            raise Fail.permanent(f"wheel index {base}: no project {project!r} (its page {page} is missing)") from None
        raise Fail.retry(f"wheel index {base}: cannot read {page}: {e}") from None
    if JSON_TYPE in ctype:
        try:
            for f in json.loads(body).get("files", []):
                if f.get("filename") == filename:
                    return urllib.parse.urljoin(final, f["url"]), (f.get("hashes") or {}).get("sha256"), f.get("size")
        except (ValueError, KeyError, TypeError, AttributeError) as e:
            raise Fail.permanent(f"wheel index {base}: {page} is not a PEP 691 project page ({e})") from None
    else:
        for href in _HREF.findall(body.decode("utf-8", "replace")):
            href = href.replace("&amp;", "&")
            url, _, frag = href.partition("#")
            if urllib.parse.unquote(url.rsplit("/", 1)[-1]) == filename:
                sha = frag[len("sha256="):] if frag.startswith("sha256=") else None
                return urllib.parse.urljoin(final, url), sha, None
    raise Fail.permanent(f"wheel index {base}: {project!r} has no file {filename}; "
                         "the index does not serve what the lock names (a mirror that lags?)")
