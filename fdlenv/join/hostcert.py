"""OpenSSH host certificates, checked as OpenSSH checks them against a `@cert-authority` line.

Why our own: paramiko negotiates the `*-cert-v01@openssh.com` host key types and proves
the host holds the certified key, but reads nothing else of the certificate (its
`PublicBlob` keeps the bytes). A host that presents a certificate is trusted here only
when all of these hold, in this order (PROTOCOL.certkeys; sshconnect.c's check_host_cert):
1. the blob parses: its type, nonce, the key's public fields (ed25519, ecdsa, rsa), serial,
   certificate type, key id, principals, validity, critical options, extensions, reserved,
   the signature key and the signature, nothing after it;
2. the certificate type is host (2), not user;
3. the signature key is a CA on record for the host's known_hosts name, not `@revoked`;
4. the CA's signature over every byte before the signature field verifies (paramiko's key
   classes: the CA's own type, rsa-sha2-* included);
5. now lies in [valid after, valid before);
6. the name dialed (HostKeyAlias, else the HostName, without the port) is one of the
   principals; an empty list admits every name, as OpenSSH's does;
7. no critical options (none are defined for host certificates: OpenSSH refuses any).
`check` answers None where it holds, else why not, one phrase. A certificate that fails is
refused whatever StrictHostKeyChecking says (`sshhop`): OpenSSH 9.2 under accept-new falls
back to the plain key and appends it, which would let an impersonating host in on first use.
"""

from __future__ import annotations

import time

HOST_CERT = 2
CERT_SUFFIX = "-cert-v01@openssh.com"
# The public fields of each key type inside a certificate: strings (s) or mpints (m).
_FIELDS = {"ssh-ed25519": "s", "ecdsa-sha2-nistp256": "ss", "ecdsa-sha2-nistp384": "ss",
           "ecdsa-sha2-nistp521": "ss", "ssh-rsa": "mm"}


class _Reader:
    """SSH wire fields, read strictly: a field that runs past the end raises (paramiko's
    `Message` pads a short read with zeros)."""

    def __init__(self, data: bytes):
        self.data, self.at = data, 0

    def take(self, n: int) -> bytes:
        if n > len(self.data) - self.at:
            raise ValueError("a field runs past the end")
        self.at += n
        return self.data[self.at - n:self.at]

    def uint(self, size: int) -> int:
        return int.from_bytes(self.take(size), "big")

    def string(self) -> bytes:
        return self.take(self.uint(4))

    def text(self) -> str:
        return self.string().decode("utf-8")


class Cert:
    """The fields of a host certificate that the checks read."""

    def __init__(self, blob: bytes):
        r = _Reader(blob)
        self.type = r.text()
        plain = self.type.removesuffix(CERT_SUFFIX)
        if plain == self.type or plain not in _FIELDS:
            raise ValueError(f"certificate type {self.type[:60]!r} is not supported")
        r.string()                                          # nonce
        for _ in _FIELDS[plain]:
            r.string()                                      # a string or an mpint: the same framing
        self.serial = r.uint(8)
        self.cert_type = r.uint(4)
        self.key_id = r.text()
        names = _Reader(r.string())
        self.principals: list[str] = []
        while names.at < len(names.data):
            self.principals.append(names.text())
        self.valid_after, self.valid_before = r.uint(8), r.uint(8)
        self.critical = r.string()
        r.string()                                          # extensions
        r.string()                                          # reserved
        self.ca = r.string()
        self.signed = blob[:r.at]
        self.signature = r.string()
        if r.at != len(blob) or not self.ca or not self.signature:
            raise ValueError("bytes after its signature" if r.at != len(blob) else "no CA key or no signature")


def check(blob: bytes, principal: str, cas: list[bytes], revoked: list[bytes], now: float | None = None
          ) -> str | None:
    """None where `blob` is a valid host certificate for `principal`, signed by one of `cas`
    (key blobs); else why not."""
    from paramiko import PKey
    from paramiko.message import Message

    try:
        cert = Cert(blob)
    except ValueError as e:   # UnicodeDecodeError included
        return f"its certificate does not parse ({str(e)[:80]})"
    if cert.cert_type != HOST_CERT:
        return f"its certificate is of type {cert.cert_type}, not a host certificate"
    if cert.ca in revoked:
        return "the CA that signed its certificate is marked @revoked"
    if cert.ca not in cas:
        return "its certificate is signed by a CA known_hosts does not name for it"
    try:
        ca_type = Message(cert.ca).get_text()
        ca = PKey.from_type_string(ca_type, cert.ca)
        good = ca.verify_ssh_sig(cert.signed, Message(cert.signature))
    except Exception:  # noqa: BLE001 - an unknown CA type, a malformed signature
        good = False
    if not good:
        return "the CA's signature on its certificate does not verify"
    moment = int(time.time() if now is None else now)
    if moment < cert.valid_after:
        return f"its certificate is not valid before {_when(cert.valid_after)}"
    if moment >= cert.valid_before:
        return f"its certificate expired at {_when(cert.valid_before)}"
    if cert.principals and principal not in cert.principals:
        return (f"{principal} is not among its certificate's principals "
                f"({', '.join(cert.principals[:6])}{', ...' if len(cert.principals) > 6 else ''})")
    if cert.critical:
        return "its certificate carries critical options (none are defined for a host)"
    return None


def _when(seconds: int) -> str:
    if seconds >= 2**63:
        return "forever"
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(min(seconds, 253402300799)))
