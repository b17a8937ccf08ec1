"""Which libtorch is active on this box, read the way flodl reads it.

With no `--libtorch`, flodl's `fdl join` runs the binary with the box's
active libtorch, whatever installed it. fdlenv does the same, in flodl's
order:
1. Which `libtorch/` holds the pointer: the project's (the fdl.yml
   directory, else the first directory up from the cwd that holds
   `libtorch/.active` or a Cargo.toml naming flodl) when it has a pointer,
   else fdlenv's home. (flodl stops at the project root and finds nothing
   there; fdlenv falls back to its home, where its own pointer lives.)
2. Which pointer: `.active`, or `.active.<case>` when FDL_LIBTORCH_CASE is
   set; a named case file that is missing means "nothing active" (with a
   note), never a fallback to `.active`, as in flodl.
3. What it names: one line `<family>/<name>` (`precompiled/cu128`,
   `builds/sm90`), a directory under that `libtorch/` which counts only
   with a `lib/` inside.
4. Its vendor from the name alone (`cpu*`, `cu<d>`/`sm<d>`, `rocm<d>`/`gfx<d>`;
   anything else is assumed NVIDIA with a note, as flodl does).
The answer says whether the directory lies in an fdlenv env (activated as
one) or is flodl's own (LD_LIBRARY_PATH, LIBTORCH_PATH and FDL_GPU_FEATURE
only, host ROCm first on AMD: `activation.libtorch_environ`).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.record import Record
from .env import Env
from .pointers import env_of, follow, variant_of_label

TYPE_CHECKING = False   # `typing` stays off the re-dial path
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..names.home import Home
    from ..names.variants import Variant


class Active(Record):
    """The libtorch a command runs with, settled (a Record: it is on the re-dial path)."""

    label: str              # flodl's variant id (the agent spec carries it)
    dir: Path               # the libtorch dir
    vendor: str             # cpu | nvidia | amd
    variant: str | None     # the canonical name, when fdlenv knows it
    env: Env | None         # the fdlenv env it lies in, else None (flodl's own download or build)


# flodl's classification, by the name alone: a prefix, then (but for cpu) a digit.
_VENDOR = (("cpu", "cpu"), ("cu", "nvidia"), ("sm", "nvidia"), ("rocm", "amd"), ("gfx", "amd"))


def vendor_of(label: str, notes: list[str] | None = None) -> str:
    name = label.rsplit("/", 1)[-1]
    if name == "cpu" or name.startswith("cpu-"):
        return "cpu"
    for prefix, vendor in _VENDOR[1:]:
        if name.startswith(prefix) and name[len(prefix):len(prefix) + 1].isdigit():
            return vendor
    if notes is not None:
        notes.append(f"libtorch {label}: the name says no vendor (cpu*, cu*, sm*, rocm*, gfx*); "
                     "assuming NVIDIA, as flodl does")
    return "nvidia"


def _project_libtorch(project_root: Path | None, cwd: Path) -> Path | None:
    if project_root is not None:
        return Path(project_root) / "libtorch"
    for d in (cwd, *cwd.parents):
        if (d / "libtorch" / ".active").is_file():
            return d / "libtorch"
        cargo = d / "Cargo.toml"
        try:
            if cargo.is_file() and "flodl" in cargo.read_text(errors="replace"):
                return d / "libtorch"
        except OSError:
            continue
    return None


def find(home: Home, project_root: Path | None = None, environ: Mapping[str, str] | None = None,
         cwd: Path | None = None, notes: list[str] | None = None) -> Active | None:
    """The active libtorch (see the module docstring), or None when nothing is active."""
    environ = os.environ if environ is None else environ
    case = (environ.get("FDL_LIBTORCH_CASE") or "").strip()
    pointer = f".active.{case}" if case else ".active"
    project = _project_libtorch(project_root, Path(cwd or os.getcwd()).absolute())
    libdir = project if project is not None and (project / pointer).is_file() else home.libtorch
    try:
        label = (libdir / pointer).read_text(errors="replace").strip()
    except OSError:
        if case and notes is not None:
            notes.append(f"FDL_LIBTORCH_CASE={case}: {libdir / pointer} does not exist, so no "
                         f"libtorch is active (write the variant's path, e.g. precompiled/cu128, "
                         "into it)")
        return None
    d = libdir / label
    if label and libdir == home.libtorch and d.is_symlink():
        d = follow(home, d) or d          # a home that moved: the same env, here
    if not label or not (d / "lib").is_dir():
        if label and notes is not None:
            notes.append(f"the active libtorch {label} has no lib/ under {libdir}: ignored")
        return None
    env = env_of(d)
    if env is not None:   # one rule for the label: an fdlenv env is its variant's flodl id, however reached
        return of_env(env)._replace(dir=d)
    return Active(label, d, vendor_of(label, notes), variant_of_label(label), None)


def of_env(env: Env) -> Active:
    """A realised Env as the Active it settles to (label: flodl's variant id)."""
    v = env.spec
    return Active(v.flodl_label, env.libtorch_root, v.vendor, v.name, env)


class OwnLibtorch(Record):
    """What a build keys on and runs in when the active libtorch is flodl's own, not an fdlenv
    env: its label as the variant's row (`spec`), a key from its real path and `build-version`
    (a re-download that changes the libtorch changes the build key), its directory."""

    spec: Variant
    key: str
    path: Path
    libtorch_root: Path


def build_env(act: Active | None) -> Env | OwnLibtorch | None:
    """What a build keys on and runs in (`spec`, `key`, `path`): the fdlenv env itself, or
    flodl's own libtorch (`OwnLibtorch`)."""
    if act is None or act.env is not None:
        return None if act is None else act.env
    from ..base import hashing
    from ..names.variants import Variant as Row

    d = Path(act.dir)
    try:
        version = (d / "build-version").read_text(errors="replace").strip()
    except OSError:
        version = ""
    ident = f"{act.label}\0{os.path.realpath(d)}\0{version}\0{(d / 'lib').stat().st_mtime_ns}"
    return OwnLibtorch(Row(act.label, act.label.rsplit("/", 1)[-1], act.vendor, None, None),
                       "flodl-" + hashing.of_text(ident)[:16], d, d)
