"""One ssh hop: a byte stream in, an authenticated paramiko client out, every failure a Fail.

Why apart from the tunnel: the tunnel chains hops (the first over TCP or a
ProxyCommand, each next one over the previous hop's direct-tcpip channel), and
what a hop does, and how its failures are named, is the same at every position.

Order within a hop: the stream (`open_stream`: a TCP connect, a spawned
ProxyCommand, or a direct-tcpip channel through the previous hop) -> the ssh
handshake, preferring the host key types known_hosts holds for the hop ->
the host key check (`knownhosts.KnownHosts.check` under the hop's key name:
HostKeyAlias, else `[host]:port`; a certificate, where a `@cert-authority` line
covers that name, is checked against it (`hostcert`) and accepted or refused
for good, exit 2, nothing remembered; revoked and changed keys are refused, a
new one follows StrictHostKeyChecking: accept-new remembers it, yes refuses, no
accepts) -> public-key authentication (never a password or a passphrase) ->
keepalive. paramiko loads no host keys of its own: every key goes through our
check, so wildcard, hashed and multi-key lines all count.

A ProxyCommand runs as OpenSSH runs it, `/bin/sh -c "exec <command>"`, with its
stderr kept in a temporary file so a failure can quote it; it is terminated
and reaped when the hop closes.

Failures (`failure`): everything paramiko, the socket layer or the proxy can
raise becomes a Fail. Transient, as flodl's ssh exiting 255 is: auth failure,
unreachable or unresolvable host, timeouts, refused channels, handshake and
protocol errors, unknown/changed/revoked host keys, a ProxyCommand that dies.
Permanent: a ProxyCommand that cannot run at all (exit 126/127, no /bin/sh), and a
host certificate a `@cert-authority` line refuses (a person re-signs it or fixes the line).
"""

from __future__ import annotations

import base64
import hashlib
import os
import select
import socket
import subprocess
import tempfile
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

from ..base.errors import Fail
from .hostcert import CERT_SUFFIX
from .sshplan import HopPlan

if TYPE_CHECKING:
    import paramiko

    from .knownhosts import KnownHosts

    # What a hop's ssh session rides on: TCP, the previous hop's channel, or a ProxyCommand
    Stream = socket.socket | paramiko.Channel | paramiko.ProxyCommand

_SHELL = "/bin/sh"


@runtime_checkable
class _Relay(Protocol):
    """What `failure` reads of a ProxyCommand stream (`_proxy_class`'s): how it ended, what it said."""

    def exit_code(self, wait: float = 0.0) -> int | None: ...

    def stderr_tail(self) -> str: ...


def quiet_library_logs() -> None:
    """No paramiko log lines on stderr: its transport thread logs every failure, traceback
    included, at ERROR, and with no logging configured Python prints those. Each failure
    reaches the user once, as the Fail we name it; a program that configures logging
    still gets the records."""
    import logging

    log = logging.getLogger("paramiko")
    if not any(isinstance(h, logging.NullHandler) for h in log.handlers):
        log.addHandler(logging.NullHandler())


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH's SHA256:... form."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def _proxy_class() -> type[paramiko.ProxyCommand]:
    import paramiko

    class Proxy(paramiko.ProxyCommand):
        """paramiko's ProxyCommand, run through the shell, ending on EOF, stderr kept."""

        def __init__(self, command: str):  # no super(): it splits with shlex, pipes stderr
            self.command = command
            self.cmd = [_SHELL, "-c", f"exec {command}"]
            self.err = tempfile.TemporaryFile()
            try:
                self.process = subprocess.Popen(self.cmd, stdin=subprocess.PIPE,
                                                stdout=subprocess.PIPE, stderr=self.err,
                                                bufsize=0)
            except BaseException:
                self.err.close()
                raise
            assert self.process.stdout is not None   # stdout=PIPE: typed Optional, never None
            self.out = self.process.stdout
            self.timeout = None

        def recv(self, size: int) -> bytes:
            try:
                r, _, _ = select.select([self.out], [], [], self.timeout)
                data = os.read(self.out.fileno(), size) if r else None
            except (OSError, ValueError) as e:
                raise paramiko.ProxyCommandFailure(self.command, str(e)) from None
            if data is None:
                raise TimeoutError()
            return data  # b"" at EOF: paramiko sees the proxy end instead of waiting it out

        def exit_code(self, wait: float = 0.0) -> int | None:
            try:
                return self.process.wait(timeout=wait) if wait else self.process.poll()
            except subprocess.TimeoutExpired:
                return None

        def stderr_tail(self) -> str:
            try:
                self.err.seek(0)
                lines = self.err.read()[-4000:].decode("utf-8", "replace").strip().splitlines()
            except (OSError, ValueError):
                return ""
            return " | ".join(line.strip() for line in lines[-3:] if line.strip())

        def close(self) -> None:
            if self.process.poll() is None:
                try:
                    self.process.terminate()
                    self.process.wait(timeout=2)
                except subprocess.TimeoutExpired:
                    self.process.kill()
                    self.process.wait()
                except OSError:
                    pass
            for f in (self.process.stdin, self.out, self.err):
                try:
                    if f is not None:
                        f.close()
                except OSError:
                    pass
    return Proxy


