"""Prepare steps 2 and 3: the dataset source root and the node-local directories.

Both are cheap and come before any fetch or realise (a box that cannot stage
data should not download gigabytes first). Step 2 ships at most one absolute
path: nothing, a declared `data_path` proven listable (read-only is the
normal case), or a `data_source` mounted read-only with sshfs — reused when
/proc/mounts already shows it (the last entry for a mountpoint wins, as with
stacked mounts), since a mount outlives the attempt. Step 3 proves the
dataset cache and the disk stage writable by writing a probe file, and
notes RAM-backed filesystems and under 1 GiB free. The mounts table, $HOME
and the temp dir are parameters, so tests fake them (and sshfs on PATH).
"""

from __future__ import annotations

import contextlib
import itertools
import os
import re
from pathlib import Path
from collections.abc import Sequence
from typing import NamedTuple

from ..config.grammar import bracketed, split_host_port
from ..base.errors import Fail

DEFAULT_MOUNTPOINT = "/flodl/data"
LOW_SPACE_BYTES = 1 << 30
SSHFS_TIMEOUT = 120
SSHFS_FORMS = ("sshfs://[user@]host[:port]/abs/path or sshfs://[user@]host:/abs/path "
               "(e.g. sshfs://flodl@nas:2222/flodl/data; an IPv6 host in brackets: sshfs://[::1]/d)")
_probe_counter = itertools.count()


class SshfsSource(NamedTuple):
    """A parsed `sshfs://` data source (a NamedTuple: it is on the re-dial path, see variants)."""

    remote: str          # [user@]host:/abs/path, exactly what sshfs takes and /proc/mounts shows
    port: int | None


def parse_data_source(spec: str) -> SshfsSource:
    s = spec.strip()
    if "://" not in s:
        raise Fail.permanent(f"data_source: {spec!r} has no scheme; a local directory goes in data_path:, "
                             f"a remote one is {SSHFS_FORMS}")
    scheme, rest = s.split("://", 1)
    if scheme != "sshfs":
        raise Fail.permanent(f"data_source: scheme {scheme}:// is not supported; fdlenv ships {SSHFS_FORMS}")
    user = None
    if "@" in rest.split("/", 1)[0]:
        user, rest = rest.split("@", 1)
        if not user:
            raise Fail.permanent(f"data_source: empty user in {spec!r}; accepted: {SSHFS_FORMS}")
    slash = rest.find("/")
    if slash < 0:
        raise Fail.permanent(f"data_source: {spec!r} names no path; accepted: {SSHFS_FORMS}")
    hostport, path = rest[:slash], rest[slash:]
    hostport = hostport[:-1] if hostport.endswith(":") else hostport   # scp colon
    try:   # host, host:port, [v6], [v6]:port; a bare IPv6 address is refused
        host, port = split_host_port(hostport)
    except Fail as e:
        raise Fail.permanent(f"data_source: {spec!r}: {e.message}; accepted: {SSHFS_FORMS}") from None
    if len(path) < 2:
        raise Fail.permanent(f"data_source: {spec!r}: the root is not a source root; name a directory")
    return SshfsSource(f"{user + '@' if user else ''}{bracketed(host)}:{path}", port)


class Mount(NamedTuple):
    """One /proc/mounts entry (a NamedTuple: it is on the re-dial path, see variants)."""

    source: str
    mountpoint: str
    fstype: str


_OCTAL = re.compile(r"\\([0-7]{3})")


def _unescape(field: str) -> str:
    """/proc/mounts writes space, tab, newline and backslash as \\ooo octal."""
    return _OCTAL.sub(lambda m: chr(int(m.group(1), 8)), field)


def read_mounts(proc_mounts: Path = Path("/proc/mounts")) -> list[Mount]:
    """The mounts table in order (later lines are mounted on top); [] when unreadable."""
    try:
        lines = proc_mounts.read_text().splitlines()
    except OSError:
        return []
    return [Mount(_unescape(p[0]), _unescape(p[1]), p[2]) for p in map(str.split, lines) if len(p) >= 3]


def mounted_at(mounts: list[Mount], path: Path) -> Mount | None:
    hits = [m for m in mounts if m.mountpoint == str(path)]
    return hits[-1] if hits else None  # stacked mounts: the last one is on top


def sshfs_argv(src: SshfsSource, mountpoint: Path, ssh_options: list[str], identity: str | None) -> list[str]:
    argv = ["sshfs", src.remote, str(mountpoint)]
    for opt in ssh_options:
        argv += ["-o", opt]
    if identity:
        argv += ["-o", f"IdentityFile={identity}"]
    if src.port:
        argv += ["-o", f"port={src.port}"]
    argv += ["-o", "ro", "-o", "reconnect", "-o", "ServerAliveInterval=15",
             "-o", "ServerAliveCountMax=3", "-o", "BatchMode=yes"]
    return argv


def _listable(path: Path, field: str) -> None:
    if not path.is_dir():
        hint = " (a root on another machine goes in data_source: sshfs://...)" if field == "data_path" else ""
        raise Fail.permanent(f"{field}: {path} is not a directory on this box{hint}")
    try:
        next(iter(os.scandir(path)), None)
    except OSError as e:
        raise Fail.permanent(f"{field}: {path} cannot be listed: {e.strerror}") from None


