"""`fdlenv recipe cloud-init`: a #cloud-config that boots a stock image into `fdlenv join`.

flodl's `fdl join-config --cloud-init` writes the same kind of file; what changed and why:
- the token is never inline: flodl writes it into the worker's fdl.yml (0644) and the whole
  file is a secret artifact. Here the unit takes it from a root-only file on the box through
  `LoadCredential=` (`--token-file`, default /etc/fdlenv/token), so the cloud-config holds
  no secret and may be shared or committed. The box gets that file from the provider's
  secret mechanism; `--embed-token LOCAL` writes it from user-data instead (root, 0600),
  which makes this output a secret again, and says so;
- fdlenv is installed with pip into a venv of the service user (`--install SPEC`, any pip
  requirement: a version, a wheel URL, a git URL; by default how the fdlenv making the
  recipe was installed, `plan.install_spec`), not fetched as one binary; the unit starts
  that venv's console script;
- what the join needs is installed too: git or rsync for its source; for a cargo build
  (the default recipe) build-essential, pkg-config and curl, and rustup's minimal stable
  toolchain as the service user unless cargo is already there, as flodl's does; the lock
  fdl.yml names (`fdlenv.lock`) is shipped beside it;
- the unit is `fdlenv recipe systemd`'s, hardened; AMD's device groups are added to the
  user on the box by `usermod` for those that exist there (a unit naming a group the box
  lacks would not start);
- no ssh key is minted (fdlenv has no join-config wizard): name the hop in the shipped
  fdl.yml, its key provisioned like the token.
Layout as flodl's: the user's home is /root or /home/<user>, fdl.yml goes to
`<home>/training` (the unit's working directory), the unit to
/etc/systemd/system/fdlenv-join.service; payloads owned by the user are written after the
user exists (`defer: true`). apt-based images (Debian, Ubuntu): `packages:` names theirs.
"""

from __future__ import annotations

import os

from .systemd import GPU_GROUPS, check_name, check_path, systemd_unit

TYPE_CHECKING = False
if TYPE_CHECKING:
    import yaml

    from ..config.model import JoinBlock, Project
    from .plan import JoinFacts

UNIT_PATH = "/etc/systemd/system/fdlenv-join.service"
DEFAULT_TOKEN_FILE = "/etc/fdlenv/token"
VENV = ".local/share/fdlenv"


def _dump(doc: dict[str, object]) -> str:
    """YAML with multi-line strings as literal blocks, keys in the order written."""
    import yaml

    class Dumper(yaml.SafeDumper):
        pass

    def text(dumper: Dumper, data: str) -> yaml.ScalarNode:
        style = "|" if "\n" in data else None
        return dumper.represent_scalar("tag:yaml.org,2002:str", data, style=style)

    def command(dumper: Dumper, data: _Command) -> yaml.SequenceNode:
        return dumper.represent_sequence("tag:yaml.org,2002:seq", data, flow_style=True)

    Dumper.add_representer(str, text)
    Dumper.add_representer(_Command, command)
    return yaml.dump(doc, Dumper=Dumper, sort_keys=False, default_flow_style=False, width=4096,
                     allow_unicode=True)


class _Command(list[str]):
    """A runcmd entry, written on one line: [systemctl, daemon-reload]."""


RUSTUP = ('command -v cargo >/dev/null || [ -x "$HOME/.cargo/bin/cargo" ] || '
          "curl --proto '=https' --tlsv1.2 -sSf https://sh.rustup.rs | sh -s -- -y --profile minimal")


def _packages(join: JoinBlock | None, tail_source: str | None, sshfs: bool, cargo: bool = False) -> list[str]:
    pkgs = ["python3-venv"]
    if cargo:
        pkgs += ["build-essential", "pkg-config", "curl"]
    if sshfs:
        pkgs.append("sshfs")
    src = tail_source or (join.source.from_ if join is not None and join.source else None) or ""
    if src.startswith("git+"):
        pkgs.append("git")
    if src.startswith("rsync://"):
        pkgs += ["rsync", "openssh-client"]
    return pkgs


