"""Channel mirrors: `--mirror NAME=URL` and `fdlenv: mirrors:` in fdl.yml.

A lock records real package URLs; a fleet behind a firewall fetches the same
bytes from its own mirror. Rewriting is safe because every archive is
hash-checked against the lock after fetching. NAME is either a channel name
(the last path component of a channel URL: `conda-forge`, `flodl`) or a full
channel URL prefix; the longest match wins. The same map names wheel indexes
(`pypi`, `pytorch`), read by `fdlenv.index.pipindex`.
"""

from __future__ import annotations

from ..base.errors import Fail
from ..base.record import Record

ACCEPTED = ("NAME=URL, e.g. conda-forge=https://mirror.example/conda-forge, flodl=file:///srv/flodl, "
            "pypi=https://mirror.example/simple or pytorch=https://mirror.example/whl")


def parse(pairs: list[str] | tuple[str, ...] | None, base: dict[str, str] | None = None) -> dict[str, str]:
    """Flags over fdl.yml: later pairs override `base` entries of the same name."""
    out = dict(base or {})
    for pair in pairs or []:
        name, sep, url = pair.partition("=")
        if not sep or not name.strip() or "://" not in url:
            raise Fail.permanent(f"--mirror: bad value {pair!r}; accepted: {ACCEPTED}")
        out[name.strip().rstrip("/")] = url.strip().rstrip("/")
    return out


def split_url(url: str) -> tuple[str, str, str]:
    """`<channel>/<subdir>/<file>` -> (channel, subdir, file)."""
    head, _, filename = url.rpartition("/")
    channel, _, subdir = head.rpartition("/")
    return channel, subdir, filename


def channel_name(channel_url: str) -> str:
    return channel_url.rstrip("/").rpartition("/")[2]


def resolve_channel(channel: str, mirrors: dict[str, str]) -> str:
    """A channel as an env file names it (alias or URL) -> the URL to use."""
    channel = channel.rstrip("/")
    if channel in mirrors:
        return mirrors[channel]
    name = channel_name(channel)
    if "://" in channel and name in mirrors:
        return mirrors[name]
    return channel


def rewrite(url: str, mirrors: dict[str, str]) -> str:
    if not mirrors:
        return url
    channel, subdir, filename = split_url(url)
    mapped = resolve_channel(channel, mirrors)
    return url if mapped == channel else f"{mapped}/{subdir}/{filename}"


class ChannelMap(Record):
    """Mirrors plus bare-name aliases (`flodl` -> the home's local channel).

    An alias only ever names a bare channel name: a URL that happens to end in
    `/flodl` is left alone unless a mirror maps it.
    """

    mirrors: dict[str, str]   # name or URL prefix -> URL (`--mirror`, `fdlenv: mirrors:`)
    aliases: dict[str, str]   # bare channel name -> URL

    def resolve(self, channel: str) -> str:
        url = resolve_channel(channel, self.mirrors)
        return self.aliases.get(url, url) if "://" not in url else url
