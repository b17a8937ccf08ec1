"""Wheel indexes by name: how a lock names a wheel without naming a host.

A lock entry for an index wheel records `pip+index://<index>/<project>/<file>`
and its sha256, never the absolute URL the index happened to serve (the same lock
must work behind a mirror).
At realise time the index name becomes a base URL, the project's page of the
PEP 691 (JSON) or PEP 503 (HTML) simple API is read (`fdlenv.index.simpleapi`), and
the file is found there by name; the sha256 of the lock then makes any index safe.

Index names and where their URL comes from, first hit wins:
- `--mirror NAME=URL` / `fdlenv: mirrors:` for the exact name (`pypi`,
  `pytorch/cu126`), else for its longest prefix (`pytorch=URL` serves
  `pytorch/cu126` as `URL/cu126`, the layout of PyTorch's wheel index);
- `pytorch/<variant>`: PyTorch's own index, `https://download.pytorch.org/whl/<variant>`;
- `pypi` only: the index your installer is configured with (`configured_index`),
  read without running pip, so an install with no pip in it (`uv tool install`)
  finds the same index: `PIP_INDEX_URL` > `UV_DEFAULT_INDEX` > `UV_INDEX_URL` >
  pip's config files (`PIP_CONFIG_FILE`, the venv's, the user's, the global ones
  pip documents; `[install]` over `[download]` over `[global]`, as pip reads a
  command's section over `[global]`) > uv's `uv.toml` (`UV_CONFIG_FILE`, the
  user's, the system's; `[[index]] default = true`, else `index-url`) > pip's own
  default, taken from pip where it is importable, else from the pip wheel this
  Python bundles for `ensurepip`. fdlenv names the one host that is a documented
  default of its own, PyTorch's index (`PYTORCH` here, and `names.variants`' advice for
  a variant no lock holds; README, "Using it"), and no other: the general registry's
  default comes from pip itself or not at all; with none, one `error:` line asks for
  `--mirror pypi=URL` or PIP_INDEX_URL.
"""

from __future__ import annotations

import os
import re
import sys
from collections.abc import Mapping
from pathlib import Path
from types import ModuleType

from ..base.errors import Fail

SCHEME = "pip+index://"
DEFAULT = "pypi"
# PyTorch's own wheel index, the one its install page gives (`--index-url .../whl/cu126`) and
# uv's `--torch-backend` uses: the default behind the index names `pytorch/<variant>`.
PYTORCH = "https://download.pytorch.org/whl"


def entry_url(index: str, project: str, filename: str) -> str:
    return f"{SCHEME}{index}/{normalize(project)}/{filename}"


def is_entry_url(url: str) -> bool:
    return url.startswith(SCHEME)


def parse_entry_url(url: str) -> tuple[str, str, str]:
    """`pip+index://pytorch/cu126/torch/torch-...whl` -> (`pytorch/cu126`, `torch`, file name)."""
    index, _, rest = url[len(SCHEME):].rpartition("/")
    index, _, project = index.rpartition("/")
    if not (index and project and rest):
        raise Fail.permanent(f"--lock: bad wheel URL {url!r}; accepted: {SCHEME}INDEX/PROJECT/FILE.whl")
    return index, project, rest


def normalize(name: str) -> str:
    """PEP 503's normalised project name."""
    return re.sub(r"[-_.]+", "-", name).lower()


def mapping(index: str, mirrors: dict[str, str] | None) -> str | None:
    """The `--mirror` pair serving index name `index` (`pytorch/cpu=URL`, or its prefix's
    `pytorch=URL`), as a user would write it; None when no mirror maps it."""
    parts = index.split("/")
    for n in range(len(parts), 0, -1):
        head = "/".join(parts[:n])
        if head in (mirrors or {}):
            return f"{head}={(mirrors or {})[head]}"
    return None


def shown(url: str) -> str:
    """`url` as a message may show it: without the user and password an index URL may carry."""
    scheme, sep, rest = url.partition("://")
    host, slash, path = rest.partition("/")
    if not sep or "@" not in host:
        return url
    return f"{scheme}://{host.rpartition('@')[2]}{slash}{path}"


def served_by(index: str, mirrors: dict[str, str] | None) -> str:
    """Who serves `index`, for a message: `--mirror pytorch/cpu=URL`, PyTorch's index, or pip's."""
    pair = mapping(index, mirrors)
    if pair is not None:
        return f"--mirror {pair}"
    return "PyTorch's index" if index.split("/")[0] == "pytorch" else f"the index your pip is configured with ({index})"


