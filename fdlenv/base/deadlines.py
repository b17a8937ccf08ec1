"""How long fdlenv waits: the deadlines of a request and of a lock wait, each a setting.

Why one module: a server that trickles its headers, or a holder that never lets go,
must not keep a command (and every lock it holds, so every other caller on the box)
waiting for ever, and each bound is a setting a slow link may need to widen. Both
are read here, the first time they are needed, from the environment:
- FDLENV_REQUEST_TIMEOUT (seconds, default 120): one request's connect, headers and,
  for a page or metadata file, body together (`netread`); a download's body is held
  to the stall rule instead (its time grows with its size);
- FDLENV_LOCK_TIMEOUT (seconds, default 3600): one wait for a lock another process
  holds (`flocks`); a realise of a large env or a build may hold one for long.
A value that is not a positive number is one `error:` line naming the variable.
Neither costs an import: the re-dial path reads them only when it waits.
"""

from __future__ import annotations

import os

from .errors import Fail

REQUEST_VAR, REQUEST_DEFAULT = "FDLENV_REQUEST_TIMEOUT", 120.0
LOCK_VAR, LOCK_DEFAULT = "FDLENV_LOCK_TIMEOUT", 3600.0


def _seconds(var: str, default: float) -> float:
    raw = os.environ.get(var, "").strip()
    if not raw:
        return default
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not value > 0 or value == float("inf"):
        raise Fail.permanent(f"{var}={raw!r}: accepted: a positive number of seconds (default {default:g})")
    return value


def request_timeout() -> float:
    """Seconds one request may take, connect to last byte of a page (FDLENV_REQUEST_TIMEOUT)."""
    return _seconds(REQUEST_VAR, REQUEST_DEFAULT)


def lock_timeout() -> float:
    """Seconds one lock wait may take (FDLENV_LOCK_TIMEOUT)."""
    return _seconds(LOCK_VAR, LOCK_DEFAULT)
