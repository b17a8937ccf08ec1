"""Validation of the merged project mapping into the config model.

Why it exists: fdl.yml's `join:` block is flodl's schema and is strict, so an
unknown key or a wrong type is a load error here exactly where flodl's
`fdl join` would refuse the file. fdlenv's own settings live in a separate
top-level `fdlenv:` block, which flodl never reads. The parts of `cluster:`
that would make flodl's loader fail are checked too, so a file fdlenv accepts
is one `fdl join` accepts.

What order matters: this runs only after `load` has merged the base file, its
`inherit-from:` chain and the `FDL_ENV` overlay, so an overlay may fix a base
that alone would be invalid. Errors are `Fail.permanent` naming the key path
(`join.ssh.port: ...`); `load` turns them into `cannot load <file>: ...`.
Relative `fdlenv:` paths are anchored at the project root here, once.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, TypeVar

from ..base.errors import Fail
from .grammar import check_share, type_name
from .model import CLUSTER_JOIN_KEYS, CLUSTER_JOIN_START, FDLENV_KEYS, JOIN_KEYS, SOURCE_KEYS, SSH_KEYS, FdlenvBlock, JoinBlock, SourceSpec, SshConfig

_T = TypeVar("_T")


def _strict_keys(d: Any, where: str, allowed: tuple[str, ...]) -> dict[str, Any]:
    if not isinstance(d, dict):
        raise Fail.permanent(f"{where}: expected a mapping, got {type_name(d)}")
    for k in d:
        if k not in allowed:
            raise Fail.permanent(f"{where}: unknown key {k!r} (accepted: {', '.join(allowed)})")
    return d


def _optional(d: dict[str, Any], key: str, where: str, kind: type[_T], expected: str) -> _T | None:
    """`d[key]` when absent (None) or of `kind`; else a Fail naming `where.key`."""
    v = d.get(key)
    if v is None or isinstance(v, kind):
        return v
    shown = type_name(v) if kind is str else repr(v)
    raise Fail.permanent(f"{where}.{key}: expected {expected}, got {shown}")


def _opt_str(d: dict[str, Any], key: str, where: str) -> str | None:
    return _optional(d, key, where, str, "a string")


def _opt_bool(d: dict[str, Any], key: str, where: str) -> bool | None:
    return _optional(d, key, where, bool, "true or false")


def _int_in(v: Any, lo: int, hi: int) -> bool:
    return isinstance(v, int) and not isinstance(v, bool) and lo <= v <= hi


def parse_ssh_block(d: Any, where: str = "join.ssh") -> SshConfig:
    d = _strict_keys(d, where, SSH_KEYS)
    port = d.get("port")
    if port is not None and not _int_in(port, 1, 65535):
        raise Fail.permanent(f"{where}.port: expected a port number 1-65535, got {port!r}")
    opts = d.get("options")
    if opts is None:
        opts = []
    if not isinstance(opts, list) or not all(isinstance(o, str) for o in opts):
        raise Fail.permanent(f"{where}.options: expected a list of Key=Value strings")
    target = _opt_str(d, "target", where)
    if target and target.startswith("[") and target.endswith("]"):
        target = target[1:-1]   # an IPv6 host as `--ssh` spells it: kept without brackets
    return SshConfig(target=target, port=port, user=_opt_str(d, "user", where),
                     identity_file=_opt_str(d, "identity_file", where), options=tuple(opts))


def parse_source_block(d: Any, where: str = "join.source") -> SourceSpec:
    d = _strict_keys(d, where, SOURCE_KEYS)
    frm = _opt_str(d, "from", where)
    if frm is None:
        raise Fail.permanent(f"{where}: missing required key 'from' (the source spec)")
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
            raise Fail.permanent(f"{w}.devices: expected a list of device ids 0-255, got {devices!r}"
                             " (`all` exists only on the command line: leave devices out)")
        devices = tuple(devices)
    share = d.get("gpu_ram_share")
    if share is not None:
        share = check_share(share, f"{w}.gpu_ram_share")
    args = d.get("args")
    if args is None:
        args = []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise Fail.permanent(f"{w}.args: expected a list of strings")
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
    """Validate `fdlenv:` (lock, mirrors, home, token_file, frozen); relative paths anchor at the
    project root. `token_file` lives here, not in `join:`: flodl's strict `join:` schema
    would refuse the key, and with it the whole file, in `fdl join`."""
    if d is None:
        return FdlenvBlock()
    w = "fdlenv"
    d = _strict_keys(d, w, FDLENV_KEYS)
    mirrors = d.get("mirrors") or {}
    if not isinstance(mirrors, dict) or not all(
            isinstance(k, str) and k and isinstance(v, str) and v for k, v in mirrors.items()):
        raise Fail.permanent(f"{w}.mirrors: expected a mapping NAME: URL of non-empty strings")
    lock = _opt_str(d, "lock", w)
    home = _opt_str(d, "home", w)
    token_file = _opt_str(d, "token_file", w)
    if token_file is not None and not token_file.strip():
        raise Fail.permanent(f"{w}.token_file: expected the path of a file holding the session token, "
                         "got an empty string")
    frozen = d.get("frozen")
    if frozen is not None and not isinstance(frozen, bool):
        raise Fail.permanent(f"{w}.frozen: expected true or false, got {frozen!r}")
    return FdlenvBlock(lock=_anchor(lock, root) if lock else None, mirrors=dict(mirrors), frozen=frozen,
                       home=_anchor(home, root) if home else None,
                       token_file=_anchor(token_file, root) if token_file else None)


def _validate_cluster_join(j: Any, where: str) -> None:
    """`cluster.controller.join:`: flodl's strict ClusterJoin, whose `start` is an enum."""
    if j is None:
        return
    j = _strict_keys(j, where, CLUSTER_JOIN_KEYS)
    for key in ("min_rank_start", "join_timeout", "target_ranks", "max_join_timeout"):
        v = j.get(key)
        if v is not None and not _int_in(v, 0, 2**64 - 1):
            raise Fail.permanent(f"{where}.{key}: expected a whole number >= 0, got {v!r}")
    for key in ("open_admission", "discovery", "tunnel_only"):
        _opt_bool(j, key, where)
    _opt_str(j, "token", where)
    start = j.get("start")
    if start is not None and start not in CLUSTER_JOIN_START:
        raise Fail.permanent(f"{where}.start: expected one of {', '.join(CLUSTER_JOIN_START)}, "
                         f"got {start!r}")