def ways_out(index: str, mirrors: dict[str, str] | None, variant: str | None = None) -> str:
    """What a user does when `index` cannot be read from here: appended to the transient error.
    The mapping that served it is named; PyTorch's indexes (or a mirror of one) get the three ways."""
    pair = mapping(index, mirrors)
    served = f" (served by --mirror {pair})" if pair is not None else ""
    if index.split("/")[0] != "pytorch":
        return served
    v = variant or (index.split("/")[1] if "/" in index else "VARIANT")
    return (f"{served}; ways out: a mirror this box reaches, with --mirror pytorch=URL (or `fdlenv: mirrors:` "
            f"in fdl.yml); or lock where the index is reachable (`fdlenv lock --libtorch {v}`) and ship the lock "
            "beside fdl.yml; for a fleet, `fdlenv mirror export DIR` where it is reachable, served to the boxes "
            "(docs/FLEET.md)")


def base_url(index: str, mirrors: dict[str, str] | None = None) -> str:
    """The simple-API root URL serving index name `index`."""
    parts = index.split("/")
    pair = mapping(index, mirrors)
    if pair is not None:
        head, _, url = pair.partition("=")
        return "/".join([url.rstrip("/"), *parts[len(head.split("/")):]])
    if index == DEFAULT:
        return configured_pip_index()
    if parts[0] == "pytorch":
        return "/".join([PYTORCH, *parts[1:]])
    raise Fail.permanent(
        f"--mirror: no URL for the wheel index {index!r}; give --mirror {parts[0]}=URL "
        f"(or `fdlenv: mirrors: {{{parts[0]}: URL}}` in fdl.yml)")


def configured_pip_index() -> str:
    """The URL behind the index name `pypi` here (see the module's docstring for the order); a
    user:password in it is kept by `netauth`, named by the setting it came from."""
    from ..base import netauth

    url, where = configured_index()
    return netauth.split(url, f"the URL's user:password in {where}")


def configured_index(environ: Mapping[str, str] | None = None) -> tuple[str, str]:
    """(index URL, where it was found): env, then pip's and uv's files, then pip's default."""
    env = os.environ if environ is None else environ
    for var in ("PIP_INDEX_URL", "UV_DEFAULT_INDEX", "UV_INDEX_URL"):
        if env.get(var, "").strip():
            return env[var].split()[0], var
    for found in (_pip_config_index(env), _uv_config_index(env)):
        if found:
            return found
    url = _pip_default()
    if url:
        return url, "pip's default index"
    raise Fail.permanent(
        "--mirror: no URL for the wheel index 'pypi': PIP_INDEX_URL, UV_DEFAULT_INDEX, pip's config "
        "files and uv.toml name none, and no pip is installed to take its default from; "
        "give --mirror pypi=URL (or set PIP_INDEX_URL)")


def _pip_config_index(env: Mapping[str, str]) -> tuple[str, str] | None:
    from ..base.netconf import pip_file_option   # here: a realise that only links reads no config

    found = pip_file_option(env, "index-url", "or give --mirror pypi=URL")
    return (found[0].split()[0], found[1]) if found else None


def uv_config_files(env: Mapping[str, str]) -> list[Path]:
    """uv's `uv.toml` files, highest priority first (UV_CONFIG_FILE alone when set)."""
    if env.get("UV_NO_CONFIG", "").strip() not in ("", "0", "false"):
        return []
    if env.get("UV_CONFIG_FILE"):
        return [Path(env["UV_CONFIG_FILE"])]
    from ..base.netconf import config_dirs

    system, user = config_dirs(env)
    return [user / "uv" / "uv.toml", *(d / "uv" / "uv.toml" for d in system), Path("/etc/uv/uv.toml")]


def _toml_reader(path: Path) -> ModuleType:
    """The standard library's TOML reader, or on Python 3.10 (which has none) tomli, which
    fdlenv requires there (pyproject); a uv.toml is never skipped for want of a reader."""
    try:
        import tomllib
    except ImportError:
        try:
            import tomli as tomllib
        except ImportError:
            raise Fail.permanent(f"uv config {path}: Python {sys.version_info[0]}.{sys.version_info[1]} has no "
                                 "TOML reader; install tomli>=1.1 (fdlenv's dependency before 3.11), "
                                 "or give --mirror pypi=URL") from None
    reader: ModuleType = tomllib
    return reader


