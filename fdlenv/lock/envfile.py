"""Reading `envs/<variant>.yml`: conda environment.yml shape, plus wheels.

The file name is the variant (`envs/cu128.yml` -> `cu128`); `name`,
`channels`, `dependencies` and an optional `platforms` list follow conda's
environment.yml. fdlenv's extension: a `pip:` sub-list of wheel *files*
(a path relative to the env file, a `file://` URL or an http(s) URL of a
`.whl`). Each is hashed from the real bytes when the env is read, so a pip
lock entry is as real as a conda one; requirement strings (`numpy>=2`) are
refused, because resolving them needs an index fdlenv does not use.

Channel names resolve through the mirror map, whose default sends the alias
`flodl` to the home's local channel (`fdlenv pack` fills it). Order matters:
channels keep the file's order (strict channel priority), and env files are
returned in the variant table's order so every lock is written the same way.
"""

from __future__ import annotations

import hashlib
import re
import urllib.parse
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from ..errors import Fail
from ..home import Home
from ..mirrors import ChannelMap
from ..variants import VARIANTS, parse_token

ENV_FILE_FORMS = ("name: STR; channels: [alias or URL, ...]; platforms: [linux-64, ...]; "
                  "dependencies: [match spec, ..., {pip: [wheel path or URL, ...]}]")
WHEEL_NAME = re.compile(r"^(?P<name>[^-]+)-(?P<version>[^-]+)(-\d[^-]*)?-[^-]+-[^-]+-[^-]+\.whl$")


@dataclass(frozen=True)
class Wheel:
    """A pip wheel named by an env file, with the hashes of its real bytes."""

    name: str        # normalised (PEP 503)
    version: str
    url: str
    sha256: str
    md5: str


@dataclass(frozen=True)
class EnvFile:
    variant: str
    path: Path
    name: str
    channels: tuple[str, ...]       # as written: aliases or URLs
    specs: tuple[str, ...]          # conda match specs, as written
    platforms: tuple[str, ...]      # empty: not named by the file
    wheels: tuple[Wheel, ...]


def channel_map(home: Home, mirrors: dict[str, str] | None) -> ChannelMap:
    """The user's mirrors, and the bare alias `flodl` -> the home's local channel."""
    return ChannelMap(dict(mirrors or {}), {"flodl": home.channel.as_uri()})


def env_path(envs_dir: Path, variant: str) -> Path:
    return envs_dir / f"{variant}.yml"


def discover(envs_dir: Path, variants: list[str] | None = None) -> list[EnvFile]:
    """The env files to lock: the named variants, else every `<variant>.yml` present."""
    if variants:
        names = [parse_token(v, allow_auto=False) for v in variants]
        missing = [str(env_path(envs_dir, v)) for v in names if not env_path(envs_dir, v).is_file()]
        if missing:
            raise Fail.permanent(f"--variant: no env file {', '.join(missing)}")
    else:
        names = [v for v in VARIANTS if env_path(envs_dir, v).is_file()]
        if not names:
            raise Fail.permanent(f"--envs: {envs_dir} holds no env file; expected one of "
                                 + ", ".join(f"{v}.yml" for v in VARIANTS))
    order = list(VARIANTS)
    return [load(env_path(envs_dir, v)) for v in sorted(set(names), key=order.index)]


def load(path: Path) -> EnvFile:
    import yaml

    variant = parse_token(path.name.removesuffix(".yml"), allow_auto=False)
    try:
        doc = yaml.safe_load(path.read_text())
    except yaml.YAMLError as e:
        raise Fail.permanent(f"{path}: not YAML ({e}); accepted: {ENV_FILE_FORMS}") from None
    if not isinstance(doc, dict):
        raise Fail.permanent(f"{path}: not a mapping; accepted: {ENV_FILE_FORMS}")
    channels = _str_list(doc, "channels", path)
    if not channels:
        raise Fail.permanent(f"{path}: channels: at least one channel is needed")
    specs: list[str] = []
    wheels: list[Wheel] = []
    for dep in doc.get("dependencies") or []:
        if isinstance(dep, str) and dep.strip():
            specs.append(dep.strip())
        elif isinstance(dep, dict) and set(dep) == {"pip"} and isinstance(dep["pip"], list):
            wheels.extend(_wheel(str(w), path) for w in dep["pip"])
        else:
            raise Fail.permanent(f"{path}: dependencies: bad entry {dep!r}; accepted: {ENV_FILE_FORMS}")
    return EnvFile(variant=variant, path=path, name=str(doc.get("name") or variant),
                   channels=tuple(channels), specs=tuple(specs),
                   platforms=tuple(_str_list(doc, "platforms", path)), wheels=tuple(wheels))


def _str_list(doc: dict, key: str, path: Path) -> list[str]:
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Fail.permanent(f"{path}: {key}: expected a list of strings; accepted: {ENV_FILE_FORMS}")
    return [v.strip() for v in value]


def _wheel(entry: str, env_file: Path) -> Wheel:
    if "://" in entry:
        url = entry
    else:
        local = (env_file.parent / entry).resolve()
        if not local.is_file():
            raise Fail.permanent(f"{env_file}: pip: no wheel file {local}")
        url = local.as_uri()
    filename = urllib.parse.unquote(url.rpartition("/")[2])
    m = WHEEL_NAME.match(filename)
    if not m:
        raise Fail.permanent(f"{env_file}: pip: {entry!r} is not a wheel file; accepted: a path or "
                             "URL of a .whl (requirement strings need an index fdlenv does not use)")
    sha, md5 = hashlib.sha256(), hashlib.md5()
    try:
        with urllib.request.urlopen(url) as f:
            while chunk := f.read(1 << 20):
                sha.update(chunk)
                md5.update(chunk)
    except OSError as e:
        raise Fail.retry(f"{env_file}: pip: cannot read {url}: {e}") from None
    name = re.sub(r"[-_.]+", "-", m["name"]).lower()
    return Wheel(name=name, version=m["version"], url=url, sha256=sha.hexdigest(), md5=md5.hexdigest())
