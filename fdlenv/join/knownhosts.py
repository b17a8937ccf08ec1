"""known_hosts, read the way OpenSSH reads it, and no line of it can stop a dial.

Why our own reader: paramiko's `HostKeys.load` opens the file as text (one
non-UTF-8 byte raises UnicodeDecodeError), lets a bad base64 key escape as
`InvalidHostKey`, reads an `@cert-authority`/`@revoked` marker as the host
names, matches no `*`/`?` pattern and keeps one key per (name, type). A box
must not stop dialing over one odd line in a file it did not write.

Order: each file (the user's, then the global ones) is read as bytes, line by
line. Blank and `#` lines are passed over. A line that is not UTF-8, carries
an unknown marker, has too few fields, a key type paramiko does not know, or
key data that does not parse is skipped; each file with skipped lines gets ONE
note naming them. `@revoked` lines are kept: a host offering a revoked key is
refused. `@cert-authority` lines are kept apart (`cas`): a host they cover is
asked for its certificate first (`cas_for`), and `certificate` checks it
(`hostcert`: principal, validity, the CA's signature, host type); a certified
host is known without a line of its own, so nothing is appended for it.

`check(name, key)` answers for the name a hop is looked up under (`host` on
port 22, `[host]:port` otherwise, or its HostKeyAlias): "revoked", "known", "changed"
(a key of the same type, or only keys of other types, are on record) or
"new". Names match as OpenSSH matches them: plain names and `*`/`?` patterns
case-insensitively, `!pattern` negates the line, hashed `|1|salt|hmac` entries
by their HMAC. `remember` appends one line and never rewrites the file, so the
lines we skipped stay as they were for the tools that can read them.
"""

from __future__ import annotations

import base64
import binascii
import hmac
import os
import re
from pathlib import Path
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    import paramiko

_SHOWN = 6   # skipped lines named in a note; the rest are counted


def _pattern_match(pattern: str, name: str) -> bool:
    rx = "".join(".*" if c == "*" else "." if c == "?" else re.escape(c) for c in pattern)
    return re.fullmatch(rx, name, re.IGNORECASE | re.DOTALL) is not None


def _hash_match(entry: str, name: str) -> bool:
    parts = entry.split("|")          # "", "1", salt, hmac
    if len(parts) != 4:
        return False
    try:
        salt = base64.b64decode(parts[2], validate=True)
        want = base64.b64decode(parts[3], validate=True)
    except (binascii.Error, ValueError):
        return False
    got = hmac.new(salt, name.encode(), "sha1").digest()
    return hmac.compare_digest(got, want)


def names_match(names: list[str], name: str) -> bool:
    """Whether a known_hosts host field (already split on commas) covers `name`."""
    hit = False
    for p in names:
        if p.startswith("|1|"):
            hit = hit or _hash_match(p, name)
        elif p.startswith("!"):
            if _pattern_match(p[1:], name):
                return False
        elif _pattern_match(p, name):
            hit = True
    return hit


