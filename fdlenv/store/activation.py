"""The environment a child runs with: the env's activation, captured once.

py-rattler only *writes* an activation script (PATH, CONDA_PREFIX, and a
`source` of every etc/conda/activate.d script). fdlenv runs it once per env
(key and path) in `bash --noprofile --norc`, between two snapshots taken by
that same shell, so only what the script changed is kept: whatever the shell
itself owns (PS1, PROMPT_COMMAND, SHLVL, `_`, ...) is equal in both snapshots
and never enters the diff. The diff is cached in
`cache/activation/<key>-<path tag>.json`: a home that moved (mv, an image
bake, rsync to another mount) gets a fresh capture for its new path. Later
launches apply the cached diff to any base environment and exec the child
directly, with no shell between fdlenv and the trainer.

Path-list variables are captured against a sentinel value, so the cache
stores "prepend these, then whatever the caller had", and entries are
de-duplicated (rattler's script repeats PATH). flodl's variables go on top:
LIBTORCH_PATH, FDL_GPU_FEATURE, and LD_LIBRARY_PATH = host ROCm lib dir (AMD
only; libtorch-rocm bundles a ROCm userspace that must not win over the
host's), then libtorch's lib dir, then (NVIDIA) every `nvidia/<lib>/lib` of
the env, then what was inherited; for NVIDIA envs CUDA_HOME and CUDA_PATH
(the env's own `cuda/`, `store.cudahome`), and where that is a whole toolkit (cu130: nvcc in
`cuda/bin`) `cuda/bin` first on PATH, CUDACXX (its nvcc), CUDAToolkit_ROOT, and
TORCH_CUDA_ARCH_LIST (the variant's archs, unless the caller set one: Torch's CMake otherwise
falls back to archs CUDA 13 dropped when it sees no GPU); CMAKE_PREFIX_PATH (libtorch
first) and Torch_DIR, so `find_package(Torch)` needs nothing passed; and
FDLENV_VARIANT, the variant's name (`cmake -B build/fdlenv-$FDLENV_VARIANT`).
Cargo's target dir per variant depends on the cwd, so it is not part of this
map: `run` and `shell-hook` add it (`names.buildtree.build_tree`).

Switching and deactivating: a shell activated by `shell-hook` carries
`_FDLENV_STATE`, each changed variable's value before and after. `restored`
undoes it before anything is applied, so activating cu126 over cpu leaves no
cpu entry on PATH or LD_LIBRARY_PATH, and a child started from such a shell
(`fdlenv run`, join's agent) never sees two envs.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from collections.abc import Mapping

from ..base import atomic, hashing
from ..names import variants
from .statecodec import PATH_LISTS, ROCM_VARS, SENTINEL, STATE, apply, join, restored, shell_state
from ..base.shells import quote, valid_name
from ..base.errors import Fail
from ..names.home import Home, Living, Sweeper, listing
from .cudahome import DIRNAME as CUDA_HOME   # an NVIDIA env's own CUDA_HOME, `<env>/cuda`
from .env import Env

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import TypedDict

    from .active import Active

    class Diff(TypedDict):
        """What an env's activation changes (cached as JSON in `cache/activation/`)."""
        set: dict[str, str]     # VAR -> value; SENTINEL in a path list stands for the inherited value
        unset: list[str]

__all__ = ["PATH_LISTS", "SENTINEL", "STATE", "restored", "shell_state"]   # shared with the replay
# Owned by the shell, never by an env (the two snapshots already exclude them; belt and braces).
SHELL_OWNED = {"SHLVL", "_", "PWD", "OLDPWD", "PS1", "PS2", "PS3", "PS4", "PROMPT_COMMAND",
               "BASH_EXECUTION_STRING", "BASHOPTS", "SHELLOPTS", "IFS", "OPTIND", "COLUMNS", "LINES"}
