"""The run manifest `.fdl-run.yml` at the root of a published tree.

Its presence is publish's commit point: absent means "nothing published yet"
(a state, not an error); present but unreadable or invalid is permanent.
Unknown fields are tolerated so a newer controller never strands an older
worker. Parsing YAML costs a 25 ms import, so the parsed fields are cached in
the source's state under the file's stat tuple and a re-dial reads no YAML.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any, NamedTuple, TypeVar

from ..base.errors import Fail
from .digest import MANIFEST, RACY_NS
from .state import State

_HEX = frozenset("0123456789abcdef")
_T = TypeVar("_T", str, int, bool)


class Digest(NamedTuple):
    """The tree digest a manifest names (a NamedTuple: it is on the re-dial path, see variants)."""

    sha256: str
    files: int
    bytes: int


class RunManifest(NamedTuple):
    """A validated `.fdl-run.yml` (a NamedTuple: it is on the re-dial path, see variants)."""

    bin: str
    cwd: str | None = None
    build: str | None = None
    args: tuple[str, ...] = ()
    origin: str | None = None
    rustc: str | None = None
    published_epoch: int | None = None
    run: str | None = None
    built: bool = False
    digest: Digest | None = None


def _want(where: str, name: str, value: object, kind: type[_T]) -> _T | None:
    """An optional field: None when absent, else `value` as `_need` checks it."""
    if value is None:
        return None
    return _need(where, name, value, kind)


def _need(where: str, name: str, value: object, kind: type[_T]) -> _T:
    """A field's `value`, of `kind` (a bool is no integer, "" no string), else a permanent
    failure naming the field and what it must be."""
    if kind is int and isinstance(value, bool) or not isinstance(value, kind) or value == "":
        what = {str: "a non-empty string", int: "an integer", bool: "true or false"}[kind]
        raise Fail.permanent(f"run manifest {where}: field `{name}` must be {what}, got {value!r}")
    return value


def from_mapping(data: object, where: str = MANIFEST) -> RunManifest:
    """Validate a parsed manifest; field errors are permanent and name the field."""
    if not isinstance(data, dict):
        raise Fail.permanent(f"run manifest {where}: expected a mapping of fields, got {type(data).__name__}")
    known = {f: data.get(f) for f in ("bin", "cwd", "build", "args", "origin", "rustc",
                                       "published_epoch", "run", "built", "digest")}
    args = known["args"] if known["args"] is not None else []
    if not isinstance(args, list) or not all(isinstance(a, str) for a in args):
        raise Fail.permanent(f"run manifest {where}: field `args` must be a list of strings, got {args!r}")
    digest = known["digest"]
    if digest is not None:
        if not isinstance(digest, dict):
            raise Fail.permanent(f"run manifest {where}: field `digest` must be a mapping (sha256, files, bytes)")
        sha = _need(where, "digest.sha256", digest.get("sha256"), str)
        if len(sha) != 64 or not set(sha) <= _HEX:
            raise Fail.permanent(f"run manifest {where}: field `digest.sha256` must be 64 lowercase hex digits")
        digest = Digest(sha, _need(where, "digest.files", digest.get("files"), int),
                        _need(where, "digest.bytes", digest.get("bytes"), int))
    return RunManifest(
        bin=_need(where, "bin", known["bin"], str),
        cwd=_want(where, "cwd", known["cwd"], str),
        build=_want(where, "build", known["build"], str),
        args=tuple(args),
        origin=_want(where, "origin", known["origin"], str),
        rustc=_want(where, "rustc", known["rustc"], str),
        published_epoch=_want(where, "published_epoch", known["published_epoch"], int),
        run=_want(where, "run", None if known["run"] is None else str(known["run"]), str),
        built=bool(_want(where, "built", known["built"], bool)),
        digest=digest,
    )


def parse(text: str, where: str = MANIFEST) -> RunManifest:
    from ..base.yamlfile import YamlError, loads   # 25 ms: only when the manifest changed since the last dial

    try:
        data = loads(text, where)
    except YamlError as e:
        raise Fail.permanent(f"run manifest {where} is not valid YAML ({e.where}); accepted: a YAML mapping of the manifest fields") from None
    return from_mapping(data, where)


def to_mapping(m: RunManifest) -> dict[str, Any]:
    """Plain JSON/YAML data for a manifest (unset fields left out)."""
    data = {k: v for k, v in m._asdict().items() if v is not None}
    data["args"] = list(m.args)
    if m.digest is not None:
        data["digest"] = m.digest._asdict()
    return data


def dump(m: RunManifest) -> str:
    """The manifest as publish writes it (comment header, then the fields)."""
    import yaml

    data = to_mapping(m)
    return "# flodl run manifest: written last by publish, its presence commits the run\n" + \
        yaml.safe_dump(data, sort_keys=False)


def read(tree: Path, state: State | None = None) -> RunManifest | None:
    """The tree's manifest, or None when nothing was published yet."""
    path = tree / MANIFEST
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    except OSError as e:
        raise Fail.permanent(f"run manifest {path} cannot be read: {e}") from None
    key = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
    cached = state.get("manifest") if state else None
    if cached and cached.get("stat") == key:
        return from_mapping(cached["data"], str(path))
    try:
        text = path.read_text()
    except (OSError, UnicodeDecodeError) as e:
        raise Fail.permanent(f"run manifest {path} cannot be read: {e}") from None
    m = parse(text, str(path))
    if state is not None and max(st.st_mtime_ns, st.st_ctime_ns) < time.time_ns() - RACY_NS:
        state.put("manifest", {"stat": key, "data": to_mapping(m)})
    return m


def _age(seconds: int) -> str:
    if seconds <= 90:
        return "just now"
    if seconds < 5400:
        return f"{seconds // 60}m ago"
    if seconds < 172800:
        return f"{seconds // 3600}h ago"
    return f"{seconds // 86400}d ago"


def summary(m: RunManifest, now: float | None = None) -> str:
    """The note a worker prints about the run it is about to build."""
    now = time.time() if now is None else now
    text = "run manifest: " + (f"run {m.run[:8]}… " if m.run else "") + f"bin {m.bin}"
    text += f" in {m.cwd}" if m.cwd else ""
    if m.published_epoch is not None and now >= m.published_epoch:
        text += f", published {_age(int(now - m.published_epoch))}"
    return text + ("" if m.built else " — NOT built by the controller")
