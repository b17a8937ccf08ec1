"""Credentials for an index, as pip and uv take them, and the one rule for showing a URL.

Why one module: a private index's password reaches fdlenv inside a URL (`--mirror`,
`fdlenv: mirrors:`, pip's `index-url`), in `~/.netrc` or in uv's variables, and it must
reach the server that asked for it and nothing else: not another host, not a line a
person reads, not a file under the home. So, in order:
1. `split(url)`, called by `netread.open_url` on every URL it is given, takes the userinfo
   out (`user:password@`, a token alone, percent-encoded characters decoded) and keeps it
   by origin (scheme, host, port); what is requested is the URL without it (urllib would
   read `user:password@host` as a host and a port);
2. `authorization(url)` is the `Authorization: Basic` header for a request's origin: what a
   URL of that origin carried (so a redirect, a relative file link or a file beside the
   pages of the same index gets it), else what `remember` was told by a config reader
   (uv's `UV_INDEX_<NAME>_USERNAME`/`_PASSWORD`), else the machine of `$NETRC` or
   `~/.netrc` naming the host (its `default` entry included), as requests and uv read it.
   A host a page links to gets only its own: never the index's credentials. The header is
   added per request, below urllib's redirect handling, so a redirect to another host does
   not carry it either;
3. every secret it has seen (the password, a token, their percent-encoded forms) is kept
   in a set that `scrub` removes from any text, and `shown(url)` is a URL as a message may
   show it: no userinfo, no query string (a signed URL's token lives there). `scrub(text)`
   does both to every URL inside a line: the output layer (`output`, `progress`) passes
   each line through it, so a message built from a raw URL cannot leak one.
keyring (pip's `--keyring-provider`, uv's `keyring-provider`) is not read: it needs a
keyring backend and a subprocess per host; a fleet hands its password in by netrc or URL.
"""

from __future__ import annotations

import threading

_GUARD = threading.Lock()
_BY_ORIGIN: dict[str, tuple[str, str, str]] = {}    # origin -> (user, password, where it came from)
_SECRETS: set[str] = set()
_NETRC: dict[str, tuple[str, str] | None] = {}      # host -> (user, password) from netrc, or None
_DEFAULT_PORTS = {"http": 80, "https": 443}


def origin(url: str) -> str:
    """`scheme://host:port` of `url`, lowercased, the port made explicit."""
    import urllib.parse

    p = urllib.parse.urlsplit(url)
    try:
        port = p.port
    except ValueError:
        port = None
    host = (p.hostname or "").lower()
    return f"{p.scheme.lower()}://{host}:{port or _DEFAULT_PORTS.get(p.scheme.lower(), 0)}"


def _keep_secret(value: str) -> None:
    import urllib.parse

    if len(value) >= 3:
        _SECRETS.update({value, urllib.parse.quote(value, safe=""), urllib.parse.quote(value)})


def remember(url: str, user: str, password: str, source: str) -> None:
    """Credentials for the origin of `url`, from `source` (named when a server refuses them)."""
    with _GUARD:
        _BY_ORIGIN[origin(url)] = (user, password, source)
        _keep_secret(password if password else user)


def split(url: str, source: str = "the URL's user:password") -> str:
    """`url` without its userinfo, which is kept (for its origin) when there was one."""
    scheme, sep, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    if not sep or "@" not in netloc:
        return url
    import urllib.parse

    info, _, host = netloc.rpartition("@")
    user, colon, password = info.partition(":")
    with _GUARD:
        _keep_secret(info)
    clean = f"{scheme}://{host}{slash}{path}"
    remember(clean, urllib.parse.unquote(user), urllib.parse.unquote(password), source)
    return clean


def _netrc_file() -> str | None:
    import os

    given = os.environ.get("NETRC", "").strip()
    path = os.path.expanduser(given or "~/.netrc")
    return path if os.path.isfile(path) else None


def _from_netrc(host: str) -> tuple[str, str, str] | None:
    """(user, password, source) for `host` from netrc; a file that does not parse gives none,
    as requests reads it (pip's and uv's own way)."""
    path = _netrc_file()
    if path is None:
        return None
    with _GUARD:
        if host not in _NETRC:
            import netrc

            try:
                found = netrc.netrc(path).authenticators(host)   # an explicit path: no owner check
            except (OSError, netrc.NetrcParseError):
                found = None
            _NETRC[host] = (found[0] or "", found[2] or "") if found else None
            if found:
                _keep_secret(found[2] or found[0] or "")
        hit = _NETRC[host]
    return (hit[0], hit[1], f"the netrc file {path}") if hit else None


def credentials(url: str) -> tuple[str, str, str] | None:
    """(user, password, where from) for a request to `url`, or None."""
    import urllib.parse

    with _GUARD:
        kept = _BY_ORIGIN.get(origin(url))
    if kept is not None:
        return kept
    host = urllib.parse.urlsplit(url).hostname
    return _from_netrc(host) if host else None


def authorization(url: str) -> tuple[str, str] | None:
    """(the `Authorization` header's value, where its credentials came from) for `url`, or None."""
    found = credentials(url)
    if found is None:
        return None
    import base64

    user, password, source = found
    return "Basic " + base64.b64encode(f"{user}:{password}".encode()).decode("ascii"), source


def shown(url: str) -> str:
    """`url` as a person may see it: without userinfo and without a query string."""
    scheme, sep, rest = url.partition("://")
    if not sep:
        return url
    netloc, slash, path = rest.partition("/")
    netloc = netloc.rpartition("@")[2]
    path, _, frag = path.partition("#")
    path = path.partition("?")[0]
    netloc = netloc.partition("?")[0]
    return f"{scheme}://{netloc}{slash}{path}" + (f"#{frag}" if frag else "")


def scrub(text: str) -> str:
    """`text` with every URL in it `shown` and every secret seen replaced by `***`."""
    if "://" in text and ("@" in text or "?" in text):
        import re

        text = re.sub(r"[A-Za-z][A-Za-z0-9+.-]*://[^\s'\"<>]+", lambda m: shown(m.group(0)), text)
    with _GUARD:
        secrets = sorted(_SECRETS, key=len, reverse=True)
    for s in secrets:
        if s in text:
            text = text.replace(s, "***")
    return text


def has_secrets() -> bool:
    return bool(_SECRETS)
