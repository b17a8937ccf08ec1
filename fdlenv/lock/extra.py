"""What checking a lock needs beyond a plain install: fdlenv's `lock` extra.

conda-lock (the parser `fdlenv lock --check` reads with: about 30 packages and
a second of imports) serves only `--check`. Writing a lock needs nothing extra:
the wheel resolver (`lock.closure`) and the writer (`lock.write`) are
fdlenv's own, so a plain `pip install fdlenv` or `uv tool install fdlenv`
locks a variant on demand; `--check` without the extra fails with one line
naming it instead of an ImportError.
"""

from __future__ import annotations

import importlib.util

from ..base.errors import Fail

EXTRA = "lock"
PROVIDERS = {"conda_lock": "conda-lock"}


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
            f"fdlenv lock --check needs {names}: install fdlenv's `{EXTRA}` extra, "
            f"pip install 'fdlenv[{EXTRA}]' (from a checkout: pip install -e '.[{EXTRA}]'; "
            f"with uv: uv tool install 'fdlenv[{EXTRA}]')")
