"""Planning the ssh route: which hops, in what order, with which settings.

Why apart from the tunnel: planning is pure (join.ssh + ~/.ssh/config in, a
`HopPlan` out, no network), so it is tested without a server, and the tunnel
only has to walk the route. paramiko (its ssh_config parser) is imported only
when a ~/.ssh/config file exists.

Order, OpenSSH's "the first obtained value wins": `join.ssh.options` (they
are `-o` options on flodl's ssh command line, before `-p`/`-l`/`-i`), then the
spec's port/user/identity_file, then the `Host` entries of ~/.ssh/config, then
the defaults.

The route: the target's ProxyJump or ProxyCommand (from the options, else
~/.ssh/config) decides how the first hop is reached. If both are given, the one
obtained first wins, as in OpenSSH: an option before ~/.ssh/config, and inside
either the one written first; `none` is a value too (it disables both).
ProxyJump is a comma-separated list of `[user@]host[:port]` or
`ssh://[user@]host[:port]` hops, connected in list order. Each jump hop takes
its HostName, Port, User, IdentityFile, HostKeyAlias (and IdentitiesOnly) from
its own ~/.ssh/config entry, as `ssh -J` does; the user/port written in the
list win. As in OpenSSH (whose jump ssh for hop N is run with `-J` hops 1..N-1)
only the FIRST hop of a list honours its own ProxyJump/ProxyCommand from
~/.ssh/config; the others are reached through the list. Settings of the run as
a whole (known_hosts files, StrictHostKeyChecking, ConnectTimeout,
ServerAliveInterval, Compression) are the target's and apply to every hop, and
the join's own identity file is offered to jump hops after their IdentityFile.
A route longer than MAX_JUMPS jump hops (a ProxyJump loop in ~/.ssh/config) is
a permanent failure. ProxyCommand and ProxyJump values expand %h %p %r %n %k %%
with the hop's final values.

Identity files named by the join (join.ssh.identity_file / --identity, or an
IdentityFile option) are `required`: the tunnel checks they exist before
dialing. IdentityFile lines of ~/.ssh/config that name no file are skipped
silently, as OpenSSH does.
"""

from __future__ import annotations

import getpass
import os
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, TypeVar, overload

from ..config.model import SshConfig
from ..base.errors import Fail

if TYPE_CHECKING:
    import paramiko

TUNNEL_READY_BUDGET = 20.0     # connect + auth + forward check, seconds
DEFAULT_KEEPALIVE = 30          # ServerAliveInterval
DEFAULT_SSH_PORT = 22
MAX_JUMPS = 8                   # jump hops in one route, loops in ~/.ssh/config included
GLOBAL_KNOWN_HOSTS = ("/etc/ssh/ssh_known_hosts", "/etc/ssh/ssh_known_hosts2")

# Options OpenSSH has that make no sense in-process; accepted silently.
_SILENT = {"exitonforwardfailure", "serveralivecountmax", "tcpkeepalive", "loglevel",
           "addressfamily", "controlmaster", "controlpath", "controlpersist",
           "requesttty", "forwardagent", "forwardx11", "userknownhostsfile2"}
_SUPPORTED = {"stricthostkeychecking", "userknownhostsfile", "identityfile", "port", "user",
              "hostname", "connecttimeout", "serveraliveinterval", "batchmode",
              "identitiesonly", "compression", "hostkeyalias", "proxyjump", "proxycommand",
              "globalknownhostsfile"}
_JUMP_FORMS = "[user@]host[:port] or ssh://[user@]host[:port], comma-separated, or none"


def parse_options(options: Iterable[str]) -> dict[str, str]:
    """`Key=Value` / `Key Value` strings -> {lowercase key: value}; first value wins (OpenSSH).

    The dict keeps the order the keys were first given (ProxyJump vs ProxyCommand needs it).
    """
    out: dict[str, str] = {}
    for opt in options:
        # the key ends at the first blank or "=" (a ProxyCommand value may hold both)
        m = re.match(r"\s*([^\s=]+)(?:\s*=\s*|\s+)(.*)", opt)
        k, v = (m.group(1).lower(), m.group(2).strip()) if m else (opt.strip().lower(), "")
        if k and k not in out:
            out[k] = v
    return out