def open_stream(hop: HopPlan, prev: paramiko.SSHClient | None, what: str) -> Stream:
    """The byte stream under `hop`: previous hop's channel, a ProxyCommand, or TCP."""
    if prev is not None:
        try:
            transport = prev.get_transport()
            assert transport is not None   # a connected hop's (connect_hop)
            return transport.open_channel(
                "direct-tcpip", (hop.hostname, hop.port), ("127.0.0.1", 0),
                timeout=hop.connect_timeout)
        except Exception as e:  # noqa: BLE001 - ChannelException, SSHException, EOFError
            raise Fail.retry(f"{what}: cannot reach the next hop {hop.hostname}:{hop.port} "
                             f"(forward refused: {_why(e)})") from None
    if hop.proxy_command:
        try:
            return _proxy_class()(hop.proxy_command)
        except OSError as e:
            raise Fail.permanent(f"{what}: cannot run ProxyCommand {hop.proxy_command!r}: "
                                 f"{e.strerror or e}") from None
    try:
        return socket.create_connection((hop.hostname, hop.port), timeout=hop.connect_timeout)
    except Exception as e:  # noqa: BLE001
        raise failure(e, hop, what) from None


def _why(e: BaseException) -> str:
    if e.__class__.__name__ == "ChannelException":
        return getattr(e, "text", "") or str(e)
    return str(e) or type(e).__name__


def _preferring(types: list[str], certs: bool = False) -> Callable[..., paramiko.Transport]:
    """A transport factory whose handshake asks for the key types on record first; `certs`
    (a `@cert-authority` line covers the host): every certificate type before them, as
    OpenSSH asks where it holds a CA for the host. `kw`: what paramiko's connect hands its
    factory (the keywords vary between its releases), handed on as they come."""
    import paramiko

    def make(sock: Stream, **kw: Any) -> paramiko.Transport:
        t = paramiko.Transport(sock, **kw)
        if types or certs:
            opts = t.get_security_options()
            have = list(opts.key_types)
            # _key_info: the key types paramiko can verify, private (its stubs leave it out)
            verifiable = t._key_info if certs else {}  # type: ignore[attr-defined]
            want = [f"{n}{CERT_SUFFIX}" for n in have if f"{n}{CERT_SUFFIX}" in verifiable]
            for ty in types:
                for n in (("rsa-sha2-512", "rsa-sha2-256", "ssh-rsa") if ty == "ssh-rsa"
                          else (ty,)):
                    if n in have and n not in want:
                        want.append(n)
            opts.key_types = want + [n for n in have if n not in want]
        return t
    return make


def _policy(hop: HopPlan, known: KnownHosts, say: Callable[[str], None],
            what: str) -> paramiko.MissingHostKeyPolicy:
    import paramiko

    class Check(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client: paramiko.SSHClient, hostname: str, key: paramiko.PKey) -> None:
            name = hop.key_name
            blob = getattr(key, "public_blob", None)
            if blob is not None and blob.key_type.endswith(CERT_SUFFIX) and known.cas_for(name):
                principal = hop.host_key_alias or hop.hostname.lower()
                why = known.certificate(name, principal, blob.key_blob, key)
                if why is None:
                    return          # certified by a CA on record: nothing to remember
                raise Fail.permanent(
                    f"{what}: the host certificate of {name} is refused: {why}; a @cert-authority line in "
                    f"known_hosts covers {name}, so only a valid certificate from it is accepted "
                    f"(re-sign the host key: ssh-keygen -s CA_KEY -h -n {principal} HOST_KEY.pub)")
            verdict = known.check(name, key)
            if verdict == "known":
                return
            got = f"{key.get_name()} {fingerprint(key)}"
            if verdict == "revoked":
                raise Fail.retry(f"{what}: the host key of {name} ({got}) is marked @revoked in "
                                 "known_hosts; refusing")
            if verdict == "changed":
                raise Fail.retry(
                    f"{what}: the host key of {name} changed (got {got}, known_hosts holds "
                    f"{', '.join(known.key_types(name))}); refusing. If the host was "
                    f"re-installed: ssh-keygen -R '{name}' -f {hop.known_hosts[0]}")
            if hop.strict == "no":
                return
            if hop.strict == "yes":
                raise Fail.retry(
                    f"{what}: host key for {name} is not in {' '.join(hop.known_hosts)} and "
                    f"StrictHostKeyChecking is on; add it (ssh-keyscan -p {hop.port} "
                    f"{hop.hostname} >> {hop.known_hosts[0]}) or use "
                    "StrictHostKeyChecking=accept-new")
            try:
                known.remember(hop.known_hosts[0], name, key)
            except OSError as e:
                say(f"ssh host {name}: new host key {got} accepted but not remembered: "
                    f"cannot write {hop.known_hosts[0]} ({e.strerror or e})")
                return
            say(f"ssh host {name}: new host key {got} accepted and remembered "
                f"in {hop.known_hosts[0]} (StrictHostKeyChecking=accept-new)")
    return Check()


