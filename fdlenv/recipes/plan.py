"""What a recipe must know about the join it deploys: from its flags, the `--` tail and fdl.yml.

Why it exists: the unit's sandbox has to leave writable what join writes and open
what an sshfs:// mount needs, and the recipe must say when a token would sit in
clear; all of that is decided by the same settings join reads at run time. Their
order is join's own: a tail flag (`-- --home X`) beats the unit's environment
(FLODL_HOME), which beats fdl.yml (`fdlenv.home`, `join.data_source`, `join.token`).
fdl.yml is read only where it is on this box: found from the unit's working
directory (systemd), or given as the file to ship (cloud-init).
"""

from __future__ import annotations

import os
from typing import NamedTuple

from ..base.errors import Fail
from ..config.token import CREDENTIAL
from .systemd import GPU_GROUPS, check_name, check_path, present_groups

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..config.model import Project

DEFAULT_MOUNT = "/flodl/data"      # flodl's mountpoint for a data_source without data_path


class JoinFacts(NamedTuple):
    sshfs: bool = False
    home: str | None = None          # the fdlenv home a tail flag or fdl.yml names
    token_in_clear: str | None = None   # "join.token" when one sits there (a tail --token is refused)
    token_file_in_tail: bool = False
    mountpoint: str | None = None    # where an sshfs:// source mounts (data_path, /flodl/data)


def tail_value(tail: list[str], flag: str) -> str | None:
    """The last value of `flag X` or `flag=X` in the join arguments."""
    found = None
    for i, a in enumerate(tail):
        if a == flag and i + 1 < len(tail):
            found = tail[i + 1]
        elif a.startswith(flag + "="):
            found = a[len(flag) + 1:]
    return found


def refuse_token(tail: list[str]) -> None:
    """A recipe never carries a token: `--token S` or `--token=S` anywhere in the join
    arguments (after the controller, after a second `--`: join's parser takes no
    abbreviation, so these are every spelling) is exit 2 before anything is printed. In
    ExecStart it would be readable through `ps`, `systemctl cat` and a user-data; the way
    in is the recipe's `--token-file`, which becomes the credential join reads. The
    token itself is never named in the message."""
    for a in tail:
        if a == "--token" or a.startswith("--token="):
            raise Fail.permanent(
                "-- --token: a recipe never carries the token (it would sit in the unit's ExecStart, "
                "readable through `ps`, `systemctl cat` and any user-data holding the unit); put it "
                "in a root-only file (0600) on the box and give the recipe --token-file FILE instead: "
                f"it becomes the systemd credential {CREDENTIAL} (LoadCredential={CREDENTIAL}:FILE), "
                f"which join reads as $CREDENTIALS_DIRECTORY/{CREDENTIAL}")


def facts(tail: list[str], project: Project | None, base: str) -> JoinFacts:
    """`project`: a loaded config.model.Project or None; `base`: where a relative tail path
    is read from (join's working directory). A token in `tail` is refused first
    (refuse_token), so nothing after this sees one there."""
    refuse_token(tail)
    join = project.join if project is not None else None
    source = tail_value(tail, "--data-source") or (join.data_source if join else None)
    home = tail_value(tail, "--home")
    if home is not None:
        home = os.path.join(base, os.path.expanduser(home))
    elif project is not None and project.fdlenv.home:
        home = project.fdlenv.home
    sshfs = bool(source and source.startswith("sshfs://"))
    mount = tail_value(tail, "--data-path") or (join.data_path if join else None) or DEFAULT_MOUNT
    _no_index_secret(tail, dict(project.fdlenv.mirrors) if project is not None else {})
    clear = "join.token" if join is not None and join.token else None
    return JoinFacts(sshfs=sshfs, home=os.path.normpath(home) if home else None,
                     token_in_clear=clear,
                     token_file_in_tail=tail_value(tail, "--token-file") is not None,
                     mountpoint=os.path.normpath(os.path.join(base, mount)))


