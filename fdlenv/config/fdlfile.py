"""Finding the project's fdl.yml, without loading it.

Split from `config.load` because finding costs a few stats while loading costs
that module and a parse: commands that only need fdlenv's own settings
(`env realize` on a re-dial) skip the load entirely when there is no file.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..names.roots import CONFIG_NAMES   # the names the hot path also looks for
# A file with any of these top-level keys configures a command, not a project.
COMMAND_KEYS = ("entry", "compile", "docker", "run", "append")


def read_mapping(path: Path) -> object:
    """The document of fdl.yml/.yaml (strict YAML: `fdlenv.base.yamlfile`) or fdl.json."""
    if path.suffix == ".json":
        text = path.read_text(encoding="utf-8")
        return json.loads(text) if text.strip() else None
    from ..base import yamlfile  # pyyaml is cheap, but only needed with a project
    return yamlfile.load(path)


def find_config(start: Path | str | None = None) -> Path | None:
    """As flodl does: walk up from `start` for fdl.yaml / fdl.yml / fdl.json.

    A file that parses as a mapping with a command key is skipped; a file that
    does not parse is returned anyway so the loader reports it loudly.
    """
    d = Path(start if start is not None else os.getcwd()).absolute()
    for cur in (d, *d.parents):
        for name in CONFIG_NAMES:
            p = cur / name
            if not p.is_file():
                continue
            try:
                data = read_mapping(p)
            except Exception:  # noqa: BLE001 - unparseable: let the loader say why
                return p
            if isinstance(data, dict) and any(k in data for k in COMMAND_KEYS):
                break  # command-level config: go up
            return p
    return None
