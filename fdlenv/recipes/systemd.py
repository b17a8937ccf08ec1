"""`fdlenv recipe systemd`: the unit that keeps `fdlenv join --persist` dialing, hardened.

Restarts: exit 2 is fdlenv's "retrying cannot fix this" (RestartPreventExitStatus=2),
so a misprovisioned box stops hot-looping while everything else restarts forever.
`KillMode=mixed` lets fdlenv forward SIGTERM to the agent's process group itself (it
would otherwise reach the agent twice); systemd's SIGKILL of the whole cgroup after
TimeoutStopSec stays the backstop. `User=` is always written (root when none is named):
only then does systemd set HOME, which fdlenv's home and flodl's dataset cache hang on.

Hardening, everything that costs a GPU worker nothing (`systemd-analyze security`
scores the default unit 3.5, 3.9 with the sshfs relaxations): the OS read-only (ProtectSystem=strict), homes
read-only (ProtectHome=read-only) but for what join writes (ReadWritePaths=: the fdlenv
home, ~/.flodl with flodl's dataset cache, the working directory; ~/.ssh for the hop's
known_hosts; build and JIT caches when they exist), a private /tmp (the disk stage), no
capabilities, no new privileges, no kernel knobs. Not set, because they break GPUs:
PrivateDevices= (hides /dev/nvidia*, /dev/kfd, /dev/dri), MemoryDenyWriteExecute= (CUDA's
and ROCm's JIT map pages writable and executable), ProcSubset=pid (CUDA reads
/proc/driver/nvidia), SystemCallFilter= (libtorch, NCCL and RCCL need calls no fixed set
names). Two ExecStartPre=+ lines run outside the sandbox: one creates the writable dirs
(a path in ReadWritePaths= must exist before the sandbox is built), one creates NVIDIA's
device nodes (CUDA would run the setuid nvidia-modprobe, which NoNewPrivileges= blocks).

An sshfs:// data source needs the setuid fusermount3 and CAP_SYS_ADMIN in the bounding
set: the unit then relaxes exactly those two, with a comment saying how to avoid it.

ExecStart is `/usr/bin/env fdlenv` with a PATH that puts the user's ~/.local/bin (pipx,
pip --user) first, when the `fdlenv` found on that PATH is the one generating the unit (the
same console script, or one running this interpreter for `python -m fdlenv`). When it is
not (none there, or another install), ExecStart names the generating one by absolute path
(its console script, else `<python> -m fdlenv`) and a comment and a note say why: a unit
that silently starts another fdlenv, or none, fails on the box and not here. `--exec PATH`
pins one.
The token never goes in the unit: `--token-file` becomes `LoadCredential=` (config.token).
"""

from __future__ import annotations

import os
import re
import shutil
import sys

from ..config.token import CREDENTIAL
from ..base.errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
ENV_COMMAND = ("/usr/bin/env", "fdlenv")
GPU_GROUPS = ("render", "video")        # AMD: /dev/kfd and /dev/dri/renderD* (older: video)
CACHE_DIRS = (".cargo", ".rustup", ".cache", ".nv", ".config/miopen")
_NAME = re.compile(r"[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}")

HARDENING = (
    "# --- Hardening: what a GPU worker never needs. `systemd-analyze security` reads it.",
    "ProtectSystem=strict",
    "ProtectHome=read-only",
    "PrivateTmp=yes",
    "PrivateMounts=yes",
    "# 0027: what the training writes (checkpoints, logs) is readable by the user's group,",
    "# never by other users; use 0077 when even the group must not read it.",
    "UMask=0027",
    "ProtectKernelTunables=yes",
    "ProtectKernelModules=yes",
    "ProtectKernelLogs=yes",
    "ProtectControlGroups=yes",
    "ProtectClock=yes",
    "ProtectHostname=yes",
    "RestrictSUIDSGID=yes",
    "LockPersonality=yes",
    "RestrictRealtime=yes",
    "RestrictNamespaces=yes",
    "SystemCallArchitectures=native",
    "# AF_NETLINK: NCCL, RCCL and gloo list the network interfaces through it.",
    "RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK",
    "# Not set, on purpose: PrivateDevices=yes hides /dev/nvidia*, /dev/kfd and /dev/dri;",
    "# MemoryDenyWriteExecute=yes breaks CUDA's and ROCm's JIT (they map pages W+X);",
    "# ProcSubset=pid hides /proc/driver/nvidia; SystemCallFilter= would refuse calls",
    "# libtorch, NCCL and RCCL make; PrivateUsers=yes unmaps the groups owning the GPU",
    "# devices; PrivateNetwork=/IPAddressDeny=: the controller may be anywhere.",
)
STRICT_PRIVILEGES = ("NoNewPrivileges=yes", "CapabilityBoundingSet=")
SSHFS_PRIVILEGES = (
    "# sshfs:// data source: the mount goes through the setuid fusermount3, which needs new",
    "# privileges and CAP_SYS_ADMIN in the bounding set, so those two stay open (the service",
    "# itself still holds no capability unless it runs as root). fusermount3 wants the",
    "# mountpoint writable (ReadWritePaths=) and existing: create it at provisioning, owned",
    "# by the user. To keep both closed, mount the dataset at provisioning (fstab) and name",
    "# only its data_path.",
    "NoNewPrivileges=no",
    "CapabilityBoundingSet=CAP_SYS_ADMIN",
)
NVIDIA_NODES = ("command -v nvidia-modprobe >/dev/null || exit 0; "
                "nvidia-modprobe -u -c=0; nvidia-smi -L >/dev/null")
