"""What an index says, checked before anything uses or writes it.

Why it exists: every name an index gives (project, file, version, URL path) ends
up in a lock, a cache path or a download; every number and string it gives is
parsed by packaging, whose integer conversion refuses more than 4300 digits with
a ValueError (a bug, exit 1, where a hostile index is a person's to fix). So the
page is bounded before it is parsed, and each file after, in this order:

1. `page`: the body's link count (a byte count of `<a ` or `"filename"`, no parse)
   is at most `MAX_FILES`: a 100,000-file page is refused at the cost of a scan;
2. `files`, per file: its name is at most `NAME_LIMIT` bytes, holds no separator
   (`/`, `\\`), NUL or control character and is not `.`/`..`, also once and twice
   unquoted; a `.whl` name is a wheel name (PEP 427) of the project it is listed
   under, its version bounded (`text`); its URL's path climbs nowhere after
   unquoting once and twice; Requires-Python is a bounded string;
3. `text`: any string an index gives that packaging will parse (a version, a
   specifier, a Requires-Dist, Requires-Python) is at most `TEXT_LIMIT` characters
   with no digit run over `DIGITS_LIMIT`.

Any failure is permanent (exit 2: a mirror that syncs serves the same page), one
line naming the index, the project and the field, and raised before anything is
locked or fetched.
"""

from __future__ import annotations

import re
import urllib.parse
from typing import TYPE_CHECKING, Protocol, TypeVar

from ..base.errors import Fail

if TYPE_CHECKING:
    from collections.abc import Callable


class _File(Protocol):
    """What this module reads of simpleapi.IndexFile (named apart: simpleapi imports this)."""

    @property
    def filename(self) -> str: ...
    @property
    def url(self) -> str: ...
    @property
    def requires_python(self) -> str | None: ...


IndexFile = TypeVar("IndexFile", bound=_File)

MAX_FILES = 50_000      # files on one project page (the largest real ones: ~30,000)
NAME_LIMIT = 255        # a file name: what a filesystem holds
URL_LIMIT = 8192
TEXT_LIMIT = 1024       # a version, specifier or requirement (real ones: under 200)
DIGITS_LIMIT = 64       # one run of digits in any of them

_DIGITS = re.compile(r"\d{" + str(DIGITS_LIMIT + 1) + ",}")


def _hostile(base: str, project: str, what: str) -> Fail:
    return Fail.permanent(f"wheel index {base}: the page of {project!r} {what}; the index is broken or "
                          "hostile: nothing was locked or fetched")


def page(body: bytes, base: str, project: str, as_json: bool) -> None:
    """Step 1: at most MAX_FILES links, counted before the page is parsed."""
    n = body.count(b'"filename"') if as_json else body.count(b"<a ") + body.count(b"<A ")
    if n > MAX_FILES:
        raise _hostile(base, project, f"lists about {n} files, more than the {MAX_FILES} fdlenv reads "
                       "from one page")


def text(value: object, field: str, where: str) -> str:
    """Step 3: `value` as a string packaging may parse, or exit 2 naming `field` and `where`."""
    if not isinstance(value, str):
        raise Fail.permanent(f"{where}: {field} is {type(value).__name__}, not a string; the index is "
                             "broken or hostile")
    if len(value) > TEXT_LIMIT or _DIGITS.search(value):
        raise Fail.permanent(f"{where}: {field} {value[:60]!r}... is out of bounds (accepted: at most "
                             f"{TEXT_LIMIT} characters, no run of more than {DIGITS_LIMIT} digits); the "
                             "index is broken or hostile")
    return value


def _decoded(value: str) -> tuple[str, ...]:
    once = urllib.parse.unquote(value)
    return value, once, urllib.parse.unquote(once)


def _bad_name(name: str) -> str | None:
    if not isinstance(name, str) or not name:
        return "an empty file name"
    if len(name.encode("utf-8", "surrogatepass")) > NAME_LIMIT:
        return f"a file name of more than {NAME_LIMIT} bytes"
    for form in _decoded(name):
        if "/" in form or "\\" in form or any(ord(c) < 0x20 or ord(c) == 0x7f for c in form):
            return f"a file name with a separator or control character ({name[:120]!r})"
        if form in (".", ".."):
            return f"a file name that climbs ({name!r})"
    return None


def _bad_url(url: str) -> str | None:
    if len(url) > URL_LIMIT:
        return f"a URL of more than {URL_LIMIT} characters"
    try:
        path = urllib.parse.urlparse(url).path
    except ValueError:
        return "a URL that does not parse"
    for form in _decoded(path):
        if ".." in form.replace("\\", "/").split("/"):
            return f"a URL whose path climbs with '..' ({path[:120]!r})"
    return None


def _bad_wheel(name: str, project: str) -> str | None:
    from packaging.utils import InvalidWheelFilename, canonicalize_name, parse_wheel_filename

    version = name.split("-")[1] if name.count("-") >= 4 else ""
    if len(version) > 128 or _DIGITS.search(name):
        return f"a wheel whose version is out of bounds ({name[:80]!r}...)"
    try:
        listed, _, _, _ = parse_wheel_filename(name)
    except (InvalidWheelFilename, ValueError):
        return f"a file {name!r} that is not a wheel name (PEP 427)"
    if listed != canonicalize_name(project):
        return f"a wheel of another project ({name!r} is {listed!r}'s)"
    return None


def parsed(body: bytes, as_json: bool, base: str, project: str,
           parse: Callable[[bool], list[IndexFile]]) -> list[IndexFile]:
    """The files of a page: `page` on its bytes, then `parse(as_json)`, then `files`."""
    page(body, base, project, as_json)
    return files(parse(as_json), base, project)


def files(listed: list[IndexFile], base: str, project: str) -> list[IndexFile]:
    """Step 2: every file of a parsed page, or exit 2 naming the first that is not what a page of
    `project` may list."""
    if len(listed) > MAX_FILES:
        raise _hostile(base, project, f"lists {len(listed)} files, more than the {MAX_FILES} fdlenv "
                       "reads from one page")
    for f in listed:
        bad = _bad_name(f.filename) or _bad_url(f.url)
        if bad is None and f.filename.endswith(".whl"):
            bad = _bad_wheel(f.filename, project)
        if bad is None and f.requires_python is not None:
            text(f.requires_python, "data-requires-python", f"wheel index {base}: {f.filename}")
        if bad is not None:
            raise _hostile(base, project, f"lists {bad}")
    return listed
