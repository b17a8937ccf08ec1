"""fdl.yml discovery, the `join:` and `fdlenv:` blocks, and flags-over-block.

Why it exists: `fdlenv join` reads the same project file as flodl's `fdl join`
(anchor-join §1.2, §1.6), so a golden image can bake one `join:` block and boot
into a bare `fdlenv join`. The schema is flodl's and strict (unknown keys are
load errors); fdlenv's own settings live in a separate top-level `fdlenv:`
block so flodl never sees them.

Order that matters:
1. discovery walks up from the cwd, skipping command-level configs;
2. the base file and its `inherit-from:` chain are merged, then the overlay
   named by `FDL_ENV` (and its chain) is deep-merged over it;
3. only then is the merged mapping validated (so an overlay may fix a base);
4. `resolve()` applies flags over the block exactly as anchor-join §1.3.
   It is pure: hostname and environment are injected, nothing is stat'ed,
   which is what makes it table-testable. Every error is `Fail.permanent`
   (exit 2, no dial, no re-dial).
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from types import MappingProxyType
from typing import Any, Callable, Mapping, NamedTuple

from . import variants
from .errors import Fail
from .fdlfile import find_config, read_mapping

DEFAULT_CONTROLLER_HOST = "127.0.0.1"
DEFAULT_CONTROLLER_PORT = 1337

OVERLAY_EXTS = ("yml", "yaml", "json")
INHERIT_KEY = "inherit-from"

JOIN_KEYS = ("controller", "ssh", "token", "bin", "source", "libtorch", "host",
             "devices", "persist", "data_path", "data_source", "gpu_ram_share",
             "sig_probe", "args")
SSH_KEYS = ("target", "port", "user", "identity_file", "options")
SOURCE_KEYS = ("from", "cwd", "build", "bin")
FDLENV_KEYS = ("lock", "mirrors", "home")


# --------------------------------------------------------------------------- data
# NamedTuples, not dataclasses: this module is on every re-dial (see variants).

class SshConfig(NamedTuple):
    """A tunnel hop. `target` is None only in a block that leaves it to --ssh."""
    target: str | None = None
    port: int | None = None
    user: str | None = None
    identity_file: str | None = None
    options: tuple[str, ...] = ()

    def display(self) -> str:
        host = f"[{self.target}]" if self.target and ":" in self.target else (self.target or "")
        user = f"{self.user}@" if self.user else ""
        port = f":{self.port}" if self.port else ""
        return f"{user}{host}{port}"


class SourceSpec(NamedTuple):
    """`join.source` / `--source*`: where the training tree comes from and how it builds."""
    from_: str
    cwd: str | None = None
    build: str | None = None
    bin: str | None = None


class JoinBlock(NamedTuple):
    """The validated `join:` block; every field optional, as in flodl's WorkerJoin."""
    controller: str | None = None
    ssh: SshConfig | None = None
    token: str | None = None
    bin: str | None = None
    source: SourceSpec | None = None
    libtorch: str | None = None
    host: str | None = None
    devices: tuple[int, ...] | None = None
    persist: bool = False
    data_path: str | None = None
    data_source: str | None = None
    gpu_ram_share: float | None = None
    sig_probe: bool | None = None
    args: tuple[str, ...] = ()


class FdlenvBlock(NamedTuple):
    """The top-level `fdlenv:` block: fdlenv's own settings (paths already anchored)."""
    lock: str | None = None
    mirrors: Mapping[str, str] = MappingProxyType({})
    home: str | None = None


class Project(NamedTuple):
    path: Path                      # the base config file found by discovery
    root: Path                      # its directory (anchors relative fdlenv paths)
    join: JoinBlock | None
    fdlenv: FdlenvBlock
    overlay: Path | None = None     # the FDL_ENV overlay merged over the base


