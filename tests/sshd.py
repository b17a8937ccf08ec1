"""A private OpenSSH server on 127.0.0.1 for tests (tunnel, rsync over ssh, sshfs).

Usage, as a context manager or through the pytest fixture `sshd_server`
(tests/conftest.py imports it for every test module):

    with start_sshd(tmp_path) as s:
        s.host, s.port, s.user      # 127.0.0.1, a free high port, the current user
        s.identity                  # private client key (ed25519, no passphrase)
        s.known_hosts               # a known_hosts file already holding the host key
        s.host_key_line             # that line, to build other known_hosts files
        s.ssh_argv("echo", "hi")    # an `ssh` argv that logs in non-interactively
        s.ssh_command()             # "ssh -p ... -i ... -o ..." for rsync -e

Several can run at once (each under its own workdir, with its own host key);
`start_sshd(..., authorize=[other.pub])` lets one client key into all of them,
and AllowTcpForwarding lets each serve as a ProxyJump hop for the next.

What it does: generates its own host key and client key with ssh-keygen,
writes an sshd_config (ListenAddress 127.0.0.1, UsePAM no, StrictModes no,
AllowTcpForwarding yes, its own PidFile and AuthorizedKeysFile), runs
`/usr/sbin/sshd -D -e -f <config>` in the foreground as a child (so its pid is
known), waits until the port accepts, and on exit kills it by that pid only.
It needs `mkdir -p /run/sshd` (privilege separation dir). `sshd_available()`
returns a reason string when the test must be skipped (no /usr/sbin/sshd).
"""

from __future__ import annotations

import contextlib
import getpass
import os
import shlex
import shutil
import signal
import socket
import subprocess
import time
from dataclasses import dataclass, field
from pathlib import Path

SSHD = "/usr/sbin/sshd"


def sshd_available() -> str | None:
    """None when a private sshd can run here, else the reason to skip."""
    if not os.path.exists(SSHD):
        return f"{SSHD} is absent (apt-get install openssh-server)"
    if shutil.which("ssh-keygen") is None:
        return "ssh-keygen is absent (apt-get install openssh-client)"
    return None


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def loopback_controller(handle, *, threaded: bool = False):
    """A listener on 127.0.0.1 standing for flodl's controller, for tunnels to reach: each client
    is handed to `handle(conn)` (in a thread of its own when `threaded`, so one held connection
    never blocks the next) and closed after; an OSError from a client (the tunnel's readiness
    check drops its connection at once) ends only that client. Yields the port and the list of
    accepted connections; the listener closes on exit."""
    import threading

    srv = socket.create_server(("127.0.0.1", 0))
    accepted: list[socket.socket] = []

    def one(c: socket.socket) -> None:
        with c:
            with contextlib.suppress(OSError):
                handle(c)

    def serve() -> None:
        while True:
            try:
                c, _ = srv.accept()
            except OSError:
                return
            accepted.append(c)
            if threaded:
                threading.Thread(target=one, args=(c,), daemon=True).start()
            else:
                one(c)

    threading.Thread(target=serve, daemon=True).start()
    try:
        yield srv.getsockname()[1], accepted
    finally:
        srv.close()


@dataclass
class Sshd:
    host: str
    port: int
    user: str
    identity: Path
    known_hosts: Path
    host_key_line: str
    host_pubkey: Path
    dir: Path
    log: Path
    pid: int
    extra: dict = field(default_factory=dict)

    def ssh_options(self) -> list[str]:
        return ["-p", str(self.port), "-i", str(self.identity),
                "-o", f"UserKnownHostsFile={self.known_hosts}",
                "-o", "StrictHostKeyChecking=yes", "-o", "BatchMode=yes",
                "-o", "IdentitiesOnly=yes"]

    def ssh_argv(self, *remote: str) -> list[str]:
        return ["ssh", *self.ssh_options(), f"{self.user}@{self.host}", *remote]

    def ssh_command(self) -> str:
        """For `rsync -e`."""
        return shlex.join(["ssh", *self.ssh_options()])


