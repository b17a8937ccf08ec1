"""A regular (non-editable) install of this checkout in a fresh venv, as a user has fdlenv:
the benches time its `fdlenv` command (scripts/fdlenv), not `python -m fdlenv` through the
checkout's editable finder, which pulls in pathlib and whatever `.pth` files this
interpreter's own site-packages runs (46 ms before `main` in one sandbox, 5 ms in a venv)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# Measure as an installed tool runs: with bytecode caching (some sandboxes disable it).
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


def regular_install(where: Path, deps: bool = True, source: Path = REPO) -> Path:
    """`where/regular-venv` with this checkout (or the checkout `source`) installed; returns its
    bin dir. `deps`: fdlenv's dependencies too, at the versions of constraints.txt (from the
    index pip is configured with); a bench whose commands import none of them can go without."""
    venv = where / "regular-venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    how = ["-c", str(source / "constraints.txt")] if deps else ["--no-deps"]
    subprocess.run([str(venv / "bin" / "pip"), "install", "-q", *how, str(source)],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, env=ENV)
    return venv / "bin"


def label_of(checkout: Path) -> str:
    """How a bench names another checkout's side: its directory and commit (`before@9af5d46`)."""
    rev = subprocess.run(["git", "-C", str(checkout), "rev-parse", "--short", "HEAD"], capture_output=True,
                         text=True).stdout.strip()
    return f"{checkout.name}@{rev}" if rev else checkout.name
