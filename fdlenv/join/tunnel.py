"""The ssh tunnel, in-process: an `ssh -L` equivalent built on paramiko.

Why in-process: no `ssh` binary to spawn, no port-reservation race (the local
listener is ours from bind to close), and failures arrive as typed exceptions
we can name instead of "look at ssh's stderr above".

Order that matters (as flodl's `fdl join` does): bind the local listener on 127.0.0.1,
connect + verify the host key + authenticate, then prove the ssh host reaches
the controller with one direct-tcpip channel — all before the agent starts.
The tunnel lives exactly one attempt.

Host keys: known_hosts (`UserKnownHostsFile`, default ~/.ssh/known_hosts, plus
/etc/ssh/ssh_known_hosts). `StrictHostKeyChecking`: accept-new (the resolver's
default) accepts and remembers a new host; yes/ask refuse an unknown host;
no/off accept without remembering. A changed key is always refused. There is
never an interactive prompt, and no password or passphrase is ever asked for.

Failures are transient (auth failure, unreachable host, refused forward,
unknown or changed host key: the next attempt may work), except a missing
identity file, which is permanent: a misprovisioned box should stop.
paramiko is imported inside `open_tunnel`, never at module level.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from ..config.model import SshConfig
from ..errors import Fail
from ..progress import say as _say

TUNNEL_READY_BUDGET = 20.0     # connect + auth + forward check, seconds
DEFAULT_KEEPALIVE = 30          # ServerAliveInterval
DEFAULT_SSH_PORT = 22

# Options OpenSSH has that make no sense in-process; accepted silently.
_SILENT = {"exitonforwardfailure", "serveralivecountmax", "tcpkeepalive", "loglevel",
           "addressfamily", "controlmaster", "controlpath", "controlpersist",
           "requesttty", "forwardagent", "forwardx11", "userknownhostsfile2"}
_SUPPORTED = {"stricthostkeychecking", "userknownhostsfile", "identityfile", "port", "user",
              "hostname", "connecttimeout", "serveraliveinterval", "batchmode",
              "identitiesonly", "compression", "hostkeyalias"}


def parse_options(options) -> dict[str, str]:
    """`Key=Value` / `Key Value` strings -> {lowercase key: value}; first value wins (OpenSSH)."""
    out: dict[str, str] = {}
    for opt in options:
        s = opt.strip()
        if "=" in s:
            k, v = s.split("=", 1)
        else:
            k, _, v = s.partition(" ")
        k, v = k.strip().lower(), v.strip()
        if k and k not in out:
            out[k] = v
    return out


@dataclass
class HopPlan:
    """What the tunnel will do, derived purely from the SshConfig (+ ~/.ssh/config)."""
    label: str                 # how messages name the hop: user@host:port
    hostname: str
    port: int
    user: str | None
    key_files: list[str]
    known_hosts: list[str]     # the first is where new keys are remembered
    strict: str                # accept-new | yes | no
    connect_timeout: float
    keepalive: int
    look_for_keys: bool
    compress: bool
    host_key_alias: str | None
    warnings: list[str] = field(default_factory=list)


def plan_hop(ssh: SshConfig, *, ssh_config_path: str | None = None,
             home: str | None = None) -> HopPlan:
    """User options > the spec's port/user/identity > ~/.ssh/config > defaults."""
    home = home or os.path.expanduser("~")
    opts = parse_options(ssh.options)
    target = ssh.target or ""
    conf: dict = {}
    cfg_path = ssh_config_path or os.path.join(home, ".ssh", "config")
    if os.path.isfile(cfg_path):
        try:
            import paramiko  # noqa: PLC0415

            conf = paramiko.SSHConfig.from_path(cfg_path).lookup(target)
        except Exception:  # noqa: BLE001 - a broken ssh config must not stop the dial
            conf = {}
    warnings = []
    for k, v in opts.items():
        if k == "batchmode" and v.lower() != "yes":
            warnings.append(f'ssh host "{target}": ssh.options set BatchMode={v}; fdlenv '
                            "never prompts (keys only, no passwords), so it has no effect")
        elif k not in _SUPPORTED and k not in _SILENT:
            warnings.append(f'ssh host "{target}": ssh option {k!r} is not supported by '
                            "fdlenv's in-process tunnel; ignored")

    def first(*vals):
        return next((v for v in vals if v not in (None, "")), None)

    hostname = first(opts.get("hostname"), conf.get("hostname") if conf.get("hostname") != target
                     else None, target)
    port = int(first(opts.get("port"), ssh.port, conf.get("port"), DEFAULT_SSH_PORT))
    user = first(opts.get("user"), ssh.user, conf.get("user"))
    keys = []
    for k in (opts.get("identityfile"), ssh.identity_file, *(conf.get("identityfile") or [])):
        if k and k not in keys:
            keys.append(k)
    kh = first(opts.get("userknownhostsfile"),
               " ".join(conf["userknownhostsfile"].split()) if conf.get("userknownhostsfile")
               else None, os.path.join(home, ".ssh", "known_hosts"))
    known = [os.path.expanduser(p) for p in kh.split()]
    strict_raw = (first(opts.get("stricthostkeychecking"), conf.get("stricthostkeychecking"),
                        "accept-new") or "").lower()
    strict = {"no": "no", "off": "no", "accept-new": "accept-new",
              "yes": "yes", "ask": "yes"}.get(strict_raw, "yes")
    return HopPlan(
        label=SshConfig(target=hostname, port=port if port != DEFAULT_SSH_PORT else None,
                        user=user).display(),
        hostname=hostname, port=port, user=user,
        key_files=[os.path.expanduser(k) for k in keys],
        known_hosts=known, strict=strict,
        connect_timeout=float(first(opts.get("connecttimeout"), conf.get("connecttimeout"),
                                    TUNNEL_READY_BUDGET)),
        keepalive=int(first(opts.get("serveraliveinterval"), DEFAULT_KEEPALIVE)),
        look_for_keys=first(opts.get("identitiesonly"), conf.get("identitiesonly"),
                            "no").lower() != "yes",
        compress=first(opts.get("compression"), "no").lower() == "yes",
        host_key_alias=first(opts.get("hostkeyalias"), conf.get("hostkeyalias")),
        warnings=warnings,
    )


