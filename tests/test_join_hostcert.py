"""OpenSSH host certificates through a real sshd: a `@cert-authority` line in known_hosts.

Each case starts its own sshd (tests/sshd.py) whose host key is signed by
`ssh-keygen -s CA -h` (`HostCertificate`), and opens the paramiko tunnel to it:
a certificate from the CA on record, naming the host as dialed and valid now,
opens it with nothing appended to known_hosts, even under StrictHostKeyChecking=yes;
an expired certificate, one naming another host, one from another CA, and one
whose CA is `@revoked` are each refused for good (exit 2), even under accept-new;
a host presenting a plain key follows StrictHostKeyChecking as it always did, and
a StrictHostKeyChecking that ~/.ssh/config sets for the host is not overridden by
join's first-use default (flodl's `-o accept-new` would override it: fdlenv is stricter).
"""

from __future__ import annotations

import socket
import subprocess
from pathlib import Path

import pytest
from sshd import loopback_controller, sshd_available, start_sshd
from test_join_tunnel import hop, recv_all

from fdlenv.app.joinsettings import resolve
from fdlenv.base.errors import Fail
from fdlenv.config.model import FdlenvBlock, JoinBlock, JoinFlags, Project, SshConfig
from fdlenv.join.tunnel import open_tunnel

pytestmark = pytest.mark.slow


@pytest.fixture(autouse=True)
def _sshd_here():
    reason = sshd_available()
    if reason:
        pytest.skip(reason)


@pytest.fixture()
def controller():
    """A loopback listener standing for the controller: a greeting, then what it got, upper-cased."""
    with loopback_controller(lambda c: c.sendall(b"hello-from-controller\n" + recv_all(c).upper())) as (port, _):
        yield port


def make_ca(path: Path) -> Path:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "ca", "-f", str(path)], check=True)
    return path


def signer(ca: Path, *args: str, names: str = "127.0.0.1,localhost"):
    """`sign_host` for start_sshd: `ssh-keygen -s ca -h -n names [args] host.pub`."""
    def sign(pub: Path) -> Path:
        subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "test-host", "-h", "-n", names, *args, str(pub)],
                       check=True, capture_output=True)
        return pub.with_name(pub.name.removesuffix(".pub") + "-cert.pub")
    return sign


def ca_line(pattern: str, ca: Path, marker: str = "@cert-authority") -> str:
    kind, data = Path(f"{ca}.pub").read_text().split()[:2]
    return f"{marker} {pattern} {kind} {data}\n"


def through(s, tmp_path, kh: Path, port: int, strict: str) -> bytes:
    with open_tunnel(hop(s, tmp_path, f"StrictHostKeyChecking={strict}", known=kh), "127.0.0.1", port,
                     say=lambda m: None, home=str(tmp_path)) as tun:
        with socket.create_connection(("127.0.0.1", tun.local_port), timeout=10) as c:
            c.sendall(b"through a certified host")
            c.shutdown(socket.SHUT_WR)
            return recv_all(c)


def test_a_host_certificate_from_the_ca_on_record_opens_the_tunnel_and_nothing_is_appended(tmp_path, controller):
    ca = make_ca(tmp_path / "ca")
    with start_sshd(tmp_path, sign_host=signer(ca)) as s:
        kh = tmp_path / "known_hosts"
        kh.write_text(ca_line(f"[127.0.0.1]:{s.port},[localhost]:{s.port}", ca))
        before = kh.read_bytes()
        got = through(s, tmp_path, kh, controller, "yes")
        assert got == b"hello-from-controller\nTHROUGH A CERTIFIED HOST"
        assert kh.read_bytes() == before


@pytest.mark.parametrize("case, sign_args, why", [
    ("expired", ("-V", "20200101:20200102"), "its certificate expired at 2020-01-02"),
    ("another host", ("-n", "other.example"), "127.0.0.1 is not among its certificate's principals (other.example)"),
    ("another CA", (), "its certificate is signed by a CA known_hosts does not name for it"),
    ("revoked CA", (), "the CA that signed its certificate is marked @revoked"),
    ("revoked key", (), "its certified key is marked @revoked"),
])
def test_a_host_certificate_that_fails_a_check_is_refused_for_good_and_nothing_is_appended(
        tmp_path, controller, case, sign_args, why):
    ca, other = make_ca(tmp_path / "ca"), make_ca(tmp_path / "other-ca")
    names = sign_args[1] if sign_args[:1] == ("-n",) else "127.0.0.1,localhost"
    extra = sign_args if sign_args[:1] != ("-n",) else ()
    with start_sshd(tmp_path, sign_host=signer(other if case == "another CA" else ca, *extra, names=names)) as s:
        kh = tmp_path / "known_hosts"
        kh.write_text(ca_line("*", ca) + (ca_line("*", ca, "@revoked") if case == "revoked CA" else "")
                      + (f"@revoked * {' '.join(s.host_key_line.split()[1:])}\n" if case == "revoked key" else ""))
        before = kh.read_bytes()
        with pytest.raises(Fail) as e:
            through(s, tmp_path, kh, controller, "accept-new")
        assert not e.value.transient and e.value.exit_code == 2, e.value.message
        assert f"the host certificate of [127.0.0.1]:{s.port} is refused: {why}" in e.value.message
        assert "\n" not in e.value.message and "ssh-keygen -s CA_KEY -h -n 127.0.0.1" in e.value.message
        assert kh.read_bytes() == before