class KnownHosts:
    """Every usable key line of the files read, plus the @revoked ones."""

    def __init__(self) -> None:
        self.entries: list[tuple[list[str], paramiko.PKey]] = []    # (host patterns, key)
        self.revoked: list[tuple[list[str], bytes]] = []     # (host patterns, key blob)
        self.cas: list[tuple[list[str], bytes]] = []         # @cert-authority: (host patterns, CA key blob)

    def cas_for(self, name: str) -> list[bytes]:
        """The CA keys `@cert-authority` lines name for `name`, in file order."""
        return [blob for names, blob in self.cas if names_match(names, name)]

    def certificate(self, name: str, principal: str, cert: bytes, key: paramiko.PKey) -> str | None:
        """None where `cert` (the blob the host presented, certifying `key`) is a valid host
        certificate for `principal` from a CA on record for `name`; else why not."""
        from . import hostcert

        revoked = [b for n, b in self.revoked if names_match(n, name)]
        if key.asbytes() in revoked or cert in revoked:
            return "its certified key is marked @revoked"
        return hostcert.check(cert, principal, self.cas_for(name), revoked)

    def keys_for(self, name: str) -> list[paramiko.PKey]:
        return [key for names, key in self.entries if names_match(names, name)]

    def key_types(self, name: str) -> list[str]:
        """Types on record for `name`, in file order (the handshake prefers them)."""
        out: list[str] = []
        for key in self.keys_for(name):
            if key.get_name() not in out:
                out.append(key.get_name())
        return out

    def check(self, name: str, key: paramiko.PKey) -> str:
        blob = key.asbytes()
        if any(b == blob and names_match(n, name) for n, b in self.revoked):
            return "revoked"
        known = self.keys_for(name)
        if any(k.asbytes() == blob for k in known):
            return "known"
        return "changed" if known else "new"

    def remember(self, path: str, name: str, key: paramiko.PKey) -> None:
        """Append `name type base64` to `path` (created 0600, its folder 0700); never rewrite."""
        p = Path(path)
        p.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        line = f"{name} {key.get_name()} {key.get_base64()}\n"
        fd = os.open(p, os.O_RDWR | os.O_APPEND | os.O_CREAT, 0o600)
        try:
            size = os.fstat(fd).st_size
            if size and os.pread(fd, 1, size - 1) != b"\n":
                line = "\n" + line
            os.write(fd, line.encode())
        finally:
            os.close(fd)
        self.entries.append(([name], key))


def _parse_line(raw: bytes, kh: KnownHosts) -> str | None:
    """Add one line to `kh`; return why it was skipped, or None when it was used or blank."""
    import paramiko  # only when a tunnel is being opened (`open_tunnel` has imported it)

    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        return "not UTF-8"
    if not text or text.startswith("#"):
        return None
    fields = text.split()
    marker = None
    if fields[0].startswith("@"):
        marker, fields = fields[0], fields[1:]
        if marker not in ("@revoked", "@cert-authority"):
            return f"unknown marker {marker}"
    if len(fields) < 3:
        return "too few fields for host names, key type and key"
    names, ktype, data = fields[0].split(","), fields[1], fields[2]
    if marker == "@revoked":
        try:
            kh.revoked.append((names, base64.b64decode(data, validate=True)))
        except (binascii.Error, ValueError):
            return "@revoked with key data that is not base64"
        return None
    if marker == "@cert-authority":
        try:
            blob = base64.b64decode(data, validate=True)
            paramiko.PKey.from_type_string(ktype, blob)
        except Exception:  # noqa: BLE001 - binascii.Error, SSHException, UnknownKeyType, ...
            return f"@cert-authority with {ktype} key data that does not parse"
        kh.cas.append((names, blob))
        return None
    try:
        entry = paramiko.hostkeys.HostKeyEntry.from_line(f"{fields[0]} {ktype} {data}")
    except Exception:  # noqa: BLE001 - InvalidHostKey, SSHException, ValueError, ...
        return f"{ktype} key data that does not parse"
    if entry is None or entry.key is None:
        return f"key type {ktype} is not supported"
    kh.entries.append((names, entry.key))
    return None


def load(paths: Iterable[str], say: Callable[[str], None]) -> KnownHosts:
    """Read every file of `paths` that exists; unusable lines become one note per file."""
    kh = KnownHosts()
    for path in paths:
        try:
            data = Path(path).read_bytes()
        except FileNotFoundError:
            continue
        except OSError as e:
            say(f"ignoring known_hosts {path}: cannot read it ({e.strerror or e})")
            continue
        skipped = []
        for lineno, raw in enumerate(data.split(b"\n"), 1):
            why = _parse_line(raw, kh)
            if why:
                skipped.append(f"line {lineno} ({why})")
        if skipped:
            more = f", and {len(skipped) - _SHOWN} more" if len(skipped) > _SHOWN else ""
            say(f"known_hosts {path}: skipped {len(skipped)} line(s) fdlenv cannot use: "
                f"{', '.join(skipped[:_SHOWN])}{more}")
    return kh
