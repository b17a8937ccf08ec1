"""The paramiko tunnel through a real OpenSSH sshd on 127.0.0.1."""

from __future__ import annotations

import os
import socket
import threading

import pytest

from fdlenv.config.model import SshConfig
from fdlenv.base.errors import Fail
from fdlenv.join.tunnel import open_tunnel, parse_options, plan_hop


@pytest.fixture()
def controller():
    """A loopback TCP listener standing for the controller: replies 'ack:' + upper-case."""
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()
    stop = threading.Event()

    def handle(c):
        with c:
            try:
                c.sendall(b"hello-from-controller\n")
                while True:
                    d = c.recv(65536)
                    if not d:
                        break
                    c.sendall(d.upper())
            except OSError:  # the readiness check's connection is dropped at once (a reset)
                pass

    def serve():
        while not stop.is_set():
            try:
                c, _ = srv.accept()
            except OSError:
                return
            threading.Thread(target=handle, args=(c,), daemon=True).start()

    threading.Thread(target=serve, daemon=True).start()
    yield srv.getsockname()[1]
    stop.set()
    srv.close()


def hop(s, tmp_path, *options, identity=True, known=None):
    kh = known if known is not None else s.known_hosts
    return SshConfig(target=s.host, port=s.port, user=s.user,
                     identity_file=str(s.identity) if identity else None,
                     options=(f"UserKnownHostsFile={kh}", "IdentitiesOnly=yes", *options))


def recv_all(c):
    buf = b""
    while True:
        d = c.recv(65536)
        if not d:
            return buf
        buf += d


def test_bytes_go_both_ways_through_the_tunnel(sshd_server, tmp_path, controller):
    notes = []
    with open_tunnel(hop(sshd_server, tmp_path), "127.0.0.1", controller,
                     say=notes.append, home=str(tmp_path)) as tun:
        assert tun.alive and tun.local_port != controller
        assert any(f"(local port {tun.local_port})" in n for n in notes)
        payload = bytes(range(256)) * 2000  # 512 KiB, every byte value
        results = []
        for _ in range(2):  # two connections over one tunnel
            with socket.create_connection(("127.0.0.1", tun.local_port), timeout=10) as c:
                c.sendall(payload)
                c.shutdown(socket.SHUT_WR)
                results.append(recv_all(c))
        for got in results:
            assert got.startswith(b"hello-from-controller\n")
            assert got[len(b"hello-from-controller\n"):] == payload.upper()
        port = tun.local_port
    with pytest.raises(OSError):
        socket.create_connection(("127.0.0.1", port), timeout=1).close()


def test_a_new_host_is_accepted_and_remembered_by_default(sshd_server, tmp_path, controller):
    kh = tmp_path / "fresh" / "known_hosts"
    notes = []
    open_tunnel(hop(sshd_server, tmp_path, "StrictHostKeyChecking=accept-new", known=kh),
                "127.0.0.1", controller, say=notes.append, home=str(tmp_path)).close()
    line = kh.read_text().strip()
    assert line.startswith(f"[127.0.0.1]:{sshd_server.port} ssh-ed25519 ")
    assert line.split()[2] == sshd_server.host_key_line.split()[2]
    assert any("accepted and remembered" in n for n in notes)
    # second time: known, nothing appended
    open_tunnel(hop(sshd_server, tmp_path, "StrictHostKeyChecking=accept-new", known=kh),
                "127.0.0.1", controller, say=notes.append, home=str(tmp_path)).close()
    assert kh.read_text().strip() == line


