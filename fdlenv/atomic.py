"""Small files written whole or not at all: the one temp-then-rename helper.

A reader sees the old content or the new, never half of it, and a failed
write (a full disk, a kill between write and rename aside) leaves no temp
name behind. Temp names are `.<name>.<pid>` beside the target, so the rename
stays on one filesystem.
"""

from __future__ import annotations

import os
from pathlib import Path


def write_text(path: Path, text: str) -> None:
    """Replace `path` with `text` atomically (its directory is made when missing)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}")
    try:
        with open(tmp, "w") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())   # a power loss leaves the old content or the new, never an empty file
        os.replace(tmp, path)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass


def symlink(link: Path, target) -> None:
    """Point `link` at `target` atomically (a rename over the old link)."""
    link.parent.mkdir(parents=True, exist_ok=True)
    tmp = link.with_name(f".{link.name}.{os.getpid()}")
    try:
        os.unlink(tmp)
    except FileNotFoundError:
        pass
    try:
        os.symlink(target, tmp)
        os.replace(tmp, link)
    finally:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
