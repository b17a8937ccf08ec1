"""The one-line string grammars of the join settings, and the local host name.

Why it exists: the same few spellings arrive from the command line and from
fdl.yml (a controller address, an ssh hop, a device list, a GPU memory share),
and each must be read, and refused, the same way wherever it comes from.
`schema` uses `check_share` on the file; `app.joinsettings` the rest on flags.

What order matters: an address is `host`, `host:port`, `[v6]` or `[v6]:port`;
the brackets are looked for first, so a bare IPv6 address (more than one `:`)
is refused rather than split at its last colon. In `[user@]host[:port]` the
user is cut at the first `@`, then the rest is read as an address. A host is
kept without its brackets (what a socket connect takes); `bracketed` puts them
back wherever a `host:port` or a URL is written.
`split_host_port` is also what `rsync://` and `sshfs://` specs use.
Every mistake is `Fail.permanent`; the callers of `check_share` and
`split_host_port` put the file or the flag it came from in front of it.
"""

from __future__ import annotations

import math
import os
from typing import Any
from collections.abc import Mapping

from ..base.errors import Fail
from .model import DEFAULT_CONTROLLER_PORT, SshConfig


def type_name(v: Any) -> str:
    """A value's type as an error message names it (`null` for None)."""
    return "null" if v is None else type(v).__name__


def check_share(v: Any, where: str) -> float:
    """gpu_ram_share: a finite number >= 0 (values over 1.0 are legal by design)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise Fail.permanent(f"{where}: expected a number, got {type_name(v)}")
    f = float(v)
    if not math.isfinite(f) or f < 0:
        raise Fail.permanent(f"{where}: must be a finite number >= 0 (a share of host RAM, e.g. 0.5; "
                         f"over 1.0 is legal), got {v!r}")
    return f


def split_host_port(s: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port` -> (host without brackets, port or None).

    Fail.permanent(why) on anything else: a bare IPv6 address (fdl would split it at its last
    colon), an unclosed `[`, an empty host, a port outside 1-65535 (fdl takes port 0).
    The callers put the field's name and its accepted forms around `why`."""
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise Fail.permanent("unclosed `[`")
        host, rest = s[1:end], s[end + 1:]
        if rest and not rest.startswith(":"):
            raise Fail.permanent(f"unexpected {rest!r} after `]`")
        port_s = rest[1:] if rest else None
    elif s.count(":") > 1:
        raise Fail.permanent("a bare IPv6 address: write it in brackets, e.g. [fe80::1] or [fe80::1]:PORT")
    elif ":" in s:
        host, port_s = s.rsplit(":", 1)
    else:
        host, port_s = s, None
    if not host.strip():
        raise Fail.permanent("empty host")
    if port_s is None:
        return host, None
    if not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise Fail.permanent(f"port {port_s!r} is not a number in 1-65535")
    return host, int(port_s)


def bracketed(host: str) -> str:
    """A host as it goes into `host:port` or a URL: an IPv6 address in brackets."""
    return f"[{host}]" if ":" in host else host


def parse_controller(s: str, where: str = "CONTROLLER") -> tuple[str, int]:
    """`host[:port]` as `fdl join`'s controller, default port 1337, plus IPv6 in brackets.
    `where` names the field in errors (CONTROLLER, join.controller)."""
    text = s.strip()
    if "://" in text:   # `http://ctrl:1337`: the agent dials plain TCP, no scheme
        scheme, _, rest = text.partition("://")
        bare = rest.rpartition("@")[2].split("/", 1)[0].split("?", 1)[0]   # no userinfo, path or query
        raise Fail.permanent(f"{where}: a controller is host[:port], not a URL: drop the {scheme}:// "
                             f"(the agent dials plain TCP), e.g. {bare or 'HOST:1337'}")
    try:
        host, port = split_host_port(text)
        if "@" in host:   # `fdlenv join @farm`: fdl would dial a host named "@farm"
            hint = (f" (an env overlay is chosen before the command: fdlenv {host} join)"
                    if host.startswith("@") else "")
            raise Fail.permanent(f"a host has no `@`{hint}")
    except Fail as e:
        raise Fail.permanent(f"{where}: invalid controller address {s!r}: expected host[:port] "
                             f"(an IPv6 host in brackets: [::1] or [::1]:1337); {e.message}") from None
    return host, DEFAULT_CONTROLLER_PORT if port is None else port


def parse_ssh_spec(s: str) -> SshConfig:
    """`--ssh [user@]host[:port]`: the user up to the first `@`, then host[:port] (IPv6 in
    brackets: `user@[::1]:2222`)."""
    user = None
    rest = s.strip()
    forms = "expected [user@]host[:port] (an IPv6 host in brackets: user@[::1]:2222)"
    if "@" in rest:
        user, rest = rest.split("@", 1)
        if not user:
            raise Fail.permanent(f"invalid --ssh {s!r}: empty user before `@`; {forms}")
    try:
        host, port = split_host_port(rest)
    except Fail as e:
        raise Fail.permanent(f"invalid --ssh {s!r}: {forms}; {e.message}") from None
    return SshConfig(target=host, port=port, user=user)


def parse_devices(s: str) -> tuple[int, ...] | None:
    """`--devices`: `all` (any case) = None; else a comma list of ids 0-255."""
    if s.strip().lower() == "all":
        return None
    out = []
    for piece in s.split(","):
        p = piece.strip()
        if not p.isdigit() or int(p) > 255:
            raise Fail.permanent(f"invalid --devices {s!r}: expected e.g. `0,1` or `all`")
        out.append(int(p))
    return tuple(out)


def devices_shown(field: str, ids: tuple[int, ...]) -> str:
    """How `field` wrote `ids`, for a message: `--devices 0,7`, `join.devices [0, 7]`."""
    return f"{field} {','.join(map(str, ids))}" if field.startswith("--") else f"{field} {list(ids)}"


def check_distinct(ids: tuple[int, ...] | None, field: str) -> tuple[int, ...] | None:
    """Device ids named once each (wrong on every box, so refused before any survey)."""
    if not ids:
        return ids
    twice = sorted({i for i in ids if ids.count(i) > 1})
    if twice:
        which = ", ".join(map(str, twice))
        raise Fail.permanent(f"{devices_shown(field, ids)}: device {which} named twice; accepted: all, or "
                             "distinct indices (e.g. 0,1)")
    return ids


def has_strict_host_key_option(options: tuple[str, ...] | list[str]) -> bool:
    return any(o.lstrip().lower().startswith("stricthostkeychecking") for o in options)


def local_hostname(environ: Mapping[str, str] | None = None) -> str:
    """The worker's name as flodl picks it: FLODL_HOST_NAME, else the kernel's host
    name (what `hostname` prints, without running it), else `unknown-host`."""
    env = os.environ if environ is None else environ
    v = (env.get("FLODL_HOST_NAME") or "").strip()
    if v:
        return v
    return os.uname().nodename.strip() or "unknown-host"
