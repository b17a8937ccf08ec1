"""ssh parity for what users put in their configs: ProxyJump, ProxyCommand, HostKeyAlias,
known_hosts lines paramiko cannot read, a missing identity file, library errors.

The real thing: three private OpenSSH servers on 127.0.0.1 (two jump hops and the
target, each with its own host key, all accepting one shared client key) and a
loopback TCP listener standing for the controller.
"""

from __future__ import annotations

import os
import shlex
import socket
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from fdlenv.config.model import SshConfig
from fdlenv.base.errors import Fail
from fdlenv.join import knownhosts
from fdlenv.join.sshhop import failure
from fdlenv.join.sshplan import HopPlan, parse_jump, plan_hop
from fdlenv.join.tunnel import open_tunnel
from sshd import free_port, loopback_controller, sshd_available, start_sshd

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.fixture(scope="module")
def chain(tmp_path_factory):
    """j1, j2 (jump hops) and tgt (the target), all accepting `shared` (a client key)."""
    reason = sshd_available()
    if reason:
        pytest.skip(reason)
    d = tmp_path_factory.mktemp("chain")
    shared = d / "shared_ed25519"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(shared)], check=True)
    pub = [f"{shared}.pub"]
    with start_sshd(d / "j1", authorize=pub) as j1, start_sshd(d / "j2", authorize=pub) as j2, \
            start_sshd(d / "tgt", authorize=pub) as tgt:
        yield {"j1": j1, "j2": j2, "tgt": tgt, "key": shared}


@pytest.fixture()
def controller():
    """A loopback listener for the controller: greets, then echoes upper-cased; counts clients."""
    def handle(c):
        c.sendall(b"hello-from-controller\n")
        while d := c.recv(65536):
            c.sendall(d.upper())

    with loopback_controller(handle, threaded=True) as served:
        yield served


def talk(tun) -> bytes:
    with socket.create_connection(("127.0.0.1", tun.local_port), timeout=10) as c:
        c.sendall(b"ping through the hops")
        c.shutdown(socket.SHUT_WR)
        buf = b""
        while d := c.recv(65536):
            buf += d
    return buf


def key_of(s) -> str:
    return s.host_key_line.split()[2]


def target(c, *options, identity=None, known=None):
    t = c["tgt"]
    opts = [f"UserKnownHostsFile={known}"] if known else []
    return SshConfig(target=t.host, port=t.port, user=t.user,
                     identity_file=str(identity or c["key"]),
                     options=(*opts, "IdentitiesOnly=yes", *options))


def known_lines(path: Path) -> dict[str, str]:
    return {ln.split()[0]: ln.split()[2] for ln in path.read_text().splitlines() if ln.strip()}


GREETING = b"hello-from-controller\nPING THROUGH THE HOPS"


