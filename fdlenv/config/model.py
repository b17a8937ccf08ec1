"""The config model: the records every layer of the project config passes around.

Why it exists: the join loop, the tunnel, `prepare` and `source` need the
shapes (`SshConfig`, `JoinSettings`, ...) but not the loader, the yaml parser
or the resolver. Keeping the records here, with only the standard library
imported, keeps those modules cheap to import on every re-dial.

Records (`base.record`), not dataclasses: this module is on every re-dial, and importing
`dataclasses` alone costs more than fdlenv's whole fast path (see variants); a Record is
`typing.NamedTuple` to the type checker without importing `typing`.
Nothing here validates; `schema` and `grammar` do, `app.joinsettings.resolve` combines.
"""

from __future__ import annotations

from types import MappingProxyType

from ..base.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping
    from pathlib import Path

    from ..names.variants import Libtorch

DEFAULT_CONTROLLER_HOST = "127.0.0.1"
DEFAULT_CONTROLLER_PORT = 1337

# The keys each block accepts; anything else is a load error (flodl's schema).
JOIN_KEYS = ("controller", "ssh", "token", "bin", "source", "libtorch", "host",
             "devices", "persist", "data_path", "data_source", "gpu_ram_share",
             "sig_probe", "args")
SSH_KEYS = ("target", "port", "user", "identity_file", "options")
SOURCE_KEYS = ("from", "cwd", "build", "bin")
FDLENV_KEYS = ("lock", "mirrors", "home", "token_file", "frozen")
# `cluster.controller.join:` (flodl's ClusterJoin, deny_unknown_fields) and its `start:` values.
CLUSTER_JOIN_KEYS = ("min_rank_start", "join_timeout", "target_ranks", "max_join_timeout",
                     "open_admission", "discovery", "token", "tunnel_only", "start")
CLUSTER_JOIN_START = ("auto", "manual", "hybrid")


class SshConfig(Record):
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


class SourceSpec(Record):
    """`join.source` / `--source*`: where the training tree comes from and how it builds."""
    from_: str
    cwd: str | None = None
    build: str | None = None
    bin: str | None = None


class JoinBlock(Record):
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


class FdlenvBlock(Record):
    """The top-level `fdlenv:` block: fdlenv's own settings (paths already anchored)."""
    lock: str | None = None
    mirrors: Mapping[str, str] = MappingProxyType({})
    home: str | None = None
    token_file: str | None = None   # the session token's file (join.token's, kept out of fdl.yml)
    frozen: bool | None = None      # true: never lock on demand (locks only as shipped)


class Project(Record):
    path: Path                      # the base config file found by discovery
    root: Path                      # its directory (anchors relative fdlenv paths)
    join: JoinBlock | None
    fdlenv: FdlenvBlock
    overlay: Path | None = None     # the FDL_ENV overlay merged over the base


class JoinFlags(Record):
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
    libtorch: Libtorch | None = None   # --libtorch, parsed by the front
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
    token_file: str | None = None
    frozen: bool = False


class JoinSettings(Record):
    """Effective settings: each flag over its `join:` (or `fdlenv:`) field."""
    host: str
    controller_host: str | None = None      # None only when resolved without a dial
    controller_port: int | None = None
    controller_defaulted: bool = False      # no address named and no ssh hop
    ssh: SshConfig | None = None
    token: str | None = None
    bin: str | None = None
    source: SourceSpec | None = None
    libtorch: Libtorch | None = None        # parsed once; None = keep the active one
    lock: str | None = None
    mirrors: Mapping[str, str] = MappingProxyType({})
    home: str = ""                          # the home root, settled by fdlenv.app.settings
    devices: tuple[int, ...] | None = None  # None = all
    persist: bool = False
    data_path: str | None = None
    data_source: str | None = None
    gpu_ram_share: float | None = None
    sig_probe: bool = True
    args: tuple[str, ...] = ()
    project_root: str | None = None
    # A file still to be read for the token (`config.token.read_chosen_file`, by the first attempt) and
    # the field that named it, for its errors; `token` is then the fallback (join.token).
    frozen: bool = False                    # never lock on demand (settings.resolve)
    token_file: str | None = None
    token_file_field: str | None = None
    devices_field: str = "--devices"        # the field that named `devices`, for prepare's check
