"""Reading `envs/<variant>.yml`: conda environment.yml shape, plus wheels.

The file name is the variant (`envs/cu128.yml` -> `cu128`); `name`,
`channels`, `dependencies` and an optional `platforms` list follow conda's
environment.yml. fdlenv's extensions, in a `pip:` sub-list:
- requirement strings (`torch ==2.10.0`), resolved by `fdlenv lock` through
  the wheel index named by the top-level `pip-index:` (default `pypi`, the
  index your pip uses; see `fdlenv.index.pipindex`) into the libtorch closure;
- wheel *files* (a path relative to the env file, a `file://` URL or an
  http(s) URL of a `.whl`), each hashed from its real bytes when the env is
  read, so such a lock entry is as real as a conda one.

Channel names resolve through the mirror map, whose default sends the alias
`flodl` to the home's local channel (`fdlenv pack` fills it). Order matters:
channels keep the file's order (strict channel priority), and env files are
returned in the variant table's order so every lock is written the same way.
"""

from __future__ import annotations

import re
import urllib.parse
from dataclasses import dataclass
from pathlib import Path

from ..base import hashing, netauth, netread, yamlfile
from ..base.errors import Fail
from ..index import pipindex
from ..names.home import Home
from ..index.mirrors import ChannelMap
from ..names.variants import VARIANTS, parse_token

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

ENV_FILE_FORMS = ("name: STR; channels: [alias or URL, ...]; platforms: [linux-64, ...]; pip-index: NAME or {PLATFORM: NAME}; pip-sources: {PROJECT: NAME}; "
                  "dependencies: [match spec, ..., {pip: [requirement or wheel path or URL, ...]}]")
# A wheel file named by an env file is hashed as it is read: at most this many bytes.
WHEEL_LIMIT = 16 << 30
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
    requirements: tuple[str, ...] = ()  # pip requirement strings, resolved through pip_index
    pip_index: str = "pypi"
    pip_index_for: tuple[tuple[str, str], ...] = ()   # (platform, index) where it differs
    pip_sources: tuple[tuple[str, str], ...] = ()     # (project, index): a project from another index

    def index_for(self, platform: str) -> str:
        """The index that serves this env's wheels on `platform`."""
        return dict(self.pip_index_for).get(platform, self.pip_index)

    def index_of(self, project: str, platform: str) -> str:
        """The index that serves `project` (PEP 503-normalised) on `platform`: its `pip-sources:`
        entry, else the env's index for the platform (uv's `[tool.uv.sources]`, pixi's channels)."""
        return dict(self.pip_sources).get(project) or self.index_for(platform)


def channel_map(home: Home, mirrors: dict[str, str] | None) -> ChannelMap:
    """The user's mirrors, and the bare alias `flodl` -> the home's local channel."""
    return ChannelMap(dict(mirrors or {}), {"flodl": home.channel.as_uri()})


def env_path(envs_dir: Path, variant: str) -> Path:
    return envs_dir / f"{variant}.yml"


def discover(envs_dir: Path, variants: list[str] | None = None, layers: list[str] | None = None) -> list[EnvFile]:
    """The env files to lock: the named variants, else every `<variant>.yml` present, each with
    the named layers (`envs/<layer>.yml`: channels and conda specs every variant gets) added."""
    envs = _variant_files(envs_dir, variants)
    for layer in layers or []:
        envs = [with_layer(env, load_layer(envs_dir, layer)) for env in envs]
    return envs


