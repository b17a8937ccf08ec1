"""What writing or checking a lock needs beyond a plain install: fdlenv's `lock` extra.

conda-lock (the writer's models and the parser `--check` reads with: about 30
packages and a second of imports) and pip (which resolves an env file's
`pip:` requirements) serve only `fdlenv lock`. Realising, running, joining and
the walk-through read locks with fdlenv's own reader and fetch wheels with its
own downloader, so a plain `pip install fdlenv` or `uv tool install fdlenv`
leaves both out, and `fdlenv lock` without them fails with one line naming the
extra instead of an ImportError.
"""

from __future__ import annotations

import importlib.util

from ..errors import Fail

EXTRA = "lock"
PROVIDERS = {"conda_lock": "conda-lock", "pip": "pip"}


def require(*modules: str) -> None:
    """Fail (exit 2) naming the `lock` extra when any of `modules` cannot be imported."""
    missing = []
    for m in modules:
        try:
            if importlib.util.find_spec(m) is None:
                missing.append(m)
        except (ImportError, ValueError):
            missing.append(m)
    if missing:
        names = " and ".join(PROVIDERS.get(m, m) for m in missing)
        raise Fail.permanent(
            f"fdlenv lock needs {names}: install fdlenv's `{EXTRA}` extra, "
            f"pip install 'fdlenv[{EXTRA}]' (from a checkout: pip install -e '.[{EXTRA}]'; "
            f"with uv: uv tool install 'fdlenv[{EXTRA}]')")
