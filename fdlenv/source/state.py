"""The small JSON beside each source tree: cached facts that keep a re-dial cheap.

`source/<spec-hash>.state.json` holds the per-file digest cache, the parsed
run manifest and the last git checkout, each under its own key. Everything in
it is a cache keyed by what it describes (stat tuples, commit ids), so losing
it costs only time: an unreadable file reads as empty, and a write goes
through a temporary file and a rename so a reader never sees half of one.
"""

from __future__ import annotations

import json
from pathlib import Path

from ..base import atomic

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

SCHEMA = 1


class State:
    """The loaded file and whether it changed since (a plain class: it is on the re-dial path)."""

    __slots__ = ("path", "data", "dirty")

    def __init__(self, path: Path, data: dict[str, Any] | None = None) -> None:
        self.path = path
        self.data: dict[str, Any] = {} if data is None else data   # JSON: each key's reader checks its shape
        self.dirty = False

    @classmethod
    def load(cls, path: Path) -> State:
        try:
            data = json.loads(path.read_text())
        except (OSError, ValueError):
            data = {}
        if not isinstance(data, dict) or data.get("schema") != SCHEMA:
            data = {"schema": SCHEMA}
        return cls(path, data)

    def get(self, key: str) -> Any:
        return self.data.get(key)

    def put(self, key: str, value: object) -> None:
        if self.data.get(key) != value:
            self.data[key] = value
            self.dirty = True

    def save(self) -> None:
        if not self.dirty:
            return
        atomic.write_text(self.path, json.dumps(self.data, separators=(",", ":"), sort_keys=True))
        self.dirty = False