def _no_index_secret(tail: list[str], mirrors: dict[str, str]) -> None:
    """A user:password or query string in an index URL (a `--` tail word, fdl.yml's mirrors) would
    sit in clear in the unit or the user-data: refused, pointing at the netrc credential."""
    words = [*tail, *(f"{k}={v}" for k, v in mirrors.items())]
    for word in words:
        head, sep, rest = word.partition("://")
        web = head.rpartition("=")[2].lower() in ("http", "https")   # not sshfs://user@host (ssh's own keys)
        if web and ("@" in rest.partition("/")[0] or "?" in rest):
            from ..base.netauth import shown
            raise Fail.permanent(
                f"{shown(word)}: a user:password or query string in an "
                "index URL would sit in clear in the unit or user-data (`systemctl cat`, `ps`); give the "
                "URL without it and the password in a root-only netrc passed as a systemd credential "
                "(docs/FLEET.md, \"Behind an authenticated mirror\")")


def without_token(text: str) -> str | None:
    """`text` (an fdl.yml) with `join.token` taken out, or None when it has none. The key's
    lines are cut where that leaves the same document less the token (comments and layout
    kept); anything else (a flow mapping) is written again from the parsed document."""
    import yaml

    data = yaml.safe_load(text)
    join = data.get("join") if isinstance(data, dict) else None
    if not isinstance(join, dict) or "token" not in join:
        return None
    want = dict(data, join={k: v for k, v in join.items() if k != "token"})
    root = yaml.compose(text)
    assert root is not None   # safe_load above found a mapping
    jnode = next(v for k, v in root.value if k.value == "join")
    key, value = next((k, v) for k, v in jnode.value if k.value == "token")
    lines = text.splitlines(keepends=True)
    end = value.end_mark.line + (1 if value.end_mark.column else 0)
    cut = "".join(lines[:key.start_mark.line] + lines[end:])
    try:
        if yaml.safe_load(cut) == want:
            return cut
    except yaml.YAMLError:
        pass
    return yaml.safe_dump(want, sort_keys=False)


# Flipped when fdlenv is published on the public index under its name (`pip install fdlenv`):
# until then an install from an index is a private one, which a new box may not reach.
ON_PUBLIC_INDEX = False


def install_spec() -> str:
    """How a new box installs the fdlenv running here: the git commit, the wheel URL or the
    index version it was installed from (PEP 610 direct_url.json). A local path or an editable
    checkout cannot be reached from a new box: that asks for --install."""
    import json
    from importlib import metadata

    try:
        dist = metadata.distribution("fdlenv")
    except metadata.PackageNotFoundError:
        dist = None
    raw = dist.read_text("direct_url.json") if dist is not None else None
    if dist is not None and not raw:   # from an index: only a public one is sure to reach a new box
        if ON_PUBLIC_INDEX:
            return f"fdlenv=={dist.version}"
        raise Fail.permanent(f"--install: this fdlenv ({dist.version}) was installed from a package index, and "
                             "fdlenv is on no public index yet, so a new box's pip would not find it; give "
                             "--install SPEC: `fdlenv @ git+https://HOST/REPO@COMMIT`, a wheel URL the box can "
                             f"reach (`pip wheel --no-deps -w dist .` in a checkout), or `fdlenv=={dist.version}` "
                             "when your boxes' index serves it")
    try:
        direct = json.loads(raw or "")
    except ValueError:
        direct = {}
    url = str(direct.get("url", ""))
    vcs = direct.get("vcs_info") or {}
    if vcs.get("vcs") == "git" and url.startswith(("https://", "ssh://", "git://")):
        return f"fdlenv @ git+{url}@{vcs.get('commit_id') or vcs.get('requested_revision') or 'HEAD'}"
    if direct.get("archive_info") is not None and url.startswith(("https://", "http://")):
        return f"fdlenv @ {url}"
    raise Fail.permanent("--install: this fdlenv was installed from "
                         + (f"{url} (a local path a new box cannot reach)" if url else "no record of where")
                         + "; give --install SPEC: a wheel URL, `fdlenv @ git+https://HOST/REPO@COMMIT`, or "
                         "a version on your index")


