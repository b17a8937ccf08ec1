"""Loading the project file: discovery, `inherit-from:`, the `FDL_ENV` overlay.

Why it exists: `fdlenv join` and `fdlenv prepare` read the same fdl.yml as
flodl's `fdl join`, with the same merge rules, so one file serves both tools.
Finding the file is `fdlenv.config.fdlfile` (a few stats, no parse); this module pays
for the parse and the merge only when a file was found.

Order that matters:
1. discovery walks up from the cwd, skipping files that configure a command
   rather than a project;
2. the base file and its `inherit-from:` parents are merged, each parent under
   the file that names it (a file reached twice is read once);
3. the overlay `fdl.<FDL_ENV>.{yml,yaml,json}` next to the base, with its own
   chain, is deep-merged over that;
4. only then is the merged mapping validated by `schema`, so an overlay may
   fix a base. Every failure is `Fail.permanent("cannot load <file>: ...")`,
   naming the overlay when validation of a merge that includes it fails.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any
from collections.abc import Mapping

from ..base.errors import Fail
from .fdlfile import find_config, read_mapping
from ..base.yamlfile import YamlError
from .model import Project
from .schema import validate

OVERLAY_EXTS = ("yml", "yaml", "json")
INHERIT_KEY = "inherit-from"


class _LoadError(Exception):
    def __init__(self, path: Path, reason: str):
        super().__init__(reason)
        self.path = path
        self.reason = reason


def _deep_merge(base: Any, over: Any) -> Any:
    """`over` merged over `base` (documents: mappings merge key by key, anything else replaces)."""
    if isinstance(base, dict) and isinstance(over, dict):
        return _merge(base, over)
    return over


def _merge(base: dict[str, Any], over: dict[str, Any]) -> dict[str, Any]:
    out = dict(base)
    for k, v in over.items():
        out[k] = _deep_merge(base[k], v) if k in base else v
    return out


def _load_chain(path: Path, seen: set[Path]) -> dict[str, Any]:
    """One file with its `inherit-from:` parents merged under it (de-duplicated by path)."""
    real = path.resolve()
    if real in seen:
        return {}
    seen.add(real)
    try:
        data = read_mapping(path)
    except YamlError as e:
        raise _LoadError(path, f"does not parse: {e.where}") from None
    except ValueError as e:   # fdl.json
        raise _LoadError(path, f"does not parse: {' '.join(str(e).split())}") from None
    except RecursionError:    # fdl.json nested thousands deep
        raise _LoadError(path, "does not parse: nested too deeply") from None
    if data is None:
        data = {}  # empty or comment-only: all defaults
    if not isinstance(data, dict):
        raise _LoadError(path, f"expected a mapping at the top level, got {type(data).__name__}")
    parents = data.pop(INHERIT_KEY, None)
    if parents is None:
        return data
    if isinstance(parents, str):
        parents = [parents]
    if not isinstance(parents, list) or not all(isinstance(p, str) for p in parents):
        raise _LoadError(path, f"{INHERIT_KEY}: expected a path or a list of paths")
    merged: dict[str, Any] = {}
    for parent in parents:
        pp = (path.parent / Path(parent).expanduser())
        if not pp.is_file():
            raise _LoadError(path, f"{INHERIT_KEY}: {parent} does not exist")
        merged = _merge(merged, _load_chain(pp, seen))
    return _merge(merged, data)


def load_project(start: Path | str | None = None,
                 environ: Mapping[str, str] | None = None) -> Project | None:
    """Discover and load the project config; None when there is none.

    Any load failure is `Fail.permanent("cannot load <path>: <reason>")`.
    """
    env = os.environ if environ is None else environ
    path = find_config(start)
    if path is None:
        return None
    try:
        seen: set[Path] = set()
        data = _load_chain(path, seen)
        overlay = None
        name = (env.get("FDL_ENV") or "").strip()
        if name:
            for ext in OVERLAY_EXTS:
                cand = path.parent / f"fdl.{name}.{ext}"
                if cand.is_file():
                    overlay = cand
                    break
            if overlay is None:
                raise _LoadError(path, f"env {name!r} (FDL_ENV={name}, set by --env {name} or "
                                       f"@{name}) names an overlay fdl.{name}."
                                       f"{{{','.join(OVERLAY_EXTS)}}} that does not exist "
                                       f"in {path.parent}; name an existing one or unset it")
            data = _merge(data, _load_chain(overlay, seen))
        root = path.parent.absolute()
        try:
            join, fdl = validate(data, root)
        except Fail as e:
            raise _LoadError(overlay or path, e.message) from None
    except _LoadError as e:
        raise Fail.permanent(f"cannot load {e.path}: {e.reason}") from None
    except OSError as e:
        raise Fail.permanent(f"cannot load {path}: {e}") from None
    return Project(path=path.absolute(), root=root, join=join, fdlenv=fdl, overlay=overlay)