@pytest.mark.parametrize("strict", ["yes", "accept-new"])
def test_a_plain_host_key_where_a_ca_is_on_record_follows_strict_host_key_checking(tmp_path, controller, strict):
    ca = make_ca(tmp_path / "ca")
    with start_sshd(tmp_path) as s:
        kh = tmp_path / "known_hosts"
        kh.write_text(ca_line("*", ca))
        if strict == "yes":
            with pytest.raises(Fail) as e:
                through(s, tmp_path, kh, controller, strict)
            assert "StrictHostKeyChecking is on" in e.value.message and kh.read_text() == ca_line("*", ca)
        else:
            assert through(s, tmp_path, kh, controller, strict).startswith(b"hello-from-controller")
            assert kh.read_text() == ca_line("*", ca) + s.host_key_line + "\n"


@pytest.mark.parametrize("config, refused", [("StrictHostKeyChecking yes", True), ("", False)])
def test_strict_checking_set_in_ssh_config_is_not_overridden_by_joins_first_use_default(
        tmp_path, controller, config, refused):
    with start_sshd(tmp_path) as s:
        kh, cfg = tmp_path / "known_hosts", tmp_path / "ssh_config"
        cfg.write_text(f"Host {s.host}\n  {config}\n" if config else "")
        block = JoinBlock(ssh=SshConfig(target=s.host, port=s.port, user=s.user, identity_file=str(s.identity),
                                        options=(f"UserKnownHostsFile={kh}", "IdentitiesOnly=yes")))
        project = Project(path=tmp_path / "fdl.yml", root=tmp_path, join=block, fdlenv=FdlenvBlock())
        settings = resolve(JoinFlags(), project, hostname=lambda: "box", environ={}, dial=False)
        assert settings.ssh is not None
        tunnel = lambda: open_tunnel(settings.ssh, "127.0.0.1", controller, say=lambda m: None,  # noqa: E731
                                     ssh_config_path=str(cfg), home=str(tmp_path))
        if refused:
            with pytest.raises(Fail) as e:
                tunnel()
            assert "StrictHostKeyChecking is on" in e.value.message and not kh.exists()
        else:
            tunnel().close()
            assert kh.read_text() == s.host_key_line + "\n"


def certificate(tmp_path: Path, *args: str, ca: Path | None = None) -> tuple[bytes, bytes]:
    """(the certificate blob, the CA key blob) of a fresh ed25519 key signed by `ssh-keygen -s`."""
    import base64

    ca = ca or make_ca(tmp_path / "unit-ca")
    key = tmp_path / f"key{len(list(tmp_path.glob('key*.pub')))}"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(key)], check=True)
    subprocess.run(["ssh-keygen", "-q", "-s", str(ca), "-I", "unit", *args, f"{key}.pub"], check=True,
                   capture_output=True)
    cert = base64.b64decode(Path(f"{key}-cert.pub").read_text().split()[1])
    return cert, base64.b64decode(Path(f"{ca}.pub").read_text().split()[1])


@pytest.mark.parametrize("args, why", [
    (("-n", "gw"), "its certificate is of type 1, not a host certificate"),          # a user certificate
    (("-h", "-n", "gw", "-V", "+3650d:+3651d"), "its certificate is not valid before"),
    (("-h", "-n", "gw"), None),
    (("-h", "-n", "gw", "-O", "force-command=true"), "its certificate carries critical options"),   # OpenSSH refuses it
])
def test_host_certificate_checks_read_what_ssh_keygen_wrote(tmp_path, args, why):
    from fdlenv.join import hostcert

    cert, ca = certificate(tmp_path, *args)
    got = hostcert.check(cert, "gw", [ca], [])
    assert got is None if why is None else (got or "").startswith(why), got


def test_a_host_certificate_altered_after_signing_or_cut_short_is_refused(tmp_path):
    from fdlenv.join import hostcert

    cert, ca = certificate(tmp_path, "-h", "-n", "gw,gx")
    assert hostcert.check(cert, "gw", [ca], []) is None
    assert hostcert.check(cert.replace(b"gx", b"gy"), "gy", [ca], []) == \
        "the CA's signature on its certificate does not verify"
    for cut in (10, len(cert) // 2, len(cert) - 1):
        assert (hostcert.check(cert[:cut], "gw", [ca], []) or "").startswith("its certificate does not parse")
    assert (hostcert.check(cert + b"\0", "gw", [ca], []) or "").startswith("its certificate does not parse")