def load_layer(envs_dir: Path, name: str) -> tuple[tuple[str, ...], tuple[str, ...]]:
    path = envs_dir / f"{name}.yml"
    if not re.fullmatch(r"[a-z0-9][a-z0-9_-]*", name) or name in VARIANTS or not path.is_file():
        raise Fail.permanent(f"--layer: no layer file {path}; accepted: the name of an env file without "
                             "a variant's name (e.g. toolchain for envs/toolchain.yml)")
    try:
        doc = yamlfile.load(path) or {}
    except yamlfile.YamlError as e:
        raise Fail.permanent(f"--layer: {e.source}: not YAML fdlenv reads ({e.where}); "
                             "accepted: channels: [...], dependencies: [...]") from None
    deps = doc.get("dependencies") if isinstance(doc, dict) else None
    if not isinstance(deps, list) or not all(isinstance(d, str) and d.strip() for d in deps):
        raise Fail.permanent(f"{path}: dependencies: a layer holds conda match specs only; "
                             "accepted: channels: [...], dependencies: [spec, ...]")
    return tuple(_str_list(doc, "channels", path)), tuple(d.strip() for d in deps)


def with_layer(env: EnvFile, layer: tuple[tuple[str, ...], tuple[str, ...]]) -> EnvFile:
    from dataclasses import replace

    channels, specs = layer
    return replace(env, channels=env.channels + tuple(c for c in channels if c not in env.channels),
                   specs=env.specs + tuple(s for s in specs if s not in env.specs))


def _variant_files(envs_dir: Path, variants: list[str] | None) -> list[EnvFile]:
    if variants:
        names = [parse_token(v, allow_auto=False) for v in variants]
        missing = [str(env_path(envs_dir, v)) for v in names if not env_path(envs_dir, v).is_file()]
        if missing:
            raise Fail.permanent(f"--libtorch: no env file {', '.join(missing)}")
    else:
        names = [v for v in VARIANTS if env_path(envs_dir, v).is_file()]
        if not names:
            raise Fail.permanent(f"--envs: {envs_dir} holds no env file; expected one of "
                                 + ", ".join(f"{v}.yml" for v in VARIANTS))
    order = list(VARIANTS)
    return [load(env_path(envs_dir, v)) for v in sorted(set(names), key=order.index)]


def load(path: Path) -> EnvFile:
    variant = parse_token(path.name.removesuffix(".yml"), allow_auto=False)
    try:
        doc = yamlfile.load(path)
    except yamlfile.YamlError as e:
        raise Fail.permanent(f"{e.source}: not YAML fdlenv reads ({e.where}); accepted: {ENV_FILE_FORMS}") from None
    if not isinstance(doc, dict):
        raise Fail.permanent(f"{path}: not a mapping; accepted: {ENV_FILE_FORMS}")
    channels = _str_list(doc, "channels", path)
    specs: list[str] = []
    wheels: list[Wheel] = []
    requirements: list[str] = []
    for dep in doc.get("dependencies") or []:
        if isinstance(dep, str) and dep.strip():
            specs.append(dep.strip())
        elif isinstance(dep, dict) and set(dep) == {"pip"} and isinstance(dep["pip"], list):
            for w in dep["pip"]:
                if str(w).strip().endswith(".whl"):
                    wheels.append(_wheel(str(w).strip(), path))
                else:
                    requirements.append(_requirement(w, path))
        else:
            raise Fail.permanent(f"{path}: dependencies: bad entry {dep!r}; accepted: {ENV_FILE_FORMS}")
    if specs and not channels:
        raise Fail.permanent(f"{path}: channels: at least one channel is needed for conda specs")
    if not (specs or wheels or requirements):
        raise Fail.permanent(f"{path}: dependencies: nothing to lock; accepted: {ENV_FILE_FORMS}")
    index, per_platform = _pip_index(doc.get("pip-index", "pypi"), path)
    return EnvFile(variant=variant, path=path, name=str(doc.get("name") or variant),
                   channels=tuple(channels), specs=tuple(specs),
                   platforms=tuple(_str_list(doc, "platforms", path)), wheels=tuple(wheels),
                   requirements=tuple(requirements), pip_index=index, pip_index_for=per_platform,
                   pip_sources=_pip_sources(doc.get("pip-sources"), path))