class Tunnel:
    """A live forward 127.0.0.1:<local_port> -> controller, through one ssh hop."""

    def __init__(self, client, listener: socket.socket, dest: tuple[str, int], label: str,
                 say: Callable[[str], None] = _say):
        self._client = client
        self._say = say
        self._listener = listener
        self.dest = dest
        self.label = label
        self.local_port = listener.getsockname()[1]
        self._closed = threading.Event()
        self._conns: set[socket.socket] = set()
        self._lock = threading.Lock()
        self.forwarded = 0
        self._thread = threading.Thread(target=self._accept_loop, name="tunnel-accept",
                                        daemon=True)
        self._thread.start()

    @property
    def alive(self) -> bool:
        t = self._client.get_transport()
        return not self._closed.is_set() and t is not None and t.is_active()

    def _accept_loop(self) -> None:
        while not self._closed.is_set():
            try:
                r, _, _ = select.select([self._listener], [], [], 0.2)
                if not r:
                    continue
                sock, peer = self._listener.accept()
            except (OSError, ValueError):
                return
            threading.Thread(target=self._serve, args=(sock, peer), name="tunnel-conn",
                             daemon=True).start()

    def _serve(self, sock: socket.socket, peer) -> None:
        try:
            transport = self._client.get_transport()
            chan = transport.open_channel("direct-tcpip", self.dest, peer,
                                          timeout=TUNNEL_READY_BUDGET)
        except Exception as e:  # noqa: BLE001
            self._say(f"tunnel {self.label}: cannot open a forward to "
                 f"{self.dest[0]}:{self.dest[1]}: {e}")
            sock.close()
            return
        with self._lock:
            self._conns.add(sock)
            self.forwarded += 1
        try:
            _pump(sock, chan, self._closed)
        finally:
            with self._lock:
                self._conns.discard(sock)
            chan.close()
            sock.close()

    def close(self) -> None:
        if self._closed.is_set():
            return
        self._closed.set()
        try:
            self._listener.close()
        except OSError:
            pass
        with self._lock:
            conns = list(self._conns)
        for s in conns:
            try:
                s.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass
        self._client.close()
        self._thread.join(timeout=2.0)

    def __enter__(self) -> "Tunnel":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _pump(sock: socket.socket, chan, closed: threading.Event) -> None:
    """Copy bytes both ways until either side closes (half-closes are passed on)."""
    sock_open = chan_open = True
    while (sock_open or chan_open) and not closed.is_set():
        watch = ([sock] if sock_open else []) + ([chan] if chan_open else [])
        r, _, _ = select.select(watch, [], [], 0.5)
        if sock in r:
            data = sock.recv(65536)
            if data:
                chan.sendall(data)
            else:
                sock_open = False
                chan.shutdown_write()
        if chan in r:
            data = chan.recv(65536)
            if data:
                sock.sendall(data)
            else:
                chan_open = False
                try:
                    sock.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
        if chan.exit_status_ready() or chan.closed:
            if not chan.recv_ready():
                break