MAKE_DIRS = 'for d; do [ -d "$d" ] || install -d -o "$0" -m 0700 "$d"; done'


def systemd_quote(arg: str) -> str:
    """One ExecStart word: `%` and `$` escaped, quoted when it holds blanks or quotes."""
    s = arg.replace("%", "%%").replace("$", "$$")
    if s and not any(c in s for c in " \t\n\"'\\;"):
        return s
    return '"' + s.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def value_quote(s: str) -> str:
    """One word of Environment= or ReadWritePaths=: `%` escaped (no `$` expansion there),
    quoted when it holds blanks, quotes, backslashes or control characters (C-escaped: a
    newline must never start a unit line of its own)."""
    s = s.replace("%", "%%")
    printable = all(ord(c) >= 0x20 and ord(c) != 0x7f for c in s)
    if s and printable and not any(c in s for c in " \"'\\"):
        return s
    s = s.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + "".join(c if ord(c) >= 0x20 and ord(c) != 0x7f else f"\\x{ord(c):02x}"
                         for c in s) + '"'


def check_path(value: str, field: str) -> str:
    """An absolute path without control characters (a newline would add a unit line)."""
    if any(ord(c) < 0x20 or ord(c) == 0x7f for c in value) or not os.path.isabs(value):
        raise Fail.permanent(f"{field}: expected an absolute path without control characters, "
                             f"got {value!r}")
    return os.path.normpath(value)


def check_name(value: str, field: str) -> str:
    if not _NAME.fullmatch(value):
        raise Fail.permanent(f"{field}: expected a user or group name (letters, digits, _ . -; "
                             f"at most 32), got {value!r}")
    return value


def invoking_user(environ: dict[str, str] | None = None) -> str:
    """Who asked for the unit: the user behind `sudo` ($SUDO_USER, when this box knows that
    name), else this process's user. `--user` absent, the unit runs as them, with a note."""
    import pwd
    env = os.environ if environ is None else environ
    sudo = (env.get("SUDO_USER") or "").strip()
    if sudo and _NAME.fullmatch(sudo):
        try:
            return pwd.getpwnam(sudo).pw_name
        except KeyError:
            pass
    try:
        return pwd.getpwuid(os.getuid()).pw_name
    except KeyError:
        return "root" if os.getuid() == 0 else str(os.getuid())


TMP_DIRS = ("/tmp", "/var/tmp")   # what PrivateTmp=yes replaces with empty private ones


def under_tmp(path: str) -> bool:
    p = os.path.normpath(path)
    return any(p == t or p.startswith(t + "/") for t in TMP_DIRS)


def tmp_traps(workdir: str, home: str | None, command: list[str]) -> list[str]:
    """Warnings for paths the unit needs under /tmp or /var/tmp: PrivateTmp=yes gives the
    service empty private ones, so each named directive fails at start (the code is systemd's)."""
    why = "under /tmp, which this unit's PrivateTmp=yes replaces with an empty private one:"
    out = []
    if under_tmp(workdir):
        out.append(f"warning: --workdir {workdir} is {why} WorkingDirectory= cannot be entered and "
                   "the unit fails to start (200/CHDIR); choose a directory outside /tmp and /var/tmp "
                   "(e.g. /srv/flodl)")
    if home and under_tmp(home):
        out.append(f"warning: the fdlenv home {home} is {why} ReadWritePaths= cannot mount it "
                   "(226/NAMESPACE) and every start would begin empty; choose a home outside /tmp "
                   "(--home DIR)")
    exe = command[0] if command and command[0] != "/usr/bin/env" else None
    if exe and os.path.isabs(exe) and under_tmp(exe):
        out.append(f"warning: the fdlenv the unit starts ({exe}) is {why} ExecStart= finds nothing "
                   "(203/EXEC); install fdlenv outside /tmp (uv tool install, pipx install) or pass "
                   "--exec PATH")
    return out


