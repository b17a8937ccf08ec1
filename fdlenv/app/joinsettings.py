"""Flags over the `join:` block: the effective settings of one `fdlenv join` run.

Why it exists: every setting can come from the command line or from fdl.yml,
and the rule is flodl's `fdl join` rule: a flag given wins, else the `join:`
field, else the default; fdlenv's own settings (lock, mirrors, home) come from
the separate `fdlenv:` block the same way. `resolve()` is pure (the host name
and the environment are injected, nothing is stat'ed), which is what makes it
table-testable. Every error is `Fail.permanent` (exit 2, no dial, no re-dial).

Order that matters: `resolve()` runs its steps top to bottom, and when several
things are wrong the first step's error is the one reported.
1. the identity guard: `--identity` with no ssh hop at all is refused first;
2. the ssh hop (it decides step 3's default: with no address named, the
   controller is 127.0.0.1:1337, and it counts as "defaulted" only without a
   hop);
3. the controller address (a dial only);
4. the training binary or the source that builds it (one, not both; a dial
   needs one of them, `fdlenv prepare` may name neither);
5. the devices, then libtorch, gpu_ram_share, the token (or the file to read it from:
   `config.token`) and mirrors;
6. the host name, last, so `hostname()` runs only for settings that are valid;
7. the fields that cannot fail (lock, home, persist, data paths,
   sig-probe, args).
`check_given_bin()` and `config.token.read_chosen_file()` (the token file) are the impure
steps, run once by the caller afterwards.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, TypeVar
from collections.abc import Callable, Mapping

from ..base.errors import Fail
from ..config.grammar import check_distinct, check_share, local_hostname, parse_controller, parse_devices, parse_ssh_spec
from ..config.model import DEFAULT_CONTROLLER_HOST, DEFAULT_CONTROLLER_PORT, JoinBlock, JoinFlags, JoinSettings, Project, SourceSpec, SshConfig
from ..names import variants
from ..names.variants import Libtorch

if TYPE_CHECKING:
    from .settings import Settings

T = TypeVar("T")


def resolve(flags: JoinFlags, project: Project | None, *,
            hostname: Callable[[], str] = local_hostname,
            environ: Mapping[str, str] | None = None,
            dial: bool = True) -> JoinSettings:
    """Flags over the `join:` block, plus the `fdlenv:` block.

    Pure apart from calling `hostname()` when no host is named. With
    `dial=False` (the `fdlenv prepare` subset) the controller, token, persist,
    sig-probe and args are not resolved, and naming neither a binary nor a
    source is legal (baking only an environment). Home, mirrors and lock are
    settled by `fdlenv.app.settings`, as for every other command.
    """
    env = os.environ if environ is None else environ
    block = (project.join if project else None) or JoinBlock()

    _identity_guard(flags, block)
    ssh = _ssh(flags, block)
    chost, cport, defaulted = _controller(flags, block, ssh) if dial else (None, None, False)
    bin_path, source = _binary_and_source(flags, block, dial)
    devices_field = "--devices" if flags.devices is not None else "join.devices"
    devices = _devices(flags, block)
    libtorch = _libtorch(flags, block)
    share = _gpu_ram_share(flags, block)
    token, token_file, token_field = (_token(flags, block, project, env) if dial
                                      else (None, None, None))
    store = _store(flags, project, env)
    host = _host(flags, block, hostname)

    return JoinSettings(
        host=host,
        controller_host=chost,
        controller_port=cport,
        controller_defaulted=defaulted,
        ssh=ssh,
        token=token,
        bin=bin_path,
        source=source,
        libtorch=libtorch,
        lock=store.lock_given,
        mirrors=store.mirrors,
        home=str(store.home.root),
        frozen=store.frozen,
        devices=devices,
        devices_field=devices_field,
        persist=_persist(flags, block, dial),
        data_path=_pick(flags.data_path, block.data_path),
        data_source=_pick(flags.data_source, block.data_source),
        gpu_ram_share=share,
        sig_probe=_sig_probe(flags, block, dial),
        args=_args(flags, block, dial),
        project_root=str(project.root) if project else None,
        token_file=token_file,
        token_file_field=token_field,
    )


def resolve_prepare(flags: JoinFlags, project: Project | None, *,
                    hostname: Callable[[], str] = local_hostname,
                    environ: Mapping[str, str] | None = None) -> JoinSettings:
    """The non-dial subset for `fdlenv prepare`: libtorch, lock, mirrors, source*,
    bin, devices, data-path, data-source, ssh/identity, host, home."""
    return resolve(flags, project, hostname=hostname, environ=environ, dial=False)


def check_given_bin(settings: JoinSettings, cwd: Path | str | None = None) -> JoinSettings:
    """Once before the attempt loop: a given `bin` must be a regular file. It is made
    absolute here, so the existence check and the exec agree (flodl checks relative
    to the cwd but execs through PATH)."""
    if settings.bin is None:
        return settings
    base = Path(cwd if cwd is not None else os.getcwd())
    p = Path(settings.bin).expanduser()
    p = p if p.is_absolute() else base / p
    if not p.is_file():
        raise Fail.permanent(f"training binary {settings.bin} is not a file (looked at {p}); "
                             "fix --bin / join.bin, or build it with --source")
    return settings._replace(bin=str(p.absolute()))


# --------------------------------------------------------------------- the steps

def _pick(flag: T | None, blk: T | None) -> T | None:
    """The plain rule: the flag when given, else the block's field."""
    return flag if flag is not None else blk