def _validate_cluster(c: Any) -> None:
    """The parts of `cluster:` that make flodl's loader (and so `fdl join`) fail: the
    shares (finite, >= 0), a user-written `ranks:`, and `controller.join:` (its keys, their
    types and `start`). The rest of `cluster:` is the controller's business and passes."""
    if c is None:
        return
    if not isinstance(c, dict):
        raise Fail.permanent(f"cluster: expected a mapping, got {type_name(c)}")
    if c.get("gpu_ram_share") is not None:
        check_share(c["gpu_ram_share"], "cluster.gpu_ram_share")
    controller = c.get("controller")
    if controller is not None:
        if not isinstance(controller, dict):
            raise Fail.permanent(f"cluster.controller: expected a mapping, got {type_name(controller)}")
        _validate_cluster_join(controller.get("join"), "cluster.controller.join")
    workers = c.get("workers")
    if workers is None:
        return
    if not isinstance(workers, list):
        raise Fail.permanent(f"cluster.workers: expected a list of worker mappings, got {type_name(workers)}")
    for i, wk in enumerate(workers):
        if not isinstance(wk, dict):
            raise Fail.permanent(f"cluster.workers[{i}]: expected a mapping, got {type_name(wk)}")
        if wk.get("gpu_ram_share") is not None:
            check_share(wk["gpu_ram_share"], f"cluster.workers[{i}].gpu_ram_share")
        if "ranks" in wk and wk["ranks"] != []:
            raise Fail.permanent(f"cluster.workers[{i}].ranks: not user configuration (ranks are "
                             "computed from the probed device counts at launch); remove the key")


def validate(data: dict[str, Any], root: Path) -> tuple[JoinBlock | None, FdlenvBlock]:
    """The merged top-level mapping -> its `join:` and `fdlenv:` blocks, in that order,
    then the `cluster:` checks. Other top-level keys are flodl's and pass through."""
    join = parse_join_block(data.get("join"))
    fdl = parse_fdlenv_block(data.get("fdlenv"), root)
    _validate_cluster(data.get("cluster"))
    return join, fdl