def needs_cargo(project: Project | None, tail: list[str]) -> bool:
    """Whether the join builds its binary with cargo (a source given, its recipe cargo's or the
    default `cargo build --release`)."""
    join = project.join if project is not None else None
    source = tail_value(tail, "--source") or (join.source.from_ if join is not None and join.source else None)
    if not source:
        return False
    build = tail_value(tail, "--source-build") or (join.source.build if join is not None and join.source else None)
    return not build or build.split()[0] in ("cargo", "fdl")


def shipped_lock(fdl_yml: str, text: str) -> tuple[str, str] | None:
    """The lock fdl.yml names (`fdlenv.lock`), read here to ship beside it: (the name as written,
    its text); None when it names none. A named lock that is not here is exit 2: the box would stop."""
    import yaml

    data = yaml.safe_load(text) or {}
    value = (data.get("fdlenv") or {}).get("lock") if isinstance(data.get("fdlenv"), dict) else None
    if not value:
        return None
    local = os.path.join(os.path.dirname(os.path.abspath(fdl_yml)), os.path.expanduser(str(value)))
    try:
        with open(local, encoding="utf-8") as f:
            return str(value), f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise Fail.permanent(f"--fdl-yml {fdl_yml}: fdlenv.lock names {value!r}, which cannot be read here "
                             f"({getattr(e, 'strerror', None) or e}); cloud-init ships it beside fdl.yml, so "
                             "it must be there, or leave fdlenv.lock out (a variant no lock holds is locked "
                             "on demand)") from None


def project_at(workdir: str) -> Project | None:
    """fdl.yml as join will find it from `workdir`, when that directory is on this box."""
    if not os.path.isdir(workdir):
        return None
    from ..config.load import load_project
    return load_project(workdir)


def project_file(path: str, root: str) -> tuple[str, Project]:
    """The fdl.yml a cloud-config ships to `root` on the box, as (its text, the project): read and
    validated as join will (exit 2 if bad); its relative `fdlenv:` paths anchor at `root`."""
    from pathlib import Path

    from ..config.model import Project
    from ..config.schema import validate
    from ..base.yamlfile import YamlError, loads

    p = Path(path)
    try:
        text = p.read_text(encoding="utf-8")
        data = loads(text, p)
        if data is not None and not isinstance(data, dict):
            raise Fail.permanent("expected a mapping at the top level")
        join, fdl = validate(data or {}, Path(root))
    except (OSError, UnicodeDecodeError) as e:
        raise Fail.permanent(f"--fdl-yml {path}: cannot read it ({getattr(e, 'strerror', None) or e}); "
                             "accepted: a readable fdl.yml") from None
    except YamlError as e:
        raise Fail.permanent(f"--fdl-yml {path}: {e.where}; accepted: fdl.yml as fdl join "
                             "reads it") from None
    except Fail as e:
        raise Fail.permanent(f"--fdl-yml {path}: {e.message}") from None
    return text, Project(path=Path(root) / "fdl.yml", root=Path(root), join=join, fdlenv=fdl)


def gpu_groups(value: str | None) -> tuple[str, ...]:
    """`--gpu-groups`: `auto` (default: those of render, video this box has), `none`, or a
    comma list of names."""
    if value is None or value == "auto":
        return present_groups(GPU_GROUPS)
    if value == "none":
        return ()
    names = [g.strip() for g in value.split(",")]
    if not all(names):
        raise Fail.permanent(f"--gpu-groups: expected auto, none or NAME[,NAME...], got {value!r}")
    return tuple(check_name(g, "--gpu-groups") for g in names)


def exec_command(value: str | None) -> list[str] | None:
    """`--exec PATH`: the fdlenv console script the unit starts (default: fdlenv on PATH)."""
    return None if value is None else [check_path(value, "--exec")]


def warnings(f: JoinFacts, token_file: str | None) -> list[str]:
    """What the operator should hear about the token (stderr; the recipe still prints)."""
    out = []
    if f.token_in_clear == "join.token" and token_file is None:   # systemd: fdl.yml stays where it is
        out.append("warning: fdl.yml's join.token is readable by whoever reads fdl.yml; move it to "
                   "a root-only file (0600) and give the recipe --token-file FILE")
    if f.token_file_in_tail:
        out.append("note: join reads -- --token-file as the service user; a root-only file needs "
                   "the recipe's --token-file (a systemd credential) instead")
    return out