def user_home(user: str | None) -> str:
    """The unit user's home: from this box's passwd when it knows the user, else what a
    stock image gives (`/root`, `/home/<user>`)."""
    if not user or user == "root":
        return "/root"
    import pwd
    try:
        return pwd.getpwnam(user).pw_dir or f"/home/{user}"
    except KeyError:
        return f"/home/{user}"


def present_groups(names: Iterable[str] = GPU_GROUPS) -> tuple[str, ...]:
    """The GPU groups this box has: systemd refuses to start a unit naming a missing group."""
    import grp
    out = []
    for g in names:
        try:
            grp.getgrnam(g)
        except KeyError:
            continue
        out.append(g)
    return tuple(out)


def _dedupe(paths: list[str]) -> list[str]:
    seen: set[str] = set()
    out = []
    for p in paths:
        if p.lstrip("-") not in seen:
            seen.add(p.lstrip("-"))
            out.append(p)
    return out


def writable(uhome: str, home: str | None, workdir: str) -> tuple[list[str], list[str]]:
    """(dirs created when missing, ReadWritePaths entries): the fdlenv home, ~/.flodl (flodl's
    dataset cache), ~/.ssh (known_hosts), the working directory; caches only when present."""
    flodl = os.path.join(uhome, ".flodl")
    make = _dedupe([flodl, *([home] if home else []), os.path.join(uhome, ".ssh")])
    rw = _dedupe([*make, workdir, *("-" + os.path.join(uhome, c) for c in CACHE_DIRS)])
    return make, rw


def unit_path(uhome: str) -> str:
    """The unit's PATH: the user's ~/.local/bin (pipx, pip --user) and ~/.cargo/bin first."""
    return ":".join([os.path.join(uhome, ".local/bin"), os.path.join(uhome, ".cargo/bin"), DEFAULT_PATH])


def running_fdlenv(argv0: str | None = None, executable: str | None = None) -> list[str]:
    """The command that starts this very fdlenv: its console script (argv[0]), else
    `<this python> -m fdlenv` (run as `python -m fdlenv`, or from an unknown launcher)."""
    argv0 = sys.argv[0] if argv0 is None else argv0
    if os.path.basename(argv0) == "fdlenv" and os.path.isfile(argv0):
        return [os.path.abspath(argv0)]
    return [os.path.abspath(executable or sys.executable), "-m", "fdlenv"]


def _same(a: str, b: str) -> bool:
    try:
        return os.path.samefile(a, b)
    except OSError:
        return False


def _interpreter(script: str) -> str | None:
    """The interpreter a console script's `#!` line names (pip writes an absolute one)."""
    try:
        with open(script, "rb") as f:
            line = f.readline(4096)
    except OSError:
        return None
    words = line[2:].split() if line.startswith(b"#!") else []
    return os.fsdecode(words[0]) if words else None


def start_command(uhome: str, argv0: str | None = None,
                  executable: str | None = None) -> tuple[list[str], str | None]:
    """(ExecStart's command, why it is not `/usr/bin/env fdlenv`): the env lookup when the
    fdlenv on the unit's PATH is this one, else this one by absolute path and the reason."""
    running = running_fdlenv(argv0, executable)
    found = shutil.which("fdlenv", path=unit_path(uhome))
    if found is not None and (_same(found, running[0]) if len(running) == 1
                              else _same(_interpreter(found) or "", running[0])):
        return list(ENV_COMMAND), None
    there = f"the one there is {found}" if found else "there is none there"
    return running, (f"the fdlenv generating this unit ({' '.join(running)}) is not the `fdlenv` on "
                     f"the unit's PATH ({there}): ExecStart names it by absolute path; `fdlenv recipe "
                     "systemd --exec PATH` names another")