_SPLIT = "__fdlenv_snapshot__"
VARIANT = "FDLENV_VARIANT"   # the variant's name, for a CMake build dir per variant
PREFIX = "FDLENV_PREFIX"     # the env's path (what CONDA_PREFIX said, without conda's meaning)
CONDA_OPT_IN = "FDLENV_CONDA_VARS"   # =1: keep conda's variables in the activation
CONDA_VARS = ("CONDA_PREFIX", "CONDA_SHLVL", "CONDA_DEFAULT_ENV", "CONDA_PROMPT_MODIFIER")


def _environ_of(blob: bytes) -> dict[str, str]:
    return dict(item.split("=", 1) for item in blob.decode(errors="surrogateescape").split("\0")
                if "=" in item)


def _shell_safe(text: str) -> bool:
    """Nothing a shell expands or splits on: letters, digits and `_./+:,@%=-`."""
    return quote(text) == text


def _alias_dir() -> str:
    """A private temp dir with a shell-safe path, for the env's alias during a capture."""
    import tempfile

    for base in (tempfile.gettempdir(), "/tmp", "/dev/shm"):
        if _shell_safe(base) and os.access(base, os.W_OK | os.X_OK):
            return tempfile.mkdtemp(prefix="fdlenv-act-", dir=base)
    raise Fail.permanent("activation needs a writable temp dir whose path a shell reads as is; "
                         "set TMPDIR to one (letters, digits and ./_- only)")


def _capture(env: Env, base: Mapping[str, str]) -> Diff:
    """Run rattler's activation once and keep what it changed, as data.

    rattler writes the prefix into its script unquoted (`export PATH="<prefix>/bin:..."`), so a
    home holding `$(...)`, a backtick, `"` or `$HOME` would be run or expanded. The script is
    therefore written for an alias, a symlink to the env at a shell-safe temp path, and the
    alias is replaced by the env's real path in the captured values, never in a shell."""
    import shutil
    import subprocess  # only on a capture: a re-dial reads the cached diff

    from rattler.shell import ActivationVariables, Shell, activate

    probe = {k: v for k, v in base.items() if k != STATE and valid_name(k)}
    for var in PATH_LISTS:
        probe[var] = SENTINEL
    # Commands inside activate.d scripts still need a PATH that finds them (shell-safe entries only).
    search = ":".join([SENTINEL, *(p for p in base.get("PATH", "/usr/bin:/bin").split(":")
                                   if p and _shell_safe(p))])
    probe["PATH"] = search
    tmp = _alias_dir()
    alias = os.path.join(tmp, "env")
    try:
        os.symlink(os.path.abspath(env.path), alias)
        script = activate(Path(alias), ActivationVariables(None, search.split(":")), Shell.bash).script
        res = subprocess.run(["bash", "--noprofile", "--norc", "-c",
                              f"env -0; printf '\\0{_SPLIT}\\0'\n{script}\nenv -0"],
                             env=probe, capture_output=True, stdin=subprocess.DEVNULL)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)
    before, sep, after = res.stdout.partition(f"\0{_SPLIT}\0".encode())
    if res.returncode != 0 or not sep:
        raise Fail.permanent(f"activating {env.path} failed: "
                             f"{res.stderr.decode(errors='replace').strip()[-300:]}")
    was, now = _environ_of(before), _environ_of(after)
    real = str(os.path.abspath(env.path))
    diff: Diff = {"set": {}, "unset": []}
    for var, value in now.items():
        if var in SHELL_OWNED or was.get(var) == value or not valid_name(var):
            continue
        if var == "PATH":
            value = value.replace(search, SENTINEL)
        diff["set"][var] = value.replace(alias, real)
    diff["unset"] = sorted(v for v in was if v not in now and v not in SHELL_OWNED
                           and v not in PATH_LISTS)
    return diff


def _apply(diff: Diff, base: Mapping[str, str]) -> dict[str, str]:
    return apply(diff["unset"], diff["set"].items(), base)