@dataclass
class HopPlan:
    """One hop of the route (the target carries the jump hops before it in `via`)."""
    label: str                 # how messages name the hop: user@host:port
    hostname: str
    port: int
    user: str | None
    key_files: list[str]
    known_hosts: list[str]     # the first is where new keys are remembered
    strict: str                # accept-new | yes | no
    connect_timeout: float
    keepalive: int
    look_for_keys: bool
    compress: bool
    host_key_alias: str | None
    warnings: list[str] = field(default_factory=list)
    name: str = ""             # as written (the ssh_config Host lookup key)
    required_keys: list[str] = field(default_factory=list)
    global_known_hosts: list[str] = field(default_factory=lambda: list(GLOBAL_KNOWN_HOSTS))
    proxy_command: str | None = None   # only ever on the first hop of a route
    via: list[HopPlan] = field(default_factory=list)

    @property
    def key_name(self) -> str:
        """The name the host key is looked up and remembered under (as OpenSSH writes it)."""
        if self.host_key_alias:
            return self.host_key_alias
        host = self.hostname.lower()
        return host if self.port == DEFAULT_SSH_PORT else f"[{host}]:{self.port}"

    def route(self) -> list[HopPlan]:
        """Every hop in connection order: the jump hops, then this one."""
        return [*self.via, self]


_N = TypeVar("_N", int, float)
_Entry = dict[str, str | None]   # a Host entry's text settings (None: paramiko's `ProxyCommand none`)


@overload
def _first(*vals: str | None) -> str | None: ...
@overload
def _first(*vals: str | float | None) -> str | float | None: ...   # a setting, or a numeric default
def _first(*vals: str | float | None) -> str | float | None:
    return next((v for v in vals if v not in (None, "")), None)


def _number(value: str | float | None, what: str, kind: Callable[[str | float], _N]) -> _N:
    try:
        n = kind("" if value is None else value)   # None, like "", is not a number
    except (TypeError, ValueError):
        raise Fail.permanent(f"{what}: {value!r} is not a number") from None
    if n < 0:
        raise Fail.permanent(f"{what}: {value!r} is negative")
    return n


def _port(value: str | float | None, what: str) -> int:
    n = _number(value, what, int)
    if not 1 <= n <= 65535:
        raise Fail.permanent(f"{what}: port {value} is outside 1-65535")
    return n


def _local_user() -> str:
    try:
        return getpass.getuser()
    except Exception:  # noqa: BLE001 - no USER and no passwd entry (bare containers)
        return ""


_SHELL_CHARS = set("'`\"$\\;&<>|(){}")


def check_name(value: str | None, field: str, what: str) -> None:
    """OpenSSH's rule for a host or user name that may reach a shell through %h/%r/%n/%k:
    no shell metacharacter, blank or control character, and no leading '-'."""
    if value and (value.startswith("-") or any(c in _SHELL_CHARS or c.isspace() or not c.isprintable()
                                               for c in value)):
        raise Fail.permanent(f"{what}: {field} {value!r} contains invalid characters (as OpenSSH, "
                             "fdlenv refuses shell metacharacters, blanks and a leading '-' in host "
                             "and user names)")


def expand_tokens(value: str, hop: HopPlan, what: str) -> str:
    """ProxyCommand/ProxyJump tokens: %h host, %p port, %r user, %n name as written,
    %k HostKeyAlias (else the name), %% a percent sign; anything else is refused."""
    table = {"%": "%", "h": hop.hostname, "p": str(hop.port), "r": hop.user or _local_user(),
             "n": hop.name or hop.hostname, "k": hop.host_key_alias or hop.name or hop.hostname}
    out, i = [], 0
    while i < len(value):
        c = value[i]
        if c != "%":
            out.append(c)
            i += 1
            continue
        tok = value[i + 1:i + 2]
        if tok not in table:
            raise Fail.permanent(f"{what}: unknown token %{tok} in {value!r} (fdlenv expands "
                                 "%h %p %r %n %k and %%)")
        check_name(table[tok], {"h": "host name", "r": "user name", "n": "host", "k": "HostKeyAlias"}
                   .get(tok, "value"), what)
        out.append(table[tok])
        i += 2
    return "".join(out)


def parse_jump(spec: str, what: str) -> tuple[str | None, str, int | None]:
    """One ProxyJump hop -> (user, host, port); a malformed one is a permanent failure."""
    s = spec.strip()
    bad = f"{what}: ProxyJump hop {spec!r}"
    if s.lower().startswith("ssh://"):
        s = s[len("ssh://"):].rstrip("/")
        if "/" in s:
            raise Fail.permanent(f"{bad} has a path; use {_JUMP_FORMS}")
    user = None
    if "@" in s:
        user, s = s.rsplit("@", 1)
        if not user:
            raise Fail.permanent(f"{bad} has an empty user before @; use {_JUMP_FORMS}")
    port = None
    if s.startswith("["):
        host, close, rest = s[1:].partition("]")
        if not close or (rest and not rest.startswith(":")):
            raise Fail.permanent(f"{bad} is not a bracketed [address]:port; use {_JUMP_FORMS}")
        if rest:
            port = _port(rest[1:], bad)
    elif s.count(":") == 1:
        host, p = s.split(":")
        port = _port(p, bad)
    else:
        host = s       # a bare name, or a bare IPv6 address (no port then)
    if not host:
        raise Fail.permanent(f"{bad} has no host; use {_JUMP_FORMS}")
    return user, host, port