def _identity_guard(flags: JoinFlags, block: JoinBlock) -> None:
    """Step 1: `--identity` names a key for an ssh hop, so one must exist somewhere."""
    if flags.identity is not None and flags.ssh is None and block.ssh is None:
        raise Fail.permanent("--identity needs an ssh hop: give --ssh [user@]host[:port] "
                             "or a join.ssh block")


def _ssh(flags: JoinFlags, block: JoinBlock) -> SshConfig | None:
    """Step 2: `--ssh` replaces the block's target/port/user but keeps its identity file
    and options; `--identity` wins last. No StrictHostKeyChecking is added here: the tunnel
    accepts a new host key on first use only where neither these options nor ~/.ssh/config
    set it for the host (`join.sshplan`; flodl's `-o accept-new` beats ssh_config, fdlenv's
    does not: stricter)."""
    if flags.ssh is not None:
        spec = parse_ssh_spec(flags.ssh)
        inherit = block.ssh or SshConfig()
        ssh = spec._replace(identity_file=inherit.identity_file, options=inherit.options)
    elif block.ssh is not None:
        if not block.ssh.target:
            raise Fail.permanent("join.ssh has no target: set join.ssh.target "
                                 "(or pass --ssh [user@]host[:port])")
        ssh = block.ssh
    else:
        return None
    if flags.identity is not None:
        ssh = ssh._replace(identity_file=flags.identity)
    return ssh


def _controller(flags: JoinFlags, block: JoinBlock,
                ssh: SshConfig | None) -> tuple[str, int, bool]:
    """Step 3 (a dial only): host, port, and whether it was defaulted (no address named
    and no ssh hop, so the agent dials this box's own default port)."""
    named = _pick(flags.controller, block.controller)
    if named is None:
        return DEFAULT_CONTROLLER_HOST, DEFAULT_CONTROLLER_PORT, ssh is None
    host, port = parse_controller(named, "CONTROLLER" if flags.controller is not None
                                  else "join.controller")
    return host, port, False


def _source(flags: JoinFlags, block: JoinBlock) -> SourceSpec | None:
    """`--source` over `join.source`, and each `--source-cwd/-build/-bin` over its field
    of whichever names the spec; those three alone, with no source, are refused."""
    b = block.source
    if flags.source is None and b is None:
        for name, val in (("--source-cwd", flags.source_cwd),
                          ("--source-build", flags.source_build),
                          ("--source-bin", flags.source_bin)):
            if val is not None:
                raise Fail.permanent(f"{name} has no source to apply to: give --source SPEC "
                                     "or a join.source block")
        return None
    b = b or SourceSpec(from_="")
    return SourceSpec(from_=_pick(flags.source, b.from_) or "",
                      cwd=_pick(flags.source_cwd, b.cwd),
                      build=_pick(flags.source_build, b.build),
                      bin=_pick(flags.source_bin, b.bin))