def systemd_unit(*, user: str | None = None, workdir: str | None = None,
                 join_args: list[str] | None = None, command: list[str] | None = None,
                 home: str | None = None, uhome: str | None = None,
                 token_file: str | None = None, sshfs: bool = False,
                 groups: tuple[str, ...] = (), fdl_env: str | None = None,
                 rw_home: str | None = None, mountpoint: str | None = "/flodl/data",
                 origin: str = "systemd", command_why: str | None = None) -> str:
    """The unit text. `workdir`: where fdl.yml discovery starts (default: the cwd); `home`: the
    FLODL_HOME carried into the unit; `rw_home`: the fdlenv home join will settle (default
    `home`); `uhome`: the user's home (default: `user_home(user)`); `mountpoint`: where an
    sshfs:// source mounts (writable when `sshfs`); `origin`: the recipe named in the header;
    `command_why`: why ExecStart names `command` (a comment above it)."""
    user = user or "root"
    uhome = uhome or user_home(user)
    workdir = os.path.abspath(workdir or os.getcwd())
    argv = [*(command or ENV_COMMAND), "join", "--persist", *(join_args or [])]
    make, rw = writable(uhome, rw_home or home, workdir)
    if sshfs and mountpoint:
        rw = _dedupe([*rw, "-" + mountpoint])
    path = unit_path(uhome)
    lines = [f"# fdlenv join as a dial-in worker (generated by `fdlenv recipe {origin}`)."]
    if origin == "systemd":
        lines += ["# Install: save as /etc/systemd/system/fdlenv-join.service, then",
                  "#   systemctl daemon-reload && systemctl enable --now fdlenv-join"]
    lines += [
        "[Unit]",
        "Description=flodl dial-in worker (fdlenv join)",
        "Wants=network-online.target",
        "After=network-online.target",
        "",
        "[Service]",
        "Type=simple",
    ]
    if user == "root":
        lines.append("# root: a user of its own (--user flodl) is safer.")
    lines += [
        f"User={user}",
        f"WorkingDirectory={workdir.replace('%', '%%')}",
        "Environment=PYTHONUNBUFFERED=1",
        "# fdlenv from PATH (pipx and pip --user put it in ~/.local/bin), cargo for source builds.",
        f"Environment={value_quote('PATH=' + path)}",
    ]
    if home:
        lines.append(f"Environment={value_quote('FLODL_HOME=' + home)}")
    if fdl_env:
        lines.append(f"Environment={value_quote('FDL_ENV=' + fdl_env)}")
    if token_file:
        lines += [
            "# The token: systemd copies this root-only file to $CREDENTIALS_DIRECTORY/"
            f"{CREDENTIAL},",
            "# readable by this service alone, where fdlenv join reads it (systemd 247+).",
            f"LoadCredential={CREDENTIAL}:{token_file.replace('%', '%%')}",
        ]
    if groups:
        lines += [
            "# AMD GPUs: /dev/kfd and /dev/dri/renderD* belong to these groups. A group the box",
            "# lacks stops the unit from starting (216/GROUP): change them with --gpu-groups.",
            f"SupplementaryGroups={' '.join(groups)}",
        ]
    lines += [
        "# '+': outside the sandbox. NVIDIA's device nodes (CUDA would create them through the",
        "# setuid nvidia-modprobe, which NoNewPrivileges= blocks); '-': no NVIDIA is fine.",
        f"ExecStartPre=-+/bin/sh -c {systemd_quote(NVIDIA_NODES)}",
        "# The writable dirs must exist before the sandbox is built: made (0700) when missing.",
        "ExecStartPre=+/bin/sh -c " + " ".join(systemd_quote(a) for a in (MAKE_DIRS, user, *make)),
        *([f"# {''.join(c if c.isprintable() else '?' for c in command_why)}"] if command_why else []),
        f"ExecStart={' '.join(systemd_quote(a) for a in argv)}",
        "Restart=always",
        "RestartSec=5",
        "# exit 2 = permanent (bad config, no GPU, arch gap): retrying cannot help.",
        "RestartPreventExitStatus=2",
        "KillMode=mixed",
        "TimeoutStopSec=60",
        "# Let the instance owner deprovision a misprovisioned box (fdlenv never powers off):",
        "#FailureAction=poweroff",
        "",
        *HARDENING,
        "# What join writes; '-': only when it exists.",
        "ReadWritePaths=" + " ".join(value_quote(p) for p in rw),
        *(SSHFS_PRIVILEGES if sshfs else STRICT_PRIVILEGES),
        "",
        "[Install]",
        "WantedBy=multi-user.target",
        "",
    ]
    return "\n".join(lines)