class _Config:
    """~/.ssh/config, read once per plan; a broken file warns and counts as empty."""

    def __init__(self, path: str, warnings: list[str]):
        self._cfg: paramiko.SSHConfig | None = None
        self._path = path
        self._warnings = warnings
        if not os.path.isfile(path):
            return
        try:
            import paramiko

            class Raw(paramiko.SSHConfig):
                # keep %-tokens of the proxy keys: they are expanded with the FINAL values
                TOKENS_BY_CONFIG_KEY = {k: v for k, v in
                                        paramiko.SSHConfig.TOKENS_BY_CONFIG_KEY.items()
                                        if k not in ("proxycommand", "proxyjump")}
            self._cfg = Raw.from_path(path)
        except Exception as e:  # noqa: BLE001 - a broken ssh config must not stop the dial
            warnings.append(f"ignoring {path}: cannot parse it ({e})")

    def lookup(self, name: str) -> tuple[_Entry, list[str]]:
        """`name`'s text settings, in the order obtained, and its IdentityFile list (paramiko's own)."""
        if self._cfg is None:
            return {}, []
        try:
            raw: Mapping[str, object] = self._cfg.lookup(name)
        except Exception as e:  # noqa: BLE001
            self._warnings.append(f"ignoring {self._path} for {name}: {e}")
            return {}, []
        files = raw.get("identityfile")
        return ({k: v for k, v in raw.items() if v is None or isinstance(v, str)},
                [str(f) for f in files] if isinstance(files, list) else [])


def _proxy_choice(*sources: Mapping[str, str | None]) -> tuple[str, str | None] | None:
    """('jump' | 'command', value or None for `none`) obtained first, or None when neither.

    Each source is a dict in the order its keys were first obtained (parse_options,
    paramiko's lookup), so the first proxy key met is the one OpenSSH would keep."""
    for src in sources:
        for k in src:
            if k in ("proxyjump", "proxycommand"):
                v = src[k]
                v = None if v is None or v.strip().lower() == "none" else v.strip()
                return ("jump" if k == "proxyjump" else "command"), v
    return None


def plan_hop(ssh: SshConfig, *, ssh_config_path: str | None = None,
             home: str | None = None) -> HopPlan:
    """User options > the spec's port/user/identity > ~/.ssh/config > defaults (+ the route)."""
    home = home or os.path.expanduser("~")
    opts = parse_options(ssh.options)
    target = ssh.target or ""
    what = f'ssh host "{target}"'
    warnings: list[str] = []
    cfg = _Config(ssh_config_path or os.path.join(home, ".ssh", "config"), warnings)
    conf, conf_keys = cfg.lookup(target)
    for k, v in opts.items():
        if k == "batchmode" and v.lower() != "yes":
            warnings.append(f"{what}: ssh.options set BatchMode={v}; fdlenv "
                            "never prompts (keys only, no passwords), so it has no effect")
        elif k not in _SUPPORTED and k not in _SILENT:
            warnings.append(f"{what}: ssh option {k!r} is not supported by "
                            "fdlenv's in-process tunnel; ignored")
    if "proxyjump" in opts and "proxycommand" in opts:
        later = "ProxyCommand" if list(opts).index("proxyjump") < list(opts).index(
            "proxycommand") else "ProxyJump"
        warnings.append(f"{what}: ssh.options give both ProxyJump and ProxyCommand; the first "
                        f"given wins (as in OpenSSH), {later} is ignored")

    hostname = _first(opts.get("hostname"), conf.get("hostname") if conf.get("hostname") != target
                      else None) or target
    port = _port(_first(opts.get("port"), ssh.port, conf.get("port"), DEFAULT_SSH_PORT),
                 f"{what}: Port")
    user = _first(opts.get("user"), ssh.user, conf.get("user"))
    check_name(target, "host", what)
    check_name(hostname, "HostName", what)
    check_name(user, "User", what)
    required: list[str] = []
    for given in (opts.get("identityfile"), ssh.identity_file):
        if given and os.path.expanduser(given) not in required:
            required.append(os.path.expanduser(given))
    keys = list(required)
    for k in conf_keys:
        k = os.path.expanduser(k)
        if k not in keys and os.path.isfile(k):
            keys.append(k)
    kh = _first(opts.get("userknownhostsfile"),
                " ".join(ukh.split()) if (ukh := conf.get("userknownhostsfile")) else None
                ) or os.path.join(home, ".ssh", "known_hosts")
    gkh = _first(opts.get("globalknownhostsfile"), conf.get("globalknownhostsfile"))
    strict_raw = (_first(opts.get("stricthostkeychecking"), conf.get("stricthostkeychecking"),
                         "accept-new") or "").lower()
    timeout = _number(_first(opts.get("connecttimeout"), conf.get("connecttimeout"),
                             TUNNEL_READY_BUDGET), f"{what}: ConnectTimeout", float)
    plan = HopPlan(
        label=SshConfig(target=hostname, port=port if port != DEFAULT_SSH_PORT else None,
                        user=user).display(),
        hostname=hostname, port=port, user=user, key_files=keys, required_keys=required,
        known_hosts=[os.path.expanduser(p) for p in kh.split()],
        global_known_hosts=([os.path.expanduser(p) for p in gkh.split()] if gkh
                            else list(GLOBAL_KNOWN_HOSTS)),
        strict={"no": "no", "off": "no", "accept-new": "accept-new",
                "yes": "yes", "ask": "yes"}.get(strict_raw, "yes"),
        connect_timeout=timeout or TUNNEL_READY_BUDGET,     # 0: OpenSSH's "no timeout"
        keepalive=_number(_first(opts.get("serveraliveinterval"),
                                 conf.get("serveraliveinterval"), DEFAULT_KEEPALIVE),
                          f"{what}: ServerAliveInterval", int),
        look_for_keys=(_first(opts.get("identitiesonly"), conf.get("identitiesonly"),
                              "no") or "no").lower() != "yes",
        compress=(_first(opts.get("compression"), conf.get("compression"),
                         "no") or "no").lower() == "yes",
        host_key_alias=_first(opts.get("hostkeyalias"), conf.get("hostkeyalias")),
        warnings=warnings, name=target)
    _attach_proxy(plan, _proxy_choice(opts, conf), plan, opts, cfg, what, [target])
    return plan