def dataset_root(data_path: str | None, data_source: str | None, notes: list[str], *,
                 ssh_options: Sequence[str] = (), identity: str | None = None,
                 proc_mounts: Path = Path("/proc/mounts"), cwd: Path | None = None) -> Path | None:
    """Step 2: the absolute source root to ship, or None when nothing was declared."""
    if not data_path and not data_source:
        return None
    base = cwd or Path.cwd()
    if not data_source:
        assert data_path   # one of the two is set
        root = Path(os.path.normpath(base / data_path))  # lexical: symlinks are the operator's business
        _listable(root, "data_path")
        return root
    src = parse_data_source(data_source)
    mp = Path(os.path.normpath(base / (data_path or DEFAULT_MOUNTPOINT)))
    try:
        mp.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise Fail.permanent(f"data_path: mountpoint {mp} cannot be created ({e.strerror}); "
                             f"run `sudo mkdir -p {mp} && sudo chown $USER {mp}` or set data_path to a dir you own") from None
    canon = Path(os.path.realpath(mp))
    m = mounted_at(read_mounts(proc_mounts), canon)
    if m and m.source == src.remote:
        notes.append(f"source root {mp} already mounted from {src.remote} ({m.fstype})")
    elif m:
        notes.append(f"source root {mp} is mounted from {m.source}, not {src.remote}; left alone, ranks "
                     f"read whatever is there (`fusermount -u {mp}` lets fdlenv mount the configured one)")
    else:
        _sshfs(src, mp, list(ssh_options), identity, proc_mounts)
        notes.append(f"mounted {src.remote} read-only at {mp}")
    _listable(mp, "data_source")
    return mp


def _sshfs(src: SshfsSource, mp: Path, options: list[str], identity: str | None, proc_mounts: Path) -> None:
    import shutil
    import subprocess
    import tempfile

    from ..source.toolkit import install_hint

    if shutil.which("sshfs") is None:
        raise Fail.permanent(f"data_source: sshfs is not installed ({install_hint(['sshfs'])}); "
                             "or mount during provisioning and declare a bare data_path")
    # stderr goes to a file, not a pipe: the ssh child sshfs leaves running holds
    # it open for the life of the mount, so reading a pipe to EOF would hang.
    with tempfile.TemporaryFile() as err:
        try:
            rc = subprocess.run(sshfs_argv(src, mp, options, identity), stdin=subprocess.DEVNULL,
                                stdout=subprocess.DEVNULL, stderr=err, timeout=SSHFS_TIMEOUT).returncode
        except subprocess.TimeoutExpired:
            raise Fail.retry(f"data_source: sshfs {src.remote} did not mount within {SSHFS_TIMEOUT} s") from None
        except OSError as e:
            raise Fail.permanent(f"data_source: sshfs cannot be spawned: {e}") from None
        err.seek(0)
        stderr = err.read().decode(errors="replace").strip()
    if rc != 0:
        raise Fail.retry(f"data_source: sshfs {src.remote} failed (exit {rc}): {stderr[-300:]}")
    if not mounted_at(read_mounts(proc_mounts), Path(os.path.realpath(mp))):
        raise Fail.retry(f"data_source: sshfs exited 0 but {mp} is not mounted "
                         "(the far side likely dropped the connection)")


def _fs_type(path: Path, mounts: list[Mount]) -> str | None:
    best, fstype = "", None
    p = str(path)
    for m in mounts:
        mp = m.mountpoint.rstrip("/") or "/"
        if (p == mp or p.startswith(mp.rstrip("/") + "/")) and len(mp) >= len(best):
            best, fstype = mp, m.fstype
    return fstype


def _prove_writable(d: Path, what: str) -> None:
    probe = d / f".fdl-prepare-{os.getpid()}-{next(_probe_counter)}"
    try:
        probe.write_text("fdl prepare\n")
    except OSError as e:
        raise Fail.permanent(f"{what} {d} is not writable ({e.strerror}); training stages data there") from None
    finally:
        with contextlib.suppress(OSError):
            probe.unlink()


def free_bytes(d: Path) -> int:
    st = os.statvfs(d)
    return st.f_bavail * st.f_frsize


def node_local_dirs(notes: list[str], *, home: str | None = None, stage: Path | None = None,
                    proc_mounts: Path = Path("/proc/mounts")) -> None:
    """Step 3: flodl's dataset cache ($HOME/.flodl/data) and the disk stage (temp dir), proven writable."""
    home = os.environ.get("HOME") if home is None else home
    # $TMPDIR or /tmp, as flodl resolves it; never tempfile.gettempdir(), which
    # silently falls back to another dir when $TMPDIR is missing.
    stage = stage or Path(os.environ.get("TMPDIR") or "/tmp")
    mounts = read_mounts(proc_mounts)
    dirs = []
    if home:
        cache = Path(home) / ".flodl" / "data"
        try:
            cache.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise Fail.permanent(f"dataset cache {cache} cannot be created ({e.strerror})") from None
        dirs.append((cache, "dataset cache"))
    else:
        notes.append("HOME is unset: flodl will cache datasets under the temp dir (RAM if it is tmpfs)")
    if not stage.is_dir():
        raise Fail.permanent(f"disk stage {stage} does not exist (set TMPDIR to a directory on disk)")
    dirs.append((stage, "disk stage"))
    for d, what in dirs:
        _prove_writable(d, what)
        if _fs_type(Path(os.path.realpath(d)), mounts) in ("tmpfs", "ramfs"):
            notes.append(f"{what} {d} is RAM-backed: staging there spends RAM, not disk")
        free = free_bytes(d)
        if free < LOW_SPACE_BYTES:
            notes.append(f"{what} {d} has {free >> 20} MiB free, smaller than any real corpus")