class JoinFlags(NamedTuple):
    """The command line as parsed (None/False = not given). `tail` None = no `--`."""
    controller: str | None = None
    ssh: str | None = None
    identity: str | None = None
    token: str | None = None
    bin: str | None = None
    source: str | None = None
    source_cwd: str | None = None
    source_build: str | None = None
    source_bin: str | None = None
    libtorch: str | None = None
    lock: str | None = None
    mirrors: tuple[str, ...] = ()   # NAME=URL, repeatable
    home: str | None = None
    host: str | None = None
    devices: str | None = None
    persist: bool = False
    data_path: str | None = None
    data_source: str | None = None
    gpu_ram_share: float | None = None
    no_sig_probe: bool = False
    tail: list[str] | None = None


class JoinSettings(NamedTuple):
    """Effective settings after flags over block (anchor-join §1.3)."""
    host: str
    controller_host: str | None = None      # None only when resolved without a dial
    controller_port: int | None = None
    controller_defaulted: bool = False      # no address named and no ssh hop
    ssh: SshConfig | None = None
    token: str | None = None
    bin: str | None = None
    source: SourceSpec | None = None
    libtorch: str | None = None             # canonical token or "auto"; None = keep active
    lock: str | None = None
    mirrors: Mapping[str, str] = MappingProxyType({})
    home: str | None = None                 # --home > $FLODL_HOME > fdlenv.home; None = ~/.flodl
    devices: tuple[int, ...] | None = None  # None = all
    persist: bool = False
    data_path: str | None = None
    data_source: str | None = None
    gpu_ram_share: float | None = None
    sig_probe: bool = True
    args: tuple[str, ...] = ()
    project_root: str | None = None


# ---------------------------------------------------------------------- discovery

def _deep_merge(base: Any, over: Any) -> Any:
    if isinstance(base, dict) and isinstance(over, dict):
        out = dict(base)
        for k, v in over.items():
            out[k] = _deep_merge(base[k], v) if k in base else v
        return out
    return over


def _load_chain(path: Path, seen: set[Path]) -> dict:
    """One file with its `inherit-from:` parents merged under it (de-duplicated by path)."""
    real = path.resolve()
    if real in seen:
        return {}
    seen.add(real)
    try:
        data = read_mapping(path)
    except Exception as e:  # noqa: BLE001
        raise _LoadError(path, f"does not parse: {e}") from None
    if data is None:
        data = {}  # empty or comment-only: all defaults
    if not isinstance(data, dict):
        raise _LoadError(path, f"expected a mapping at the top level, got {type(data).__name__}")
    parents = data.pop(INHERIT_KEY, None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise _LoadError(path, f"{INHERIT_KEY}: expected a path or a list of paths")
    merged: dict = {}
    for parent in parents:
        pp = (path.parent / Path(parent).expanduser())
        if not pp.is_file():
            raise _LoadError(path, f"{INHERIT_KEY}: {parent} does not exist")
        merged = _deep_merge(merged, _load_chain(pp, seen))
    return _deep_merge(merged, data)


class _LoadError(Exception):
    def __init__(self, path: Path, reason: str):
        super().__init__(reason)
        self.path = path
        self.reason = reason


def load_project(start: Path | str | None = None,
                 environ: Mapping[str, str] | None = None) -> Project | None:
    """Discover and load the project config; None when there is none.

    Any load failure is `Fail.permanent("cannot load <path>: <reason>")`.
    """
    env = os.environ if environ is None else environ
    path = find_config(start)
    if path is None:
        return None
    try:
        seen: set[Path] = set()
        data = _load_chain(path, seen)
        overlay = None
        name = (env.get("FDL_ENV") or "").strip()
        if name:
            for ext in OVERLAY_EXTS:
                cand = path.parent / f"fdl.{name}.{ext}"
                if cand.is_file():
                    overlay = cand
                    break
            if overlay is None:
                raise _LoadError(path, f"FDL_ENV={name} names an overlay fdl.{name}."
                                       f"{{{','.join(OVERLAY_EXTS)}}} that does not exist "
                                       f"in {path.parent}")
            data = _deep_merge(data, _load_chain(overlay, seen))
        root = path.parent.absolute()
        try:
            join = parse_join_block(data.get("join"))
            fdl = parse_fdlenv_block(data.get("fdlenv"), root)
            _validate_cluster(data.get("cluster"))
        except ValueError as e:
            raise _LoadError(overlay or path, str(e)) from None
    except _LoadError as e:
        raise Fail.permanent(f"cannot load {e.path}: {e.reason}") from None
    except OSError as e:
        raise Fail.permanent(f"cannot load {path}: {e}") from None
    return Project(path=path.absolute(), root=root, join=join, fdlenv=fdl, overlay=overlay)


# --------------------------------------------------------------------- validation

def _type_name(v: Any) -> str:
    return "null" if v is None else type(v).__name__


def _strict_keys(d: Any, where: str, allowed: tuple[str, ...]) -> dict:
    if not isinstance(d, dict):
        raise ValueError(f"{where}: expected a mapping, got {_type_name(d)}")
    for k in d:
        if k not in allowed:
            raise ValueError(f"{where}: unknown key {k!r} (accepted: {', '.join(allowed)})")
    return d


def _opt_str(d: dict, key: str, where: str) -> str | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, str):
        raise ValueError(f"{where}.{key}: expected a string, got {_type_name(v)}")
    return v