def _attach_proxy(hop: HopPlan, choice: tuple[str, str | None] | None, target: HopPlan,
                  opts: dict[str, str], cfg: _Config, what: str, trail: list[str]) -> None:
    """Give `hop` its ProxyCommand, or put the jump hops that reach it in front of the route."""
    kind, value = choice or ("", None)
    if value is None:
        return
    where = what if hop is target else f"{what}: jump host {hop.label}"
    value = expand_tokens(value, hop, f"{where}: Proxy{'Jump' if kind == 'jump' else 'Command'}")
    if kind == "command":
        hop.proxy_command = value
        return
    specs = [s.strip() for s in value.split(",")]
    if not all(specs):
        raise Fail.permanent(f"{where}: ProxyJump {value!r} has an empty hop; use {_JUMP_FORMS}")
    trail = trail + [",".join(specs)]
    if len(target.via) + len(specs) > MAX_JUMPS:
        raise Fail.permanent(f"{what}: the ProxyJump route {' via '.join(trail)} is longer "
                             f"than {MAX_JUMPS} jump hops; is there a ProxyJump loop in "
                             "~/.ssh/config?")
    hops: list[HopPlan] = []
    first_conf: _Entry = {}
    for i, spec in enumerate(specs):
        jump, conf = _plan_jump(spec, target, opts, cfg, what)
        hops.append(jump)
        if i == 0:
            first_conf = conf
    target.via[0:0] = hops
    # OpenSSH: only the first hop of the list is reached by its own ssh_config route.
    _attach_proxy(hops[0], _proxy_choice(first_conf), target, opts, cfg, what, trail)


def _plan_jump(spec: str, target: HopPlan, opts: dict[str, str], cfg: _Config,
               what: str) -> tuple[HopPlan, _Entry]:
    user, host, port = parse_jump(spec, what)
    conf, conf_keys = cfg.lookup(host)
    hostname = _first(conf.get("hostname") if conf.get("hostname") != host else None) or host
    port = port or _port(_first(conf.get("port"), DEFAULT_SSH_PORT),
                         f"{what}: jump host {host}: Port")
    user = _first(user, conf.get("user"))
    for value, name in ((host, "jump host"), (hostname, "jump HostName"), (user, "jump user")):
        check_name(value, name, what)
    keys: list[str] = []
    for k in conf_keys:
        k = os.path.expanduser(k)
        if k not in keys and os.path.isfile(k):
            keys.append(k)
    keys += [k for k in target.required_keys if k not in keys]
    look = (_first(opts.get("identitiesonly"), conf.get("identitiesonly"), "no") or "no")
    hop = HopPlan(
        label=SshConfig(target=hostname, port=port if port != DEFAULT_SSH_PORT else None,
                        user=user).display(),
        hostname=hostname, port=port, user=user, key_files=keys,
        known_hosts=target.known_hosts, global_known_hosts=target.global_known_hosts,
        strict=target.strict, connect_timeout=target.connect_timeout,
        keepalive=target.keepalive, look_for_keys=look.lower() != "yes",
        compress=target.compress, host_key_alias=_first(conf.get("hostkeyalias")), name=host)
    return hop, conf