def _host_key_policy(paramiko, plan: HopPlan, say):
    class Policy(paramiko.MissingHostKeyPolicy):
        def missing_host_key(self, client, hostname, key):
            if plan.strict == "no":
                return
            if plan.strict == "yes":
                raise Fail.retry(
                    f"ssh tunnel via {plan.label}: host key for {hostname} is not in "
                    f"{' '.join(plan.known_hosts)} and StrictHostKeyChecking is on; add it "
                    f"(ssh-keyscan -p {plan.port} {plan.hostname} >> {plan.known_hosts[0]}) "
                    "or use StrictHostKeyChecking=accept-new")
            path = Path(plan.known_hosts[0])
            path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
            line = paramiko.hostkeys.HostKeyEntry([hostname], key).to_line()
            fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            try:
                if os.fstat(fd).st_size:
                    with open(path, "rb") as f:
                        f.seek(-1, os.SEEK_END)
                        if f.read(1) != b"\n":
                            line = "\n" + line
                os.write(fd, line.encode())
            finally:
                os.close(fd)
            client.get_host_keys().add(hostname, key.get_name(), key)
            say(f"ssh host {hostname}: new host key {key.get_name()} accepted and remembered "
                f"in {path} (StrictHostKeyChecking=accept-new)")
    return Policy()


def open_tunnel(ssh: SshConfig, controller_host: str, controller_port: int, *,
                say: Callable[[str], None] = _say, ssh_config_path: str | None = None,
                home: str | None = None, check_forward: bool = True) -> Tunnel:
    """Bring the forward up and prove it works; raise Fail when it cannot."""
    import paramiko  # noqa: PLC0415 - the re-dial path without a hop never pays for it

    plan = plan_hop(ssh, ssh_config_path=ssh_config_path, home=home)
    for w in plan.warnings:
        say(w)
    for k in plan.key_files:
        if not os.path.isfile(k):
            raise Fail.permanent(f"ssh tunnel via {plan.label}: identity file {k} does not "
                                 "exist (join.ssh.identity_file / --identity)")
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
    except OSError as e:
        raise Fail.retry(f"cannot open a local tunnel port on 127.0.0.1: {e}") from None
    port = listener.getsockname()[1]
    say(f"opening tunnel {plan.label} -> {controller_host}:{controller_port} (local port {port})")

    client = paramiko.SSHClient()
    for kh in (*plan.known_hosts, "/etc/ssh/ssh_known_hosts"):
        if os.path.isfile(kh):
            try:
                client.get_host_keys().load(kh)
            except (OSError, paramiko.SSHException) as e:
                say(f"ignoring unreadable known_hosts {kh}: {e}")
    client.set_missing_host_key_policy(_host_key_policy(paramiko, plan, say))
    what = f"ssh tunnel via {plan.label}"
    try:
        try:
            client.connect(
                plan.hostname, port=plan.port, username=plan.user,
                key_filename=plan.key_files or None, timeout=plan.connect_timeout,
                banner_timeout=plan.connect_timeout, auth_timeout=plan.connect_timeout,
                channel_timeout=plan.connect_timeout,
                allow_agent=plan.look_for_keys, look_for_keys=plan.look_for_keys,
                compress=plan.compress, passphrase=None)
        except Fail:
            raise
        except paramiko.BadHostKeyException as e:
            raise Fail.retry(f"{what}: the host key of {e.hostname} changed (got "
                             f"{e.key.get_name()} {e.key.get_fingerprint().hex()}); refusing. "
                             f"If the host was re-installed, remove its line from "
                             f"{plan.known_hosts[0]}") from None
        except paramiko.AuthenticationException as e:
            raise Fail.retry(f"{what}: authentication failed ({e}); check the user and the "
                             "key (join.ssh.identity_file / --identity) and the host's "
                             "authorized_keys") from None
        except (socket.timeout, TimeoutError) as e:
            raise Fail.retry(f"{what}: cannot reach {plan.hostname}:{plan.port}: timed out "
                             f"after {plan.connect_timeout:g}s ({e})") from None
        except (OSError, paramiko.ssh_exception.NoValidConnectionsError) as e:
            raise Fail.retry(f"{what}: cannot reach {plan.hostname}:{plan.port}: {e}") from None
        except paramiko.SSHException as e:
            raise Fail.retry(f"{what}: ssh handshake failed: {e}") from None
        transport = client.get_transport()
        transport.set_keepalive(plan.keepalive)
        if check_forward:
            try:
                chan = transport.open_channel("direct-tcpip", (controller_host, controller_port),
                                              ("127.0.0.1", port), timeout=TUNNEL_READY_BUDGET)
                chan.close()
            except Exception as e:  # noqa: BLE001 - ChannelException, SSHException, timeout
                raise Fail.retry(f"{what}: the ssh host cannot reach the controller at "
                                 f"{controller_host}:{controller_port} (forward refused: "
                                 f"{e}); is the controller up?") from None
    except BaseException:
        client.close()
        listener.close()
        raise
    return Tunnel(client, listener, (controller_host, controller_port), plan.label, say=say)