def _pip_sources(value: object, path: Path) -> tuple[tuple[str, str], ...]:
    """`pip-sources: {PROJECT: INDEX}`: projects served by another index than `pip-index`."""
    if value is None:
        return ()
    if not isinstance(value, dict) or not all(isinstance(k, str) and isinstance(v, str) and _INDEX_NAME.fullmatch(v)
                                              for k, v in value.items()):
        raise Fail.permanent(f"{path}: pip-sources: bad value {value!r}; accepted: a mapping of project to "
                             "index name, e.g. {nvidia-cuda-nvcc-cu12: pypi}")
    return tuple(sorted((re.sub(r"[-_.]+", "-", k).lower(), v) for k, v in value.items()))


_INDEX_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*(/[A-Za-z0-9._-]+)*")


def _pip_index(value: object, path: Path) -> tuple[str, tuple[tuple[str, str], ...]]:
    """`pip-index: NAME`, or a mapping platform -> NAME (`default:` for the rest)."""
    accepted = ("an index name such as pypi or pytorch/cu126, or a mapping of platform to index name "
                "({linux-64: pytorch/cpu, linux-aarch64: pypi}, `default:` for the others); "
                "URLs come from --mirror NAME=URL")
    mapping = value if isinstance(value, dict) else {"default": value}
    named = {k: v for k, v in mapping.items() if isinstance(k, str) and isinstance(v, str) and _INDEX_NAME.fullmatch(v)}
    if not mapping or len(named) != len(mapping):
        raise Fail.permanent(f"{path}: pip-index: bad value {value!r}; accepted: {accepted}")
    default = named.get("default", "pypi")
    return default, tuple(sorted((k, v) for k, v in named.items() if k != "default"))


def _requirement(entry: object, env_file: Path) -> str:
    from packaging.requirements import InvalidRequirement, Requirement

    text = str(entry).strip()
    try:
        req = Requirement(text)
    except InvalidRequirement as e:
        raise Fail.permanent(f"{env_file}: pip: {text!r} is not a requirement ({pipindex.requirement_problem(e)}); "
                             "accepted: "
                             "NAME SPECIFIER (e.g. torch ==2.10.0) or a path or URL of a .whl") from None
    if req.url or req.extras:
        raise Fail.permanent(f"{env_file}: pip: {text!r}: URLs and extras are not accepted; accepted: "
                             "NAME SPECIFIER [; MARKER] (e.g. torch ==2.10.0, or x ==1; platform_machine == "
                             "\"x86_64\")")
    return str(req)


def _str_list(doc: dict[str, Any], key: str, path: Path) -> list[str]:   # Any: a YAML document
    value = doc.get(key) or []
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise Fail.permanent(f"{path}: {key}: expected a list of strings; accepted: {ENV_FILE_FORMS}")
    return [v.strip() for v in value]


def _wheel(entry: str, env_file: Path) -> Wheel:
    if "://" in entry:   # a user:password in it is used for this origin, and never written to the lock
        url = netauth.split(entry, "the env file's URL")
    else:
        local = (env_file.parent / entry).resolve()
        if not local.is_file():
            raise Fail.permanent(f"{env_file}: pip: no wheel file {local}")
        url = local.as_uri()
    filename = urllib.parse.unquote(url.rpartition("/")[2])
    m = WHEEL_NAME.match(filename)
    if not m:
        raise Fail.permanent(f"{env_file}: pip: {entry!r} is not a wheel file name; accepted: a path or "
                             "URL of a .whl, or a requirement (torch ==2.10.0)")
    import http.client

    def digest() -> hashing.Digest:
        d = hashing.Digest(md5=True)
        for piece in netread.pieces(url, WHEEL_LIMIT):
            d.update(piece)
        return d
    try:
        d = netread.retrying(digest, url)
    except (OSError, http.client.HTTPException) as e:
        raise Fail.retry(f"{env_file}: pip: cannot read {url}: {netread.why(e)}") from None
    name = re.sub(r"[-_.]+", "-", m["name"]).lower()
    return Wheel(name=name, version=m["version"], url=url, sha256=d.sha256, md5=d.md5)
