"""The ssh tunnel, in-process: an `ssh -L` (and `-J`/ProxyCommand) equivalent on paramiko.

Why in-process: no `ssh` binary to spawn, no port-reservation race (the local
listener is ours from bind to close), and failures arrive as typed exceptions
we can name instead of "look at ssh's stderr above".

Order that matters (as flodl's `fdl join` does): plan the route (sshplan:
options, ~/.ssh/config, ProxyJump/ProxyCommand), check the join's identity
files exist, bind the local listener on 127.0.0.1, read known_hosts once
(knownhosts: tolerant of lines it cannot use), then open the hops in route
order (sshhop: the first over TCP or its ProxyCommand, each next one through
the previous hop's direct-tcpip channel; each verified against known_hosts and
authenticated on its own), then prove the last hop reaches the controller with
one direct-tcpip channel, all before the agent starts. The tunnel lives exactly
one attempt; closing it closes the hops last to first.

Host keys: known_hosts (`UserKnownHostsFile`, default ~/.ssh/known_hosts, plus
`GlobalKnownHostsFile`, default /etc/ssh/ssh_known_hosts{,2}), looked up under
the hop's HostKeyAlias when it has one. `StrictHostKeyChecking`, the same for
every hop: accept-new (the resolver's default) accepts and remembers a new
host; yes/ask refuse an unknown host; no/off accept without remembering. A
changed or @revoked key is always refused, naming the hop. There is never an
interactive prompt, and no password or passphrase is ever asked for.

Failures are transient, as flodl's ssh failing is (the dial retries): a
missing identity file (a key provisioned after boot must not stop the box),
auth failure, unreachable host, refused forward, unknown or changed host key,
any paramiko/socket error. Permanent: what no retry fixes, i.e. a malformed
ProxyJump, a ProxyJump loop, an unknown %-token, a ProxyCommand that cannot run.
paramiko is imported inside `open_tunnel`, never at module level.
"""

from __future__ import annotations

import os
import select
import socket
import threading
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING

from ..config.model import SshConfig
from ..base.errors import Fail
from ..base.progress import say as _say
from . import knownhosts
from .sshhop import connect_hop, failure, open_stream, quiet_library_logs
from .sshplan import TUNNEL_READY_BUDGET, HopPlan, parse_options, plan_hop

if TYPE_CHECKING:
    import paramiko

__all__ = ["Tunnel", "open_tunnel", "plan_hop", "parse_options", "HopPlan"]


class Tunnel:
    """A live forward 127.0.0.1:<local_port> -> controller, through the route's ssh hops."""

    def __init__(self, clients: Iterable[paramiko.SSHClient], listener: socket.socket,
                 dest: tuple[str, int], label: str, say: Callable[[str], None] = _say):
        self._clients = list(clients)       # route order: jump hops, then the target
        self._client = self._clients[-1]
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
        if self._closed.is_set():
            return False
        ts = [c.get_transport() for c in self._clients]
        return all(t is not None and t.is_active() for t in ts)

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

    def _serve(self, sock: socket.socket, peer: tuple[str, int]) -> None:
        try:
            transport = self._client.get_transport()
            assert transport is not None   # a connected hop's (sshhop.connect_hop)
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
        except Exception:  # noqa: BLE001 - a reset or a closed hop ends this connection only
            pass
        finally:
            with self._lock:
                self._conns.discard(sock)
            try:
                chan.close()    # paramiko may raise here (EOFError on a transport already gone)
            except Exception:  # noqa: BLE001 - the socket below is closed whatever the channel does
                pass
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
        for c in reversed(self._clients):   # the target first, then the hops it rode on
            c.close()
        self._thread.join(timeout=2.0)

    def __enter__(self) -> Tunnel:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def _pump(sock: socket.socket, chan: paramiko.Channel, closed: threading.Event) -> None:
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


def open_tunnel(ssh: SshConfig, controller_host: str, controller_port: int, *,
                say: Callable[[str], None] = _say, ssh_config_path: str | None = None,
                home: str | None = None, check_forward: bool = True) -> Tunnel:
    """Bring the forward up (through every hop of the route) and prove it works, or raise Fail."""
    import paramiko  # noqa: F401 - first, before a port is bound: the re-dial path without a hop never pays for it

    quiet_library_logs()
    plan = plan_hop(ssh, ssh_config_path=ssh_config_path, home=home)
    for w in plan.warnings:
        say(w)
    for k in plan.required_keys:
        if not os.path.isfile(k):
            raise Fail.retry(f"ssh tunnel via {plan.label}: identity file {k} does not exist "
                             "(join.ssh.identity_file / --identity); transient: a key "
                             "provisioned later is picked up by the next dial")
    try:
        listener = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
    except OSError as e:
        raise Fail.retry(f"cannot open a local tunnel port on 127.0.0.1: {e}") from None
    port = listener.getsockname()[1]
    route = plan.route()
    via = f" via {', '.join(h.label for h in plan.via)}" if plan.via else ""
    say(f"opening tunnel {plan.label}{via} -> {controller_host}:{controller_port} "
        f"(local port {port})")
    what = f"ssh tunnel via {plan.label}"
    clients: list[paramiko.SSHClient] = []
    try:
        known = knownhosts.load([*plan.known_hosts, *plan.global_known_hosts], say)
        for i, hop in enumerate(route):
            hop_what = what if hop is plan else f"{what}: jump host {hop.label}"
            stream_what = f"{what}: jump host {route[i - 1].label}" if i else hop_what
            stream = open_stream(hop, clients[-1] if i else None, stream_what)
            clients.append(connect_hop(hop, stream, known, say, hop_what))
        if check_forward:
            try:
                transport = clients[-1].get_transport()
                assert transport is not None   # a connected hop's
                chan = transport.open_channel(
                    "direct-tcpip", (controller_host, controller_port), ("127.0.0.1", port),
                    timeout=TUNNEL_READY_BUDGET)
                chan.close()
            except Exception as e:  # noqa: BLE001 - ChannelException, SSHException, timeout
                raise Fail.retry(f"{what}: the ssh host cannot reach the controller at "
                                 f"{controller_host}:{controller_port} (forward refused: "
                                 f"{e}); is the controller up?") from None
    except BaseException as e:
        for c in reversed(clients):
            c.close()
        listener.close()
        if isinstance(e, Exception) and not isinstance(e, Fail):
            raise failure(e, plan, what) from None
        raise
    return Tunnel(clients, listener, (controller_host, controller_port), plan.label, say=say)
