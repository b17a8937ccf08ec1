"""flodl's view of the store, and GC roots: symlinks and one-line pointer files.

flodl's own tooling on the same box looks for `libtorch/.active` (one line
`precompiled/<dir>`) and `libtorch/precompiled/<dir>/{lib,include,.arch}`;
fdlenv keeps those pointing into the immutable envs. `roots/` holds one
symlink per (lock file, variant): `env gc` removes what no root and no
pointer reaches. Every update is write-temp-then-rename, so a reader never
sees a missing or half-written pointer, and an unchanged pointer is not
rewritten (the re-dial path only reads).
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import atomic, hashing, variants
from ..home import Home
from .env import MANIFEST, Env, from_dir


def _symlink(link: Path, target: Path) -> None:
    try:
        if os.readlink(link) == str(target):
            return
    except OSError:
        pass
    atomic.symlink(link, target)


def _write_line(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except OSError:
        pass
    atomic.write_text(path, text)


def link_variant(home: Home, env: Env) -> None:
    """libtorch/precompiled/<dir> -> the env's libtorch root. A real directory there is flodl's
    own download (`fdl libtorch download`): it is never deleted, moved over or written into;
    fdlenv then points nothing there (its env still serves `fdlenv run`, prepare and join)."""
    link = home.libtorch / "precompiled" / variants.get(env.variant).flodl_dir
    if os.path.lexists(link) and not link.is_symlink():
        from ..progress import say

        say(f"note: {link} is flodl's own libtorch (a real directory); fdlenv leaves it as it is")
        return
    _symlink(link, env.libtorch_root)


def set_active(home: Home, env: Env) -> None:
    link_variant(home, env)
    _write_line(home.libtorch / ".active", variants.get(env.variant).flodl_label + "\n")


def active_label(home: Home) -> str | None:
    try:
        return (home.libtorch / ".active").read_text().strip() or None
    except OSError:
        return None


def active_variant(home: Home) -> str | None:
    """The variant `.active` names (flodl's label mapped back), or None."""
    label = active_label(home)
    return next((v.name for v in variants.VARIANTS.values() if v.flodl_label == label), None)


def pointed_env(home: Home, variant: str) -> Env | None:
    """The env flodl's precompiled/<dir> pointer names for `variant`; None when it is
    missing or is not an fdlenv env (a libtorch flodl downloaded itself)."""
    link = home.libtorch / "precompiled" / variants.get(variant).flodl_dir
    target = Path(os.path.realpath(link)) if link.is_symlink() else None
    while target is not None and target != target.parent:
        if (target / MANIFEST).is_file():
            return from_dir(target)
        target = target.parent
    return None


def root(home: Home, lock: Path, env: Env) -> None:
    """roots/<variant>-<hash of the lock's path> -> env: a new lock at that path moves the root."""
    tag = hashing.of_text(str(lock.absolute()))[:12]
    _symlink(home.roots / f"{env.variant}-{tag}", env.path)


def live_targets(home: Home) -> set[Path]:
    """Env dirs something still uses: roots and flodl's precompiled pointers."""
    out: set[Path] = set()
    for d in (home.roots, home.libtorch / "precompiled"):
        if not d.is_dir():
            continue
        for link in d.iterdir():
            if link.is_symlink():
                target = Path(os.path.realpath(link))
                # A precompiled pointer names <env>/libtorch; the env is its parent.
                while target != target.parent and target.parent != home.envs.resolve():
                    target = target.parent
                out.add(target)
    return out