def _uv_config_index(env: Mapping[str, str]) -> tuple[str, str] | None:
    for path in uv_config_files(env):
        try:
            with open(path, "rb") as f:
                data = f.read()
        except OSError:
            continue
        tomllib = _toml_reader(path)
        try:
            doc = tomllib.loads(data.decode())
        except (tomllib.TOMLDecodeError, UnicodeDecodeError) as e:
            raise Fail.permanent(f"uv config {path}: cannot parse it ({e}); fix it, "
                                 "or give --mirror pypi=URL") from None
        indexes = doc.get("index") if isinstance(doc.get("index"), list) else []
        _uv_credentials(indexes, env)
        candidates = [(i.get("url"), "[[index]] default") for i in indexes
                      if isinstance(i, dict) and i.get("default") is True]
        candidates.append((doc.get("index-url"), "index-url"))
        pip = doc.get("pip") if isinstance(doc.get("pip"), dict) else {}
        candidates.append((pip.get("index-url"), "[pip] index-url"))
        for url, key in candidates:
            if isinstance(url, str) and url.strip():
                return url.strip(), f"{path} {key}"
    return None


def _uv_credentials(indexes: list[object], env: Mapping[str, str]) -> None:
    """uv's `UV_INDEX_<NAME>_USERNAME` / `_PASSWORD` for each named `[[index]]` (NAME upper-cased,
    other characters than letters and digits as `_`, as uv reads them), kept for its URL's origin."""
    from ..base import netauth

    for i in indexes:
        if not (isinstance(i, dict) and isinstance(i.get("name"), str) and isinstance(i.get("url"), str)):
            continue
        var = "UV_INDEX_" + re.sub(r"[^A-Z0-9]", "_", i["name"].upper())
        user, password = env.get(f"{var}_USERNAME", ""), env.get(f"{var}_PASSWORD", "")
        if user or password:
            netauth.remember(i["url"], user, password, f"{var}_USERNAME/_PASSWORD")


_PIP_DEFAULT = """import sys
try:
    from pip._internal.models.index import PyPI
except ImportError:
    sys.path[:0] = sys.argv[1:]
    from pip._internal.models.index import PyPI
print(PyPI.simple_url)
"""


def bundled_pip_wheels() -> list[Path]:
    """The pip wheel(s) this Python ships for `ensurepip` (its `_bundled` folder, or the folder a
    distribution moved them to, sysconfig's WHEEL_PKG_DIR), newest first."""
    import importlib.util
    import sysconfig

    dirs = [Path(d) for d in (sysconfig.get_config_var("WHEEL_PKG_DIR") or "").split(os.pathsep) if d]
    try:
        spec = importlib.util.find_spec("ensurepip")
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.origin:
        dirs.append(Path(spec.origin).parent / "_bundled")

    def version(p: Path) -> tuple[int, ...]:   # pip-23.2.1-py3-none-any.whl -> (23, 2, 1)
        parts = p.name.split("-")
        return tuple(int(n) for n in re.findall(r"\d+", parts[1])) if len(parts) > 1 else ()

    found = []
    for d in dirs:
        try:
            found += [p for p in d.glob("pip-*.whl") if p.is_file()]
        except OSError:
            continue
    return sorted(found, key=version, reverse=True)


def _pip_default() -> str | None:
    """pip's own default index URL: from pip where this Python imports it, else from the pip
    wheel bundled with this Python (a wheel is importable as it is). In a child process, so
    pip's logging set-up stays out of fdlenv's (subprocess imported here: only `pypi` without a
    configured index comes this far)."""
    import subprocess

    try:
        proc = subprocess.run([sys.executable, "-c", _PIP_DEFAULT, *map(str, bundled_pip_wheels()[:1])],
                              capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return None
    url = proc.stdout.strip()
    return url if proc.returncode == 0 and "://" in url else None


def requirement_problem(e: Exception) -> str:
    """packaging's complaint about a requirement, as one line: its first line and the column its
    caret points at (packaging draws the text and a caret under it on two more lines)."""
    lines = str(e).splitlines()
    caret = next((ln for ln in lines[1:] if ln.strip() == "^"), None)
    head = " ".join((lines[0] if lines else str(e)).split())
    return head if caret is None or len(lines) < 3 else f"{head}, at column {caret.index('^') - 3}"