def test_a_tunnel_through_two_jump_hops_in_the_options_reaches_the_controller(chain, tmp_path,
                                                                              controller):
    port, _ = controller
    j1, j2, tgt = chain["j1"], chain["j2"], chain["tgt"]
    kh = tmp_path / "known_hosts"
    jump = f"ProxyJump={j1.user}@127.0.0.1:{j1.port},ssh://{j2.user}@127.0.0.1:{j2.port}"
    notes = []
    with open_tunnel(target(chain, jump, "StrictHostKeyChecking=accept-new", known=kh),
                     "127.0.0.1", port, say=notes.append, home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING
    # every hop was contacted and its own key remembered under its own name
    assert known_lines(kh) == {f"[127.0.0.1]:{j1.port}": key_of(j1),
                               f"[127.0.0.1]:{j2.port}": key_of(j2),
                               f"[127.0.0.1]:{tgt.port}": key_of(tgt)}
    assert any(f"via {j1.user}@127.0.0.1:{j1.port}, {j2.user}@127.0.0.1:{j2.port} ->" in n
               for n in notes)
    # and the second time every hop is verified against those lines (nothing is new)
    notes.clear()
    with open_tunnel(target(chain, jump, "StrictHostKeyChecking=yes", known=kh),
                     "127.0.0.1", port, say=notes.append, home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING
    assert not any("accepted" in n for n in notes)


def test_a_tunnel_through_two_jump_hops_named_in_ssh_config_reaches_the_controller(
        chain, tmp_path, controller):
    port, _ = controller
    j1, j2, tgt = chain["j1"], chain["j2"], chain["tgt"]
    home = Path(os.environ["HOME"])          # the test's own HOME (conftest)
    (home / ".ssh").mkdir(exist_ok=True)
    (home / ".ssh" / "config").write_text(f"""
Host box
  HostName 127.0.0.1
  Port {tgt.port}
  User {tgt.user}
  ProxyJump jumpa,jumpb
Host jumpa
  HostName 127.0.0.1
  Port {j1.port}
  User {j1.user}
  IdentityFile {j1.identity}
  HostKeyAlias jumpa-key
Host jumpb
  HostName 127.0.0.1
  Port {j2.port}
  IdentityFile {j2.identity}
  # reached through box's list: its own ProxyJump does not apply (as with ssh -J)
  ProxyJump nowhere.invalid
""")
    notes = []
    # the target's own client key: the jump hops do not accept it, only their IdentityFile
    ssh = SshConfig(target="box", identity_file=str(tgt.identity),
                    options=("IdentitiesOnly=yes", "StrictHostKeyChecking=accept-new"))
    with open_tunnel(ssh, "127.0.0.1", port, say=notes.append) as tun:
        assert talk(tun) == GREETING
    assert known_lines(home / ".ssh" / "known_hosts") == {
        "jumpa-key": key_of(j1), f"[127.0.0.1]:{j2.port}": key_of(j2),
        f"[127.0.0.1]:{tgt.port}": key_of(tgt)}


def test_a_changed_jump_host_key_is_refused_and_names_the_hop(chain, tmp_path, controller):
    port, seen = controller
    j1, j2, tgt = chain["j1"], chain["j2"], chain["tgt"]
    kh = tmp_path / "known_hosts"
    text = (f"[127.0.0.1]:{j1.port} ssh-ed25519 {key_of(j2)}\n"      # j1 "changed"
            f"{j2.host_key_line}\n{tgt.host_key_line}\n")
    kh.write_text(text)
    with pytest.raises(Fail) as e:
        open_tunnel(target(chain, f"ProxyJump=127.0.0.1:{j1.port},127.0.0.1:{j2.port}",
                           known=kh), "127.0.0.1", port, say=lambda m: None,
                    home=str(tmp_path))
    assert e.value.transient
    assert f"jump host 127.0.0.1:{j1.port}:" in e.value.message
    assert "changed" in e.value.message and f"[127.0.0.1]:{j1.port}" in e.value.message
    assert kh.read_text() == text and seen == []


def test_a_jump_host_that_cannot_reach_the_next_hop_is_transient_and_names_both(chain, tmp_path):
    j1 = chain["j1"]
    dead = free_port()
    kh = tmp_path / "known_hosts"
    kh.write_text(j1.host_key_line + "\n")
    ssh = SshConfig(target="127.0.0.1", port=dead, identity_file=str(chain["key"]),
                    options=(f"UserKnownHostsFile={kh}", f"ProxyJump=127.0.0.1:{j1.port}",
                             "IdentitiesOnly=yes"))
    with pytest.raises(Fail) as e:
        open_tunnel(ssh, "127.0.0.1", 1, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient
    assert f"jump host 127.0.0.1:{j1.port}" in e.value.message
    assert f"cannot reach the next hop 127.0.0.1:{dead}" in e.value.message


RELAY = """\
import os, socket, sys, threading
host, port, marker = sys.argv[1], int(sys.argv[2]), sys.argv[-1]
with open(marker, "w") as f:
    f.write(" ".join(sys.argv[1:-1]) + "\\n" + str(os.getpid()) + "\\n")
s = socket.create_connection((host, port))
def up():
    while d := os.read(0, 65536):
        s.sendall(d)
    s.shutdown(socket.SHUT_WR)
threading.Thread(target=up, daemon=True).start()
while d := s.recv(65536):
    os.write(1, d)
"""


def test_a_proxy_command_carries_the_tunnel_expands_its_tokens_and_ends_with_it(
        chain, tmp_path, controller):
    port, _ = controller
    tgt = chain["tgt"]
    relay, marker = tmp_path / "relay.py", tmp_path / "marker"
    relay.write_text(RELAY)
    cmd = f"{shlex.quote(sys.executable)} {shlex.quote(str(relay))} %h %p %r 100%% {marker}"
    with open_tunnel(target(chain, f"ProxyCommand {cmd}", known=tgt.known_hosts), "127.0.0.1",
                     port, say=lambda m: None, home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING
        args, pid = marker.read_text().splitlines()
    assert args == f"127.0.0.1 {tgt.port} {tgt.user} 100%"
    with pytest.raises(ProcessLookupError):   # terminated and reaped with the tunnel
        os.kill(int(pid), 0)


def test_a_proxy_command_that_fails_is_transient_and_quotes_its_stderr(chain, tmp_path):
    cmd = "sh -c 'echo relay broke >&2; exit 3'"
    with pytest.raises(Fail) as e:
        open_tunnel(target(chain, f"ProxyCommand={cmd}", known=chain["tgt"].known_hosts),
                    "127.0.0.1", 1, say=lambda m: None, home=str(tmp_path))
    assert e.value.transient
    assert "status 3" in e.value.message and "relay broke" in e.value.message


def test_a_proxy_command_that_cannot_run_is_permanent(chain, tmp_path):
    with pytest.raises(Fail) as e:
        open_tunnel(target(chain, "ProxyCommand fdlenv-no-such-relay %h %p",
                           known=chain["tgt"].known_hosts),
                    "127.0.0.1", 1, say=lambda m: None, home=str(tmp_path))
    assert not e.value.transient and "status 127" in e.value.message
    assert "fdlenv-no-such-relay 127.0.0.1" in e.value.message


def test_host_key_alias_is_the_name_the_key_is_checked_and_remembered_under(chain, tmp_path,
                                                                            controller):
    port, _ = controller
    tgt = chain["tgt"]
    kh = tmp_path / "alias_known_hosts"
    kh.write_text(f"box-alias ssh-ed25519 {key_of(tgt)}\n")    # no [127.0.0.1]:port line
    with open_tunnel(target(chain, "HostKeyAlias=box-alias", "StrictHostKeyChecking=yes",
                            known=kh), "127.0.0.1", port, say=lambda m: None,
                     home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING
    fresh = tmp_path / "fresh_known_hosts"
    open_tunnel(target(chain, "HostKeyAlias=other-alias", known=fresh), "127.0.0.1", port,
                say=lambda m: None, home=str(tmp_path)).close()
    assert known_lines(fresh) == {"other-alias": key_of(tgt)}


JUNK = (b"# a comment\n"
        b"@cert-authority *.example.org ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIHh1bXBoaWx5!!\n"
        b"\xff\xfe this line is not utf-8 \xc3\x28\n"
        b"just-garbage\n"
        b"oldhost ssh-frobnicate AAAAB3NzaC1yc2EAAAADAQABAAABAQ==\n"
        b"badhost ssh-ed25519 !!!not-base64!!!\n")


def test_known_hosts_lines_fdlenv_cannot_use_are_skipped_with_one_note_per_file(chain, tmp_path,
                                                                                controller):
    port, _ = controller
    tgt = chain["tgt"]
    kh, glob = tmp_path / "known_hosts", tmp_path / "global_known_hosts"
    revoked_other = f"@revoked * ssh-ed25519 {key_of(chain['j1'])}\n".encode()
    kh.write_bytes(JUNK + revoked_other + tgt.host_key_line.encode() + b"\n")
    glob.write_bytes(JUNK)
    notes = []
    with open_tunnel(target(chain, "StrictHostKeyChecking=yes", f"GlobalKnownHostsFile={glob}",
                            known=kh), "127.0.0.1", port, say=notes.append,
                     home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING
    for path in (kh, glob):
        mine = [n for n in notes if n.startswith(f"known_hosts {path}:")]
        assert len(mine) == 1, notes
        assert "skipped 5 line(s)" in mine[0]
        for why in ("line 2 (@cert-authority with ssh-ed25519 key data that does not parse", "line 3 (not UTF-8)", "line 4 (too few",
                    "line 5 (key type ssh-frobnicate", "line 6 (ssh-ed25519 key data"):
            assert why in mine[0]
        assert "line 7" not in mine[0]            # @revoked lines are used, not skipped


def test_a_revoked_host_key_is_refused(chain, tmp_path):
    tgt = chain["tgt"]
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{tgt.host_key_line}\n@revoked [127.0.0.1]:* ssh-ed25519 {key_of(tgt)}\n")
    with pytest.raises(Fail) as e:
        open_tunnel(target(chain, known=kh), "127.0.0.1", 1, say=lambda m: None,
                    home=str(tmp_path))
    assert e.value.transient and "@revoked" in e.value.message


def test_a_hashed_known_hosts_entry_verifies_the_host(chain, tmp_path, controller):
    import paramiko
    port, _ = controller
    tgt = chain["tgt"]
    hashed = paramiko.HostKeys.hash_host(f"[127.0.0.1]:{tgt.port}")
    kh = tmp_path / "known_hosts"
    kh.write_text(f"{hashed} ssh-ed25519 {key_of(tgt)}\n")
    with open_tunnel(target(chain, "StrictHostKeyChecking=yes", known=kh), "127.0.0.1", port,
                     say=lambda m: None, home=str(tmp_path)) as tun:
        assert talk(tun) == GREETING


def test_remembering_a_new_key_appends_and_keeps_the_lines_fdlenv_skipped(chain, tmp_path,
                                                                         controller):
    port, _ = controller
    tgt = chain["tgt"]
    kh = tmp_path / "known_hosts"
    kh.write_bytes(JUNK.rstrip(b"\n"))                  # no final newline either
    open_tunnel(target(chain, "StrictHostKeyChecking=accept-new", known=kh), "127.0.0.1", port,
                say=lambda m: None, home=str(tmp_path)).close()
    after = kh.read_bytes()
    assert after.startswith(JUNK)
    assert after[len(JUNK):].decode().split() == [f"[127.0.0.1]:{tgt.port}", "ssh-ed25519",
                                                  key_of(tgt)]


def test_known_hosts_patterns_negations_and_hashes_match_as_openssh_does():
    import paramiko
    m = knownhosts.names_match
    assert m(["*.example.org"], "Box.EXAMPLE.org")
    assert not m(["*.example.org", "!bad.example.org"], "bad.example.org")
    assert m(["[10.0.0.?]:2222"], "[10.0.0.7]:2222") and not m(["[10.0.0.?]:2222"], "[10.0.0.7]:22")
    assert m([paramiko.HostKeys.hash_host("gw")], "gw")
    assert not m([paramiko.HostKeys.hash_host("gw")], "gx")
    assert not m(["|1|not|base64!"], "gw")


def test_a_server_that_does_not_speak_ssh_becomes_a_transient_failure(tmp_path):
    srv = socket.socket()
    srv.bind(("127.0.0.1", 0))
    srv.listen()

    def answer():
        c, _ = srv.accept()
        with c:
            c.sendall(b"this is not ssh\r\n")
    port = srv.getsockname()[1]
    t = threading.Thread(target=answer, daemon=True)
    t.start()
    try:
        with pytest.raises(Fail) as e:
            open_tunnel(SshConfig(target="127.0.0.1", port=port,
                                  options=(f"UserKnownHostsFile={tmp_path / 'kh'}",
                                           "IdentitiesOnly=yes")),
                        "127.0.0.1", 1, say=lambda m: None, home=str(tmp_path))
    finally:
        t.join(timeout=10)
        srv.close()
    assert e.value.transient and f"ssh handshake with 127.0.0.1:{port} failed" in e.value.message


def test_every_library_exception_is_named_as_a_fail_by_cause():
    import paramiko
    hop = HopPlan(label="gw", hostname="gw", port=22, user=None, key_files=[], known_hosts=["k"],
                  strict="yes", connect_timeout=5.0, keepalive=30, look_for_keys=False,
                  compress=False, host_key_alias=None)
    cases = [EOFError(), TimeoutError("t"), ConnectionRefusedError(111, "refused"),
             socket.gaierror(-2, "Name or service not known"), paramiko.SSHException("kex"),
             paramiko.ChannelException(2, "Connect failed"),
             paramiko.ProxyCommandFailure("relay", "broken pipe"),
             paramiko.AuthenticationException("no"), paramiko.PasswordRequiredException("pw"),
             ValueError("odd"), Exception("TODO: REPLACEME")]
    for exc in cases:
        f = failure(exc, hop, "ssh tunnel via gw")
        assert isinstance(f, Fail) and f.transient, exc
        assert f.message.startswith("ssh tunnel via gw: "), f.message
    assert "timed out after 5s" in failure(TimeoutError(), hop, "w").message
    assert "passphrase" in failure(paramiko.PasswordRequiredException(), hop, "w").message


def test_proxy_jump_hops_parse_every_form_and_refuse_malformed_ones():
    w = "ssh host x"
    assert parse_jump("gw", w) == (None, "gw", None)
    assert parse_jump("al@gw:2222", w) == ("al", "gw", 2222)
    assert parse_jump("ssh://al@gw:2222", w) == ("al", "gw", 2222)
    assert parse_jump("ssh://gw/", w) == (None, "gw", None)
    assert parse_jump("[::1]:22", w) == (None, "::1", 22)
    assert parse_jump("fe80::1", w) == (None, "fe80::1", None)
    assert parse_jump("a@b@gw", w) == ("a@b", "gw", None)
    for bad in ("gw:pear", "@gw", "gw:0", "gw:70000", "[::1", "ssh://gw/path", ":22"):
        with pytest.raises(Fail) as e:
            parse_jump(bad, w)
        assert not e.value.transient and repr(bad) in e.value.message


def plan(tmp_path, ssh_config: str, *options, target="box"):
    cfg = tmp_path / "ssh_config"
    cfg.write_text(ssh_config)
    return plan_hop(SshConfig(target=target, options=tuple(options)), home=str(tmp_path),
                    ssh_config_path=str(cfg))


def test_the_first_jump_hop_follows_its_own_ssh_config_route_and_the_others_do_not(tmp_path):
    p = plan(tmp_path, "Host box\n ProxyJump jb,jc\nHost jb\n ProxyJump ja\n"
                       "Host jc\n ProxyJump nowhere\nHost ja\n ProxyCommand relay %h %p %n\n"
                       " HostName 10.0.0.1\n Port 2200\n")
    assert [h.name for h in p.route()] == ["ja", "jb", "jc", "box"]
    assert p.via[0].proxy_command == "relay 10.0.0.1 2200 ja"
    assert all(h.proxy_command is None for h in p.route()[1:])


def test_a_proxy_jump_loop_in_ssh_config_is_a_permanent_failure(tmp_path):
    with pytest.raises(Fail) as e:
        plan(tmp_path, "Host box\n ProxyJump a\nHost a\n ProxyJump b\nHost b\n ProxyJump a\n")
    assert not e.value.transient and "loop" in e.value.message and "box via a via b" in \
        e.value.message


def test_the_first_of_proxy_jump_and_proxy_command_wins_and_none_disables_both(tmp_path):
    cfg = "Host box\n ProxyCommand relay %h\n ProxyJump gw\n"
    p = plan(tmp_path, cfg)                                  # the file's first: ProxyCommand
    assert p.proxy_command == "relay box" and p.via == []
    p = plan(tmp_path, cfg, "ProxyJump=al@gw2:2022")         # an option comes before the file
    assert p.proxy_command is None and [(h.user, h.hostname, h.port) for h in p.via] == \
        [("al", "gw2", 2022)]
    p = plan(tmp_path, cfg, "ProxyJump none")                # none is a value: nothing at all
    assert p.proxy_command is None and p.via == []
    p = plan(tmp_path, "", "ProxyCommand=relay %p", "ProxyJump=gw")
    assert p.proxy_command == "relay 22" and p.via == []
    assert any("ProxyJump is ignored" in w for w in p.warnings)
    with pytest.raises(Fail) as e:
        plan(tmp_path, "", "ProxyCommand=relay %x")
    assert not e.value.transient and "%x" in e.value.message


def test_jump_hops_take_their_settings_from_their_own_ssh_config_entry(tmp_path):
    key = tmp_path / "gw_key"
    key.write_text("")
    p = plan(tmp_path, f"Host gw\n HostName 10.9.9.9\n User carol\n Port 2022\n"
                       f" IdentityFile {key}\n IdentityFile {tmp_path / 'absent'}\n"
                       " HostKeyAlias gw-key\n",
             "ProxyJump=dave@gw", "IdentityFile=/keys/join", "StrictHostKeyChecking=no")
    (gw,) = p.via
    assert (gw.hostname, gw.user, gw.port, gw.key_name) == ("10.9.9.9", "dave", 2022, "gw-key")
    assert gw.key_files == [str(key), "/keys/join"]     # its own first, absent ones dropped
    assert gw.strict == "no" and p.required_keys == ["/keys/join"]
    assert p.key_name == "box" and plan(tmp_path, "", "Port=2200").key_name == "[box]:2200"


@pytest.mark.parametrize("ssh_config, target, options", [
    ("Host *\n ProxyCommand relay %h\n", "x$(touch P)", ()),                    # --ssh 'u@x$(touch P)'
    ("Host box\n HostName b`touch P`\n ProxyCommand relay %h\n", "box", ()),   # ssh.target's HostName
    ("", "box", ("ProxyJump=j$(touch P)x",)),                                  # a jump host
    ("", "box", ("User=u;touch P", "ProxyCommand=relay %r")),                  # %r
    ("Host box\n ProxyCommand relay %h\n", "-oProxyCommand=x", ()),            # an option as a host
])
def test_a_host_or_user_a_shell_would_run_is_refused_as_openssh_does(tmp_path, ssh_config, target, options):
    with pytest.raises(Fail) as e:
        plan(tmp_path, ssh_config, *options, target=target)
    assert not e.value.transient and "invalid characters" in e.value.message
    assert not (tmp_path / "P").exists()


def test_ordinary_hosts_users_and_addresses_still_plan():
    p = plan_hop(SshConfig(target="gpu-7.example.org", user="trainer_1", options=("ProxyJump=al@[::1]:2022",)),
                 home="/nonexistent", ssh_config_path="/nonexistent")
    assert p.hostname == "gpu-7.example.org" and [(h.user, h.hostname) for h in p.via] == [("al", "::1")]


def test_strict_host_key_checking_comes_from_ssh_config_unless_an_option_says_otherwise(tmp_path):
    assert plan(tmp_path, "Host box\n StrictHostKeyChecking no\n").strict == "no"
    assert plan(tmp_path, "Host box\n StrictHostKeyChecking yes\n").strict == "yes"
    assert plan(tmp_path, "Host box\n StrictHostKeyChecking no\n", "StrictHostKeyChecking=yes").strict == "yes"
    assert plan(tmp_path, "").strict == "accept-new"