def cloud_config(*, user: str, install: str, fdl_yml: str | None, project: Project | None, facts: JoinFacts,
                 join_args: list[str], workdir: str | None = None, home: str | None = None,
                 token_file: str | None = None, embedded_token: str | None = None,
                 tail_source: str | None = None, cargo: bool = False,
                 lock: tuple[str, str] | None = None) -> str:
    """The #cloud-config text. `project`/`fdl_yml`: the fdl.yml to ship (validated) and its
    text; `facts`: plan.JoinFacts; `embedded_token`: written to `token_file`, root-only."""
    user = check_name(user, "--user")
    uhome = "/root" if user == "root" else f"/home/{user}"
    workdir = check_path(workdir, "--workdir") if workdir else f"{uhome}/training"
    venv = f"{uhome}/{VENV}"
    if embedded_token is not None and token_file is None:
        token_file = DEFAULT_TOKEN_FILE
    unit = systemd_unit(user=user, uhome=uhome, workdir=workdir, join_args=join_args,
                        command=[f"{venv}/bin/fdlenv"], home=home,
                        rw_home=facts.home or home, token_file=token_file, sshfs=facts.sshfs,
                        mountpoint=facts.mountpoint, origin="cloud-init")
    files: list[dict[str, object]] = []
    if embedded_token is not None:
        files.append({"path": token_file, "owner": "root:root", "permissions": "0600",
                      "content": embedded_token + "\n"})
    if fdl_yml is not None:
        files.append({"path": f"{workdir}/fdl.yml", "owner": f"{user}:{user}",
                      "permissions": "0644", "defer": True, "content": fdl_yml})
    if lock is not None:
        name, text = lock
        files.append({"path": name if os.path.isabs(name) else os.path.normpath(f"{workdir}/{name}"),
                      "owner": f"{user}:{user}", "permissions": "0644", "defer": True, "content": text})
    files.append({"path": UNIT_PATH, "permissions": "0644", "content": unit})
    as_user = ["runuser", "-u", user, "--"]
    groups = " ".join(GPU_GROUPS)
    runcmd = [
        ["install", "-d", "-o", user, "-g", user, "-m", "0750", workdir],
        [*as_user, "python3", "-m", "venv", venv],
        [*as_user, f"{venv}/bin/pip", "install", "--quiet", install],
        *([[*as_user, "env", f"HOME={uhome}", "sh", "-c", RUSTUP]] if cargo else []),
        ["sh", "-c", f'for g in {groups}; do getent group "$g" >/dev/null && usermod -aG "$g" '
                     f'"$0"; done; true', user],
        ["systemctl", "daemon-reload"],
        ["systemctl", "enable", "--now", os.path.basename(UNIT_PATH)],
    ]
    doc: dict[str, object] = {}
    if user not in ("root", "ubuntu"):
        doc["users"] = ["default", {"name": user, "lock_passwd": True, "shell": "/bin/bash"}]
    doc["packages"] = _packages(project.join if project is not None else None, tail_source,
                                facts.sshfs, cargo)
    doc["write_files"] = files
    doc["runcmd"] = [_Command(c) for c in runcmd]
    head = [
        "#cloud-config",
        "# fdlenv join as a dial-in worker (generated by `fdlenv recipe cloud-init`).",
    ]
    in_argv = facts.token_in_clear == "--token"   # join takes it before any file (config.token)
    if in_argv:
        head.append("# SECRET: the unit's ExecStart holds the session token (`-- --token`); share this "
                    "like a password.")
    if embedded_token is not None:
        head.append(f"# SECRET: holds the session token ({token_file}); share it like a password.")
    elif token_file is not None and not in_argv:
        head += [f"# No secret here: the unit reads the token from {token_file} on the box",
                 "# (root, 0600); put it there with your provider's secret mechanism."]
    head += [
        "# fdlenv: pip install into the service user's venv, requirement: " + install.replace("\n", " "),
        "# Billing: where stopped instances are billed, FailureAction=poweroff (commented in the",
        "# unit) stops the work, not the meter.",
    ]
    return "\n".join(head) + "\n" + _dump(doc)
