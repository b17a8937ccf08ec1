"""What a command prints for a reader: one JSON object, or one failure, always the same way.

Why one module: a machine reading stdout under `--json` must get exactly one
object whatever happened, and a person reading stderr one `error:` line. So:
- `emit(obj)`: the command's answer under `--json`, with `"schema": SCHEMA`
  first, so a reader can tell the shape it parses (docs/JSON.md lists every
  command's keys; SCHEMA changes when a key changes meaning or goes);
- `fail(message, code)`: the `error: <message>` line on stderr and, under
  `--json`, `{"schema", "error", "exit"}` on stdout; returns `code`;
- `error_line(message)`: the line alone, for a failure that is not the end
  (a join attempt the loop retries).
The CLI sets `--json` once (`set_json`), before any command runs.
"""

from __future__ import annotations

import sys

SCHEMA = 1
_JSON = False


def set_json(on: bool) -> None:
    global _JSON
    _JSON = on


def emit(obj: dict) -> None:
    import json

    print(json.dumps({"schema": SCHEMA, **obj}))


def error_line(message: str) -> None:
    print(f"error: {message}", file=sys.stderr, flush=True)


def fail(message: str, code: int) -> int:
    error_line(message)
    if _JSON:
        emit({"error": message, "exit": code})
    return code