def test_strict_checking_refuses_an_unknown_host(sshd_server, tmp_path, controller):
    kh = tmp_path / "empty_known_hosts"
    kh.write_text("")
    with pytest.raises(Fail) as e:
        open_tunnel(hop(sshd_server, tmp_path, "StrictHostKeyChecking=yes", known=kh),
                    "127.0.0.1", controller, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient and "not in" in e.value.message and "127.0.0.1" in e.value.message
    assert kh.read_text() == ""


def test_a_changed_host_key_is_refused(sshd_server, tmp_path, controller):
    import paramiko
    other = paramiko.Ed25519Key.from_private_key_file(str(sshd_server.identity))
    kh = tmp_path / "wrong_known_hosts"
    kh.write_text(f"[127.0.0.1]:{sshd_server.port} ssh-ed25519 {other.get_base64()}\n")
    with pytest.raises(Fail) as e:
        open_tunnel(hop(sshd_server, tmp_path, known=kh), "127.0.0.1", controller,
                    say=lambda m: None, home=str(tmp_path))
    assert e.value.transient and "changed" in e.value.message


def test_auth_failure_is_transient_and_names_the_host(sshd_server, tmp_path, controller):
    import paramiko
    wrong = tmp_path / "wrong_key"
    paramiko.Ed25519Key.from_private_key_file(str(sshd_server.identity))  # sanity
    import subprocess
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(wrong)], check=True)
    cfg = hop(sshd_server, tmp_path)
    cfg = SshConfig(target=cfg.target, port=cfg.port, user=cfg.user, identity_file=str(wrong),
                    options=cfg.options)
    with pytest.raises(Fail) as e:
        open_tunnel(cfg, "127.0.0.1", controller, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient and "authentication failed" in e.value.message
    assert f"127.0.0.1:{sshd_server.port}" in e.value.message


def test_an_unreachable_ssh_host_is_transient(tmp_path, controller):
    from sshd import free_port
    port = free_port()
    with pytest.raises(Fail) as e:
        open_tunnel(SshConfig(target="127.0.0.1", port=port,
                              options=(f"UserKnownHostsFile={tmp_path / 'kh'}",)),
                    "127.0.0.1", controller, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient and f"cannot reach 127.0.0.1:{port}" in e.value.message


def test_a_controller_the_hop_cannot_reach_is_transient(sshd_server, tmp_path):
    from sshd import free_port
    dead = free_port()
    with pytest.raises(Fail) as e:
        open_tunnel(hop(sshd_server, tmp_path), "127.0.0.1", dead, say=lambda m: None,
                    home=str(tmp_path))
    assert e.value.transient and f"127.0.0.1:{dead}" in e.value.message


def test_a_missing_identity_file_is_transient_and_names_the_file_and_the_flag(tmp_path):
    # as flodl's ssh fails and the dial retries: a key provisioned after boot must not stop the box
    with pytest.raises(Fail) as e:
        open_tunnel(SshConfig(target="127.0.0.1", port=1, identity_file=str(tmp_path / "nokey")),
                    "127.0.0.1", 1, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient and e.value.exit_code == 1
    assert str(tmp_path / "nokey") in e.value.message
    assert "join.ssh.identity_file / --identity" in e.value.message


def test_options_first_value_wins_and_are_honoured(tmp_path):
    opts = parse_options(["Port=2000", "port 3000", " User = alice", "BatchMode=no",
                          "Frobnicate=yes"])
    assert opts["port"] == "2000" and opts["user"] == "alice"
    plan = plan_hop(SshConfig(target="gw", port=22, user="bob", identity_file="~/k",
                              options=("Port=2000", "ServerAliveInterval=7",
                                       "StrictHostKeyChecking=no", "ConnectTimeout=3",
                                       "BatchMode=no", "Frobnicate=yes")),
                    home=str(tmp_path), ssh_config_path=str(tmp_path / "none"))
    assert (plan.port, plan.user, plan.keepalive, plan.strict, plan.connect_timeout) == \
        (2000, "bob", 7, "no", 3.0)
    assert plan.key_files == [os.path.expanduser("~/k")]
    assert plan.known_hosts == [str(tmp_path / ".ssh" / "known_hosts")]
    assert any("BatchMode=no" in w for w in plan.warnings)
    assert any("frobnicate" in w for w in plan.warnings)


def test_ssh_config_supplies_what_the_spec_leaves_out(tmp_path):
    cfg = tmp_path / "ssh_config"
    cfg.write_text("Host gw\n  HostName 10.1.2.3\n  User carol\n  Port 2022\n")
    plan = plan_hop(SshConfig(target="gw"), home=str(tmp_path), ssh_config_path=str(cfg))
    assert (plan.hostname, plan.user, plan.port) == ("10.1.2.3", "carol", 2022)
    plan = plan_hop(SshConfig(target="gw", user="dave", port=2),
                    home=str(tmp_path), ssh_config_path=str(cfg))
    assert (plan.user, plan.port) == ("dave", 2)


def test_a_forward_closes_its_socket_even_when_the_channel_close_raises():
    import socket as socketlib
    import threading

    from fdlenv.join import tunnel as T

    class Chan:
        def __init__(self):
            self.a, self.b = socketlib.socketpair()

        def fileno(self):
            return self.a.fileno()

        def close(self):
            self.a.close()
            raise EOFError("the transport is gone")     # what paramiko raises on a dead transport

    chan = Chan()

    class Transport:
        def open_channel(self, *a, **k):
            return chan

    class Client:
        def get_transport(self):
            return Transport()

    fwd = object.__new__(T.Tunnel)
    fwd._client, fwd.dest, fwd.label, fwd._say = Client(), ("127.0.0.1", 1), "t", lambda m: None
    fwd._closed, fwd._conns, fwd._lock, fwd.forwarded = threading.Event(), set(), threading.Lock(), 0
    fwd._closed.set()                          # the tunnel is closing: the pump ends at once
    sock, other = socketlib.socketpair()
    fwd._serve(sock, ("127.0.0.1", 2))
    assert sock.fileno() == -1 and not fwd._conns
    other.close()
    chan.b.close()