def cache_file(home: Home, env: Env) -> Path:
    """Where the env's captured activation is kept: by env key and path."""
    tag = hashing.of_text(str(Path(env.path).absolute()))[:12]
    return home.activations(f"{env.key}-{tag}.json")


def activation_diff(home: Home, env: Env) -> Diff:
    """The env's activation as a diff, captured on first use and cached by env key and path."""
    cached = cache_file(home, env)
    try:
        diff: Diff = json.loads(cached.read_text())
        if isinstance(diff, dict) and isinstance(diff.get("set"), dict) and isinstance(diff.get("unset"), list) \
                and all(isinstance(k, str) and isinstance(v, str) for k, v in diff["set"].items()) \
                and all(isinstance(v, str) for v in diff["unset"]):
            return diff
    except (OSError, ValueError):
        pass   # a memo of any other shape is captured again
    diff = _capture(env, os.environ)
    atomic.cache_text(cached, json.dumps(diff, sort_keys=True))
    return diff


def host_rocm_lib(environ: Mapping[str, str], rocm_root: Path | None = None) -> Path:
    """The host ROCm lib dir, as flodl resolves it: the first of `$ROCM_PATH`, `$HIP_PATH`,
    `$HSA_PATH`, `/opt/rocm` (or `rocm_root` alone, for tests) whose `lib` or `lib64` holds the
    HIP runtime, else `${ROCM_PATH:-/opt/rocm}/lib`."""
    for root in [rocm_root] if rocm_root else rocm_roots(environ):
        for sub in ("lib", "lib64"):
            d = root / sub
            if any(d.glob("libamdhip64.so*")):
                return d
    return (rocm_root or Path(environ.get("ROCM_PATH") or "/opt/rocm")) / "lib"


def rocm_roots(environ: Mapping[str, str]) -> list[Path]:
    """Where a host ROCm is looked for, in order: `$ROCM_PATH`, `$HIP_PATH`, `$HSA_PATH`, /opt/rocm."""
    return [Path(environ[v]) for v in ROCM_VARS if environ.get(v)] + [Path("/opt/rocm")]


def nvidia_libs(libtorch: Path) -> list[str]:
    """Every `nvidia/<lib>/lib` beside a wheel libtorch (`<site-packages>/torch`), sorted: the CUDA
    runtime wheels libtorch_cuda finds through its RPATH, and a training binary through these."""
    root = libtorch.parent / "nvidia"
    try:
        return sorted(str(d / "lib") for d in root.iterdir() if (d / "lib").is_dir())
    except OSError:
        return []


def child_environ(home: Home, env: Env, base: Mapping[str, str] | None = None,
                  rocm_root: Path | None = None) -> dict[str, str]:
    """Everything a child of this env runs with: base (a shell activation undone) + the env's
    activation + flodl's variables."""
    base = restored(os.environ if base is None else base)
    out = _apply(activation_diff(home, env), base)
    return libtorch_environ(out, Path(env.libtorch_root), env.spec.vendor, rocm_root,
                            env_path=Path(env.path), variant=env.variant)


def libtorch_environ(base: Mapping[str, str], libtorch: Path, vendor: str,
                     rocm_root: Path | None = None, env_path: Path | None = None,
                     variant: str = "") -> dict[str, str]:
    """flodl's variables for a libtorch dir, over `base`: the whole activation of a libtorch
    flodl installed itself (precompiled/<dir>, builds/<name>), and the top of an env's
    (`variant`: its name, for a toolkit env's TORCH_CUDA_ARCH_LIST)."""
    out = dict(base)
    out["LIBTORCH_PATH"] = str(libtorch)
    out["FDL_GPU_FEATURE"] = variants.FEATURE.get(vendor, "")
    rocm = host_rocm_lib(base, rocm_root) if vendor == "amd" else None
    cuda = nvidia_libs(libtorch) if vendor == "nvidia" else []
    out["LD_LIBRARY_PATH"] = join([str(rocm or ""), str(libtorch / "lib"), *cuda,
                                    *out.get("LD_LIBRARY_PATH", "").split(":")])
    cmake = libtorch / "share" / "cmake" / "Torch"
    if cmake.is_dir():   # find_package(Torch) with nothing passed
        out["CMAKE_PREFIX_PATH"] = join([str(libtorch), *out.get("CMAKE_PREFIX_PATH", "").split(":")])
        out["Torch_DIR"] = str(cmake)
    if vendor == "nvidia" and env_path is not None and (env_path / CUDA_HOME / "include").is_dir():
        # the env's own toolkit dir (`store.cudahome`); a host toolkit is never mixed in
        home = env_path / CUDA_HOME
        out["CUDA_HOME"] = out["CUDA_PATH"] = str(home)
        if (home / "bin" / "nvcc").is_file():
            toolkit_environ(out, home, variant)
    return out