def connect_hop(hop: HopPlan, stream: Stream, known: KnownHosts, say: Callable[[str], None],
                what: str) -> paramiko.SSHClient:
    """Handshake, host key check and authentication over `stream`; the client, or a Fail."""
    import paramiko

    client = paramiko.SSHClient()
    client.set_missing_host_key_policy(_policy(hop, known, say, what))
    t = hop.connect_timeout
    try:
        client.connect(
            hop.hostname, port=hop.port, username=hop.user, sock=stream,
            # a list of key files: paramiko takes one or several, its stubs say one
            key_filename=hop.key_files or None,  # type: ignore[arg-type]
            timeout=t, banner_timeout=t, auth_timeout=t,
            channel_timeout=t, allow_agent=hop.look_for_keys, look_for_keys=hop.look_for_keys,
            compress=hop.compress, passphrase=None,
            transport_factory=_preferring(known.key_types(hop.key_name), bool(known.cas_for(hop.key_name))))
        transport = client.get_transport()
        assert transport is not None   # connect() made it
        transport.set_keepalive(hop.keepalive)
    except BaseException as e:
        # name it first: a ProxyCommand's exit status is read before close() ends it
        fail = failure(e, hop, what, stream) if isinstance(e, Exception) else None
        client.close()
        try:
            stream.close()
        except Exception:  # noqa: BLE001
            pass
        if fail is None:
            raise
        raise fail from None
    return client


def failure(e: Exception, hop: HopPlan, what: str, stream: Stream | None = None) -> Fail:
    """Name a library exception by its cause; transient unless no retry can help."""
    import paramiko

    if isinstance(e, Fail):
        return e
    if isinstance(stream, _Relay) and not isinstance(e, paramiko.AuthenticationException):
        status = stream.exit_code(wait=1.0)
        if status:  # 0: the far side ended the relay, named below like a plain socket
            tail = stream.stderr_tail()
            msg = (f"{what}: ProxyCommand {hop.proxy_command!r} exited with status {status}"
                   + (f": {tail}" if tail else ""))
            if status in (126, 127):
                return Fail.permanent(msg + " (not found or not executable)")
            return Fail.retry(msg)
    where = f"{hop.hostname}:{hop.port}"
    if isinstance(e, paramiko.BadHostKeyException):
        return Fail.retry(f"{what}: the host key of {hop.key_name} changed (got "
                          f"{e.key.get_name()} {fingerprint(e.key)}); refusing")
    if isinstance(e, paramiko.PasswordRequiredException):
        return Fail.retry(f"{what}: the identity file is passphrase-protected and fdlenv never "
                          "asks for a passphrase; use a key without one "
                          "(join.ssh.identity_file / --identity)")
    if isinstance(e, paramiko.AuthenticationException):
        return Fail.retry(f"{what}: authentication failed ({e}); check the user and the "
                          "key (join.ssh.identity_file / --identity) and the host's "
                          "authorized_keys")
    if isinstance(e, paramiko.ProxyCommandFailure):
        return Fail.retry(f"{what}: ProxyCommand {hop.proxy_command!r} failed: {e.error}")
    if isinstance(e, paramiko.ChannelException):
        return Fail.retry(f"{what}: channel refused: {_why(e)}")
    if isinstance(e, (socket.timeout, TimeoutError)):
        return Fail.retry(f"{what}: cannot reach {where}: timed out after "
                          f"{hop.connect_timeout:g}s")
    if isinstance(e, socket.gaierror):
        return Fail.retry(f"{what}: cannot reach {where}: cannot resolve {hop.hostname} ({e})")
    if isinstance(e, OSError):
        return Fail.retry(f"{what}: cannot reach {where}: {e.strerror or e}")
    if isinstance(e, EOFError):
        return Fail.retry(f"{what}: {where} closed the connection during the ssh handshake")
    if isinstance(e, paramiko.SSHException):
        why = str(e).replace("banner[", "banner: [")     # paramiko glues the socket error on
        return Fail.retry(f"{what}: ssh handshake with {where} failed: {why}")
    return Fail.retry(f"{what}: unexpected ssh failure with {where} ({type(e).__name__}: {e})")