def _keygen(path: Path) -> None:
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "fdlenv-test",
                    "-f", str(path)], check=True)


def _wait_port(port: int, proc: subprocess.Popen, log: Path, budget: float = 10.0) -> None:
    deadline = time.monotonic() + budget
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"sshd exited with {proc.returncode}: {log.read_text()}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.5):
                return
        except OSError:
            time.sleep(0.05)
    raise RuntimeError(f"sshd did not listen on {port} within {budget}s: {log.read_text()}")


@contextlib.contextmanager
def start_sshd(workdir: Path | str, *, extra_config: str = "", authorize=(), sign_host=None):
    """Start a private sshd under `workdir`; yield an `Sshd`; kill it by pid after.

    `authorize`: more public key files (`*.pub`) to accept besides its own client key
    (a chain of servers sharing one key, as jump hops and their target do).
    `sign_host`: called with the host key's `.pub` path once it exists, returns the
    certificate it made of it (`ssh-keygen -s CA -h ...`), served as `HostCertificate`."""
    d = Path(workdir) / "sshd"
    d.mkdir(parents=True, exist_ok=True)
    os.makedirs("/run/sshd", exist_ok=True)
    host_key, client_key = d / "host_ed25519", d / "client_ed25519"
    _keygen(host_key)
    _keygen(client_key)
    if sign_host is not None:
        extra_config = f"HostCertificate {sign_host(Path(f'{host_key}.pub'))}\n{extra_config}"
    auth = d / "authorized_keys"
    auth.write_text("".join(Path(p).read_text() for p in (f"{client_key}.pub", *authorize)))
    auth.chmod(0o600)
    log = d / "sshd.log"
    user = getpass.getuser()
    proc = None
    for _ in range(5):  # a free port can be taken between probing and binding: retry
        port = free_port()
        cfg = d / "sshd_config"
        cfg.write_text("\n".join([
            f"Port {port}", "ListenAddress 127.0.0.1", f"HostKey {host_key}",
            f"PidFile {d / 'sshd.pid'}", f"AuthorizedKeysFile {auth}",
            "UsePAM no", "StrictModes no", "PasswordAuthentication no",
            "KbdInteractiveAuthentication no", "PubkeyAuthentication yes",
            "PermitRootLogin prohibit-password", "AllowTcpForwarding yes",
            "Subsystem sftp internal-sftp", "LogLevel VERBOSE", extra_config, ""]))
        with open(log, "ab") as logf:
            proc = subprocess.Popen([SSHD, "-D", "-e", "-f", str(cfg)], stdin=subprocess.DEVNULL,
                                    stdout=logf, stderr=logf)
        try:
            _wait_port(port, proc, log)
            break
        except RuntimeError:
            if proc.poll() is None:
                proc.kill()
            proc.wait()
            proc = None
    if proc is None:
        raise RuntimeError(f"could not start sshd: {log.read_text()}")
    hostpub = Path(f"{host_key}.pub").read_text().split()
    line = f"[127.0.0.1]:{port} {hostpub[0]} {hostpub[1]}"
    known = d / "known_hosts"
    known.write_text(line + "\n")
    try:
        yield Sshd(host="127.0.0.1", port=port, user=user, identity=client_key,
                   known_hosts=known, host_key_line=line, host_pubkey=Path(f"{host_key}.pub"),
                   dir=d, log=log, pid=proc.pid)
    finally:
        try:
            os.kill(proc.pid, signal.SIGTERM)
            proc.wait(timeout=5)
        except subprocess.TimeoutExpired:
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait()
        except ProcessLookupError:
            pass


try:
    import pytest

    @pytest.fixture(scope="module")
    def sshd_server(tmp_path_factory):
        """One private sshd per test module (skipped when sshd is absent)."""
        reason = sshd_available()
        if reason:
            pytest.skip(reason)
        with start_sshd(tmp_path_factory.mktemp("sshd")) as s:
            yield s
except ImportError:  # pragma: no cover - usable without pytest too
    pass