def toolkit_environ(out: dict[str, str], cuda: Path, variant: str) -> None:
    """A whole toolkit's variables (`store.cudahome`), set in `out`: its `bin` first on PATH,
    CUDACXX and CUDAToolkit_ROOT (CMake's CUDA language and FindCUDAToolkit), and
    TORCH_CUDA_ARCH_LIST from the variant's archs unless `out` has one."""
    out["PATH"] = join([str(cuda / "bin"), *out.get("PATH", "").split(":")])
    out["CUDACXX"] = str(cuda / "bin" / "nvcc")
    out["CUDAToolkit_ROOT"] = str(cuda)
    if not out.get("TORCH_CUDA_ARCH_LIST"):   # one of statecodec.DEFAULTS: the memo's replay keeps it too
        from ..hw.coverage import ARCHS
        archs = ARCHS.get(variant) or ARCHS["cu130"]
        out["TORCH_CUDA_ARCH_LIST"] = ";".join(archs)


def environ_for(home: Home, active: Active, base: Mapping[str, str] | None = None,
                rocm_root: Path | None = None) -> dict[str, str]:
    """The child environment for a settled libtorch (`store.active.Active`): an fdlenv env is
    activated whole; a libtorch flodl installed itself gets flodl's variables only."""
    if active.env is not None:
        out = child_environ(home, active.env, base, rocm_root)
    else:
        base = restored(os.environ if base is None else base)
        out = libtorch_environ(base, Path(active.dir), active.vendor, rocm_root)
    if active.variant:   # a build dir per variant for CMake: build/fdlenv-$FDLENV_VARIANT
        out[VARIANT] = active.variant
    if active.env is not None:
        out[PREFIX] = str(active.env.path)
    return tidied(out, restored(os.environ if base is None else base))


def tidied(out: dict[str, str], base: Mapping[str, str]) -> dict[str, str]:
    """What an activation leaves, minus two traps: conda's own variables (CONDA_PREFIX,
    CONDA_SHLVL=1, ...) unless FDLENV_CONDA_VARS=1 (a conda or micromamba user's prompt, hooks
    and `conda deactivate` read them as a conda env they did not activate; FDLENV_PREFIX names
    the env instead), and PATH entries the activation added that are not directories (a wheel
    env has no `<env>/bin`)."""
    if (base.get(CONDA_OPT_IN) or os.environ.get(CONDA_OPT_IN) or "").strip() != "1":
        for var in CONDA_VARS:
            if var in base:
                out[var] = base[var]
            else:
                out.pop(var, None)
    had = set(base.get("PATH", "").split(":"))
    if "PATH" in out:
        kept = [p for p in out["PATH"].split(":") if p in had or os.path.isdir(p)]
        # nothing added: the caller's PATH as it was (not even de-duplicated)
        out["PATH"] = ":".join(kept) if set(kept) - had or "PATH" not in base else base["PATH"]
    return out


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of the captured activations (`cache_file`): one of an env key no kept
    env has."""
    for p in listing(home.activations()):
        if p.name.split("-", 1)[0] not in living.keys:
            yield p, "activation of an env that is gone"


SWEEPER = Sweeper(("activations",), sweep)