def _binary_and_source(flags: JoinFlags, block: JoinBlock,
                       dial: bool) -> tuple[str | None, SourceSpec | None]:
    """Step 4: the training binary is a path or a source that builds it, never both;
    a dial needs one of the two."""
    bin_path = _pick(flags.bin, block.bin)
    source = _source(flags, block)
    if bin_path is not None and source is not None:
        raise Fail.permanent("both name the training binary: a binary path (--bin / join.bin) "
                             "and a source (--source / join.source); keep one")
    if dial and bin_path is None and source is None:
        raise Fail.permanent("no training binary: give --bin PATH or --source SPEC "
                             "(or join.bin / join.source in fdl.yml)")
    return bin_path, source


def _devices(flags: JoinFlags, block: JoinBlock) -> tuple[int, ...] | None:
    """Step 5: `--devices` (where `all` means None) over `join.devices`, each id once. Whether
    each names a GPU found is prepare's, beside its GPU gate (`prepare.check_devices`)."""
    if flags.devices is not None:
        return check_distinct(parse_devices(flags.devices), "--devices")
    return check_distinct(block.devices, "join.devices")


def _libtorch(flags: JoinFlags, block: JoinBlock) -> Libtorch | None:
    """`--libtorch` (parsed by the front) over `join.libtorch`, parsed here, once; an error names
    the field."""
    if flags.libtorch is not None or block.libtorch is None:
        return flags.libtorch
    return variants.parse(block.libtorch, where="join.libtorch")


def _gpu_ram_share(flags: JoinFlags, block: JoinBlock) -> float | None:
    """`--gpu-ram-share` checked like the block's (already checked at load)."""
    if flags.gpu_ram_share is None:
        return block.gpu_ram_share
    return check_share(flags.gpu_ram_share, "--gpu-ram-share")


def _token(flags: JoinFlags, block: JoinBlock, project: Project | None,
           env: Mapping[str, str]) -> tuple[str | None, str | None, str | None]:
    """`--token` > `--token-file` > `fdlenv.token_file` > `$CREDENTIALS_DIRECTORY/fdlenv-token`
    > `join.token` (why: `config.token`). Returns (token, file still to read, its field); a
    token is one line of printable characters (a newline would split the secret where the
    agent and the controller read it). Nothing is read or stat'ed here."""
    from ..config.token import CREDENTIAL_FIELD, credential_path

    if flags.token is None:
        fdl_file = project.fdlenv.token_file if project is not None else None
        if flags.token_file is not None:
            return None, flags.token_file, "--token-file"
        if fdl_file is not None:
            return None, fdl_file, "fdlenv.token_file"
    token = _pick(flags.token, block.token)
    if token is not None and any(ord(c) < 0x20 or ord(c) == 0x7f for c in token):
        where = "--token" if flags.token is not None else "join.token"
        raise Fail.permanent(f"{where}: the token holds a newline or another control character; "
                             "accepted: one line of printable characters")
    cred = credential_path(env) if flags.token is None else None
    return token, cred, CREDENTIAL_FIELD if cred else None


def _store(flags: JoinFlags, project: Project | None, env: Mapping[str, str]) -> Settings:
    """Home, mirrors and lock as every command settles them (`fdlenv.app.settings`): --home >
    $FLODL_HOME > fdlenv.home > ~/.flodl; each --mirror over fdlenv.mirrors; --lock > fdlenv.lock."""
    from .settings import resolve as store_settings
    return store_settings(flags.home, list(flags.mirrors), flags.lock, project=project, environ=env,
                          frozen=flags.frozen)


def _host(flags: JoinFlags, block: JoinBlock, hostname: Callable[[], str]) -> str:
    """Step 6: `--host` over `join.host`; blank or absent asks `hostname()`."""
    host = _pick(flags.host, block.host)
    if host is None or not host.strip():
        host = hostname()
    return host.strip()


def _persist(flags: JoinFlags, block: JoinBlock, dial: bool) -> bool:
    """`--persist` or `join.persist`: either turns re-dialing on; never without a dial."""
    return dial and (flags.persist or block.persist)


def _sig_probe(flags: JoinFlags, block: JoinBlock, dial: bool) -> bool:
    """On unless `--no-sig-probe` or `join.sig_probe: false`; never without a dial."""
    return dial and (not flags.no_sig_probe) and (block.sig_probe is not False)


def _args(flags: JoinFlags, block: JoinBlock, dial: bool) -> tuple[str, ...]:
    """Everything after `--` replaces `join.args` whole (even an empty tail); the block's
    args are used only by a dial."""
    return tuple(flags.tail) if flags.tail is not None else (block.args if dial else ())
