"""The environment a child runs with: the env's activation, captured once.

py-rattler only *writes* an activation script (PATH, CONDA_PREFIX, and a
`source` of every etc/conda/activate.d script). fdlenv runs it once per env
key in `bash --noprofile --norc`, diffs the result, and caches the diff in
`cache/activation/<key>.json`; later launches apply the cached diff to any
base environment and exec the child directly, with no shell between fdlenv
and the trainer (signals and exit codes pass through untouched).

Path-list variables are captured against a sentinel value, so the cache
stores "prepend these, then whatever the caller had" rather than the capture
moment's full value, and PATH entries are de-duplicated (rattler's script
repeats PATH). flodl's variables go on top: LIBTORCH_PATH, FDL_GPU_FEATURE,
and LD_LIBRARY_PATH = host ROCm lib dir (AMD only; libtorch-rocm bundles a
ROCm userspace that must not win over the host's), then libtorch's lib dir,
then what was inherited.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Mapping

from .. import atomic, variants
from ..errors import Fail
from ..home import Home
from .env import Env

SENTINEL = "/__fdlenv_inherited__"
PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH",
              "CMAKE_PREFIX_PATH", "PYTHONPATH", "MANPATH", "XDG_DATA_DIRS")
IGNORED = {"SHLVL", "_", "PWD", "OLDPWD"}


def _capture(env: Env, base: Mapping[str, str]) -> dict:
    import subprocess  # only on a capture: a re-dial reads the cached diff

    from rattler.shell import ActivationVariables, Shell, activate

    probe = dict(base)
    for var in PATH_LISTS:
        probe[var] = SENTINEL
    # Commands inside activate.d scripts still need a PATH that finds them.
    search = f"{SENTINEL}:{base.get('PATH', '/usr/bin:/bin')}"
    probe["PATH"] = search
    script = activate(env.path, ActivationVariables(None, search.split(":")), Shell.bash).script
    res = subprocess.run(["bash", "--noprofile", "--norc", "-c", script + "\nenv -0"],
                         env=probe, capture_output=True, stdin=subprocess.DEVNULL)
    if res.returncode != 0:
        raise Fail.permanent(f"activating {env.path} failed: {res.stderr.decode(errors='replace').strip()[-300:]}")
    after = dict(item.split("=", 1) for item in res.stdout.decode().split("\0") if "=" in item)
    diff: dict = {"set": {}, "unset": []}
    for var, value in after.items():
        if var in IGNORED or probe.get(var) == value:
            continue
        if var == "PATH":
            value = value.replace(search, SENTINEL)
        diff["set"][var] = value
    diff["unset"] = sorted(v for v in probe if v not in after and v not in IGNORED and v not in PATH_LISTS)
    return diff


def _join(parts: list[str]) -> str:
    seen, out = set(), []
    for p in parts:
        if p and p not in seen:
            seen.add(p)
            out.append(p)
    return ":".join(out)


def _apply(diff: dict, base: Mapping[str, str]) -> dict[str, str]:
    out = dict(base)
    for var in diff["unset"]:
        out.pop(var, None)
    for var, value in diff["set"].items():
        if SENTINEL in value:
            inherited = base.get(var, "")
            value = _join(value.replace(SENTINEL, inherited).split(":"))
        out[var] = value
    return out


def activation_diff(home: Home, env: Env) -> dict:
    """The env's activation as a diff, captured on first use and cached by env key."""
    cached = home.cache / "activation" / f"{env.key}.json"
    try:
        return json.loads(cached.read_text())
    except (OSError, ValueError):
        pass
    diff = _capture(env, os.environ)
    atomic.write_text(cached, json.dumps(diff, sort_keys=True))
    return diff


def host_rocm_lib(environ: Mapping[str, str], rocm_root: Path | None = None) -> Path | None:
    """The host ROCm lib dir that actually holds the HIP runtime ($ROCM_PATH, else /opt/rocm)."""
    root = rocm_root or Path(environ.get("ROCM_PATH") or "/opt/rocm")
    for sub in ("lib", "lib64"):
        d = root / sub
        if any(d.glob("libamdhip64.so*")):
            return d
    return None


def child_environ(home: Home, env: Env, base: Mapping[str, str] | None = None,
                  rocm_root: Path | None = None) -> dict[str, str]:
    """Everything a child of this env runs with: base + activation + flodl's variables."""
    base = dict(os.environ if base is None else base)
    out = _apply(activation_diff(home, env), base)
    v = variants.get(env.variant)
    out["LIBTORCH_PATH"] = str(env.libtorch_root)
    out["FDL_GPU_FEATURE"] = v.gpu_feature
    rocm = host_rocm_lib(base, rocm_root) if v.vendor == "amd" else None
    out["LD_LIBRARY_PATH"] = _join([str(rocm) if rocm else "", str(env.libtorch_root / "lib"),
                                    *out.get("LD_LIBRARY_PATH", "").split(":")])
    return out