def _opt_bool(d: dict, key: str, where: str) -> bool | None:
    v = d.get(key)
    if v is None:
        return None
    if not isinstance(v, bool):
        raise ValueError(f"{where}.{key}: expected true or false, got {v!r}")
    return v


def _int_in(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def check_share(v: Any, where: str) -> float:
    """gpu_ram_share: a finite number >= 0 (values over 1.0 are legal by design)."""
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        raise ValueError(f"{where}: expected a number, got {_type_name(v)}")
    f = float(v)
    if not math.isfinite(f) or f < 0:
        raise ValueError(f"{where}: must be a finite number >= 0, got {v!r}")
    return f


def parse_ssh_block(d: Any, where: str = "join.ssh") -> SshConfig:
    d = _strict_keys(d, where, SSH_KEYS)
    port = d.get("port")
    if port is not None and not _int_in(port, 1, 65535):
        raise ValueError(f"{where}.port: expected a port number 1-65535, got {port!r}")
    opts = d.get("options")
    if opts is None:
        opts = []
    if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
        raise ValueError(f"{where}.options: expected a list of Key=Value strings")
    target = _opt_str(d, "target", where)
    return SshConfig(target=target, port=port, user=_opt_str(d, "user", where),
                     identity_file=_opt_str(d, "identity_file", where), options=tuple(opts))


def parse_source_block(d: Any, where: str = "join.source") -> SourceSpec:
    d = _strict_keys(d, where, SOURCE_KEYS)
    frm = _opt_str(d, "from", where)
    if frm is None:
        raise ValueError(f"{where}: missing required key 'from' (the source spec)")
    return SourceSpec(from_=frm, cwd=_opt_str(d, "cwd", where),
                      build=_opt_str(d, "build", where), bin=_opt_str(d, "bin", where))


def parse_join_block(d: Any) -> JoinBlock | None:
    """Validate `join:` strictly (flodl's deny_unknown_fields schema)."""
    if d is None:
        return None
    w = "join"
    d = _strict_keys(d, w, JOIN_KEYS)
    devices = d.get("devices")
    if devices is not None:
        if not isinstance(devices, list) or not all(_int_in(x, 0, 255) for x in devices):
            raise ValueError(f"{w}.devices: expected a list of device ids 0-255, got {devices!r}"
                             " (`all` exists only on the command line: leave devices out)")
        devices = tuple(devices)
    share = d.get("gpu_ram_share")
    if share is not None:
        share = check_share(share, f"{w}.gpu_ram_share")
    args = d.get("args")
    if args is None:
        args = []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise ValueError(f"{w}.args: expected a list of strings")
    return JoinBlock(
        controller=_opt_str(d, "controller", w),
        ssh=parse_ssh_block(d["ssh"]) if d.get("ssh") is not None else None,
        token=_opt_str(d, "token", w),
        bin=_opt_str(d, "bin", w),
        source=parse_source_block(d["source"]) if d.get("source") is not None else None,
        libtorch=_opt_str(d, "libtorch", w),
        host=_opt_str(d, "host", w),
        devices=devices,
        persist=bool(_opt_bool(d, "persist", w)),
        data_path=_opt_str(d, "data_path", w),
        data_source=_opt_str(d, "data_source", w),
        gpu_ram_share=share,
        sig_probe=_opt_bool(d, "sig_probe", w),
        args=tuple(args),
    )


def _anchor(p: str, root: Path) -> str:
    q = Path(p).expanduser()
    return str(q if q.is_absolute() else (root / q))


def parse_fdlenv_block(d: Any, root: Path) -> FdlenvBlock:
    """Validate `fdlenv:` (lock, mirrors, home); relative paths anchor at the project root."""
    if d is None:
        return FdlenvBlock()
    w = "fdlenv"
    d = _strict_keys(d, w, FDLENV_KEYS)
    mirrors = d.get("mirrors") or {}
    if not isinstance(mirrors, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in mirrors.items()):
        raise ValueError(f"{w}.mirrors: expected a mapping NAME: URL of non-empty strings")
    lock = _opt_str(d, "lock", w)
    home = _opt_str(d, "home", w)
    return FdlenvBlock(lock=_anchor(lock, root) if lock else None, mirrors=dict(mirrors),
                       home=_anchor(home, root) if home else None)


def _validate_cluster(c: Any) -> None:
    """The parts of `cluster:` that make flodl's loader (and so `fdl join`) fail."""
    if not isinstance(c, dict):
        return
    if c.get("gpu_ram_share") is not None:
        check_share(c["gpu_ram_share"], "cluster.gpu_ram_share")
    workers = c.get("workers")
    if isinstance(workers, list):
        for i, wk in enumerate(workers):
            if not isinstance(wk, dict):
                continue
            if wk.get("gpu_ram_share") is not None:
                check_share(wk["gpu_ram_share"], f"cluster.workers[{i}].gpu_ram_share")
            if "ranks" in wk:
                raise ValueError(f"cluster.workers[{i}].ranks: derived from the devices; "
                                 "do not write it")


# ------------------------------------------------------------------------ parsers

def _split_host_port(s: str, what: str, example: str) -> tuple[str, int | None]:
    """`host`, `host:port`, `[v6]`, `[v6]:port`. Bare IPv6 must be bracketed."""
    bad = f"invalid {what} {s!r}: expected {example}"
    if s.startswith("["):
        end = s.find("]")
        if end < 0:
            raise Fail.permanent(f"{bad} (unclosed `[`)")
        host, rest = s[1:end], s[end + 1:]
        if rest and not rest.startswith(":"):
            raise Fail.permanent(f"{bad} (unexpected {rest!r} after `]`)")
        port_s = rest[1:] if rest else None
    elif s.count(":") > 1:
        raise Fail.permanent(f"{bad} (write an IPv6 address in brackets, e.g. [::1]:1337)")
    elif ":" in s:
        host, port_s = s.rsplit(":", 1)
    else:
        host, port_s = s, None
    if not host.strip():
        raise Fail.permanent(f"{bad} (empty host)")
    if port_s is None:
        return host, None
    if not port_s.isdigit() or not 1 <= int(port_s) <= 65535:
        raise Fail.permanent(f"{bad} (port {port_s!r} is not a number 1-65535)")
    return host, int(port_s)


def parse_controller(s: str) -> tuple[str, int]:
    """anchor-join §2.1 `host[:port]`, default port 1337; plus IPv6 brackets."""
    host, port = _split_host_port(s.strip(), "controller address", "host[:port]")
    return host, DEFAULT_CONTROLLER_PORT if port is None else port


def parse_ssh_spec(s: str) -> SshConfig:
    """anchor-join §2.2 `[user@]host[:port]`: first `@`, then host[:port]."""
    user = None
    rest = s.strip()
    if "@" in rest:
        user, rest = rest.split("@", 1)
        if not user:
            raise Fail.permanent(f"invalid --ssh {s!r}: empty user before `@`; "
                                 "expected [user@]host[:port]")
    host, port = _split_host_port(rest, "--ssh", "[user@]host[:port]")
    return SshConfig(target=host, port=port, user=user)


def parse_devices(s: str) -> tuple[int, ...] | None:
    """anchor-join §2.5: `all` (any case) = None; else a comma list of ids 0-255."""
    if s.strip().lower() == "all":
        return None
    out = []
    for piece in s.split(","):
        p = piece.strip()
        if not p.isdigit() or int(p) > 255:
            raise Fail.permanent(f"invalid --devices {s!r}: expected e.g. `0,1` or `all`")
        out.append(int(p))
    return tuple(out)


def local_hostname(environ: Mapping[str, str] | None = None) -> str:
    """anchor-join §2.6: FLODL_HOST_NAME, else the kernel's host name (what `hostname`
    prints, without running it), else `unknown-host`."""
    env = os.environ if environ is None else environ
    v = (env.get("FLODL_HOST_NAME") or "").strip()
    if v:
        return v
    return os.uname().nodename.strip() or "unknown-host"


def has_strict_host_key_option(options: tuple[str, ...] | list[str]) -> bool:
    return any(o.lstrip().lower().startswith("stricthostkeychecking") for o in options)


# ----------------------------------------------------------------------- resolver

def resolve(flags: JoinFlags, project: Project | None, *,
            hostname: Callable[[], str] = local_hostname,
            environ: Mapping[str, str] | None = None,
            dial: bool = True) -> JoinSettings:
    """Flags over the `join:` block, anchor-join §1.3, plus the `fdlenv:` block.

    Pure apart from calling `hostname()` when no host is named. With
    `dial=False` (the `fdlenv prepare` subset) the controller, token, persist,
    sig-probe and args are not resolved, and naming neither a binary nor a
    source is legal (baking only an environment). `home` is --home, else
    $FLODL_HOME (from `environ`), else `fdlenv.home`, else None (Home's default).
    """
    env = os.environ if environ is None else environ
    block = (project.join if project else None) or JoinBlock()
    fdl = project.fdlenv if project else FdlenvBlock()

    # 1. identity guard first.
    if flags.identity is not None and flags.ssh is None and block.ssh is None:
        raise Fail.permanent("--identity needs an ssh hop: give --ssh [user@]host[:port] "
                             "or a join.ssh block")

    # 2. ssh.
    ssh: SshConfig | None = None
    if flags.ssh is not None:
        spec = parse_ssh_spec(flags.ssh)
        inherit = block.ssh or SshConfig()
        ssh = spec._replace(identity_file=inherit.identity_file, options=inherit.options)
    elif block.ssh is not None:
        if not block.ssh.target:
            raise Fail.permanent("join.ssh has no target: set join.ssh.target "
                                 "(or pass --ssh [user@]host[:port])")
        ssh = block.ssh
    if ssh is not None:
        if not has_strict_host_key_option(ssh.options):
            ssh = ssh._replace(options=ssh.options + ("StrictHostKeyChecking=accept-new",))
        if flags.identity is not None:
            ssh = ssh._replace(identity_file=flags.identity)

    # 3. controller.
    chost = cport = None
    defaulted = False
    if dial:
        named = flags.controller if flags.controller is not None else block.controller
        if named is None:
            chost, cport = DEFAULT_CONTROLLER_HOST, DEFAULT_CONTROLLER_PORT
            defaulted = ssh is None
        else:
            chost, cport = parse_controller(named)

    # 4. binary / source.
    bin_path = flags.bin if flags.bin is not None else block.bin
    source: SourceSpec | None = None
    if flags.source is not None:
        b = block.source
        source = SourceSpec(
            from_=flags.source,
            cwd=flags.source_cwd if flags.source_cwd is not None else (b.cwd if b else None),
            build=flags.source_build if flags.source_build is not None else (b.build if b else None),
            bin=flags.source_bin if flags.source_bin is not None else (b.bin if b else None))
    elif block.source is not None:
        b = block.source
        source = SourceSpec(
            from_=b.from_,
            cwd=flags.source_cwd if flags.source_cwd is not None else b.cwd,
            build=flags.source_build if flags.source_build is not None else b.build,
            bin=flags.source_bin if flags.source_bin is not None else b.bin)
    else:
        for name, val in (("--source-cwd", flags.source_cwd), ("--source-build", flags.source_build),
                          ("--source-bin", flags.source_bin)):
            if val is not None:
                raise Fail.permanent(f"{name} has no source to apply to: give --source SPEC "
                                     "or a join.source block")
    if bin_path is not None and source is not None:
        raise Fail.permanent("both name the training binary: a binary path (--bin / join.bin) "
                             "and a source (--source / join.source); keep one")
    if dial and bin_path is None and source is None:
        raise Fail.permanent("no training binary: give --bin PATH or --source SPEC "
                             "(or join.bin / join.source in fdl.yml)")

    # 5. devices.
    devices = parse_devices(flags.devices) if flags.devices is not None else block.devices

    # 7. the plain "flag else block" fields.
    def pick(flag, blk):
        return flag if flag is not None else blk

    libtorch_raw = pick(flags.libtorch, block.libtorch)
    libtorch = None
    if libtorch_raw is not None:
        try:
            libtorch = variants.parse_token(libtorch_raw)
        except Fail as e:
            where = "--libtorch" if flags.libtorch is not None else "join.libtorch"
            raise Fail.permanent(e.message.replace("--libtorch", where, 1)) from None

    share = flags.gpu_ram_share
    if share is not None:
        try:
            share = check_share(share, "--gpu-ram-share")
        except ValueError as e:
            raise Fail.permanent(str(e)) from None
    else:
        share = block.gpu_ram_share

    from . import mirrors as _mirrors  # noqa: PLC0415 - one spelling of NAME=URL
    mirrors = _mirrors.parse(flags.mirrors, dict(fdl.mirrors))

    # 8. host.
    host = pick(flags.host, block.host)
    if host is None or not host.strip():
        host = hostname()

    return JoinSettings(
        host=host.strip(),
        controller_host=chost,
        controller_port=cport,
        controller_defaulted=defaulted,
        ssh=ssh,
        token=pick(flags.token, block.token) if dial else None,
        bin=bin_path,
        source=source,
        libtorch=libtorch,
        lock=flags.lock if flags.lock is not None else fdl.lock,
        mirrors=mirrors,
        home=flags.home or (env.get("FLODL_HOME") or "").strip() or fdl.home or None,
        devices=devices,
        persist=dial and (flags.persist or block.persist),                       # 9.
        data_path=pick(flags.data_path, block.data_path),
        data_source=pick(flags.data_source, block.data_source),
        gpu_ram_share=share,
        sig_probe=dial and (not flags.no_sig_probe) and (block.sig_probe is not False),  # 10.
        args=tuple(flags.tail) if flags.tail is not None else (block.args if dial else ()),  # 6.
        project_root=str(project.root) if project else None,
    )


def resolve_prepare(flags: JoinFlags, project: Project | None, *,
                    hostname: Callable[[], str] = local_hostname,
                    environ: Mapping[str, str] | None = None) -> JoinSettings:
    """The non-dial subset for `fdlenv prepare`: libtorch, lock, mirrors, source*,
    bin, devices, data-path, data-source, ssh/identity, host, home."""
    return resolve(flags, project, hostname=hostname, environ=environ, dial=False)


def check_given_bin(settings: JoinSettings, cwd: Path | str | None = None) -> JoinSettings:
    """anchor-join §3.1 step 4, once before the loop: a given `bin` must be a regular
    file. It is made absolute here, so the existence check and the exec agree
    (the reference checks relative to cwd but execs through PATH)."""
    if settings.bin is None:
        return settings
    base = Path(cwd if cwd is not None else os.getcwd())
    p = Path(settings.bin).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise Fail.permanent(f"training binary {settings.bin} is not a file (looked at {p}); "
                             "fix --bin / join.bin, or build it with --source")
    return settings._replace(bin=str(p.absolute()))
