"""flodl's view of the store, and GC roots: symlinks and one-line pointer files.

flodl's own tooling on the same box looks for `libtorch/.active` (one line
`precompiled/<dir>`) and `libtorch/precompiled/<dir>/{lib,include,.arch}`;
fdlenv keeps those pointing into the immutable envs. `roots/` holds one
symlink per (lock file, variant): `env gc` removes what no root and no
pointer reaches.

Rules, in the order they matter:
- Never fight flodl's files. A real directory at `precompiled/<dir>` is
  flodl's own download (`fdl libtorch download`): fdlenv never deletes, moves
  over or writes into it. Its own pointer then lives beside it, at
  `precompiled/<dir>-fdlenv` (flodl reads that name as the same vendor), and
  `.active` names whichever of the two was activated last.
- Links are relative (`../../envs/<env>/libtorch`), so a home that moved
  (mv, an image bake into another path, rsync to another mount) keeps
  working; `env verify` reports absolute links left by an older fdlenv or a
  moved home, and `--repair` rewrites them (`relink`).
- Every update is write-temp-then-rename, so a reader never sees a missing
  or half-written pointer, temp names are removed on every path, and an
  unchanged pointer is not rewritten (the re-dial path only reads).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base import atomic, hashing
from ..names import variants
from ..names.home import Home, Living, Sweeper, listing
from .env import MANIFEST, Env, from_dir

TYPE_CHECKING = False   # `typing` stays off the re-dial path
if TYPE_CHECKING:
    from collections.abc import Iterator, Set as AbstractSet

OWN_SUFFIX = "-fdlenv"


def _symlink(link: Path, target: Path) -> None:
    rel = os.path.relpath(target, link.parent)
    try:
        if os.readlink(link) == rel:
            return
    except OSError:
        pass
    atomic.symlink(link, rel)


def _write_line(path: Path, text: str) -> None:
    try:
        if path.read_text() == text:
            return
    except (OSError, ValueError):
        pass    # not there, or no text (a broken record): written whole
    atomic.write_text(path, text)


def _is_flodls(path: Path) -> bool:
    """A real directory (not our link): flodl's own download."""
    return os.path.lexists(path) and not path.is_symlink()


def link_variant(home: Home, env: Env) -> str:
    """Point flodl's `precompiled/<dir>` (or, beside flodl's own download, `<dir>-fdlenv`) at the
    env's libtorch root; returns the pointer's label (`precompiled/<name>`)."""
    d = env.spec.flodl_name
    pre = home.precompiled
    name = d + OWN_SUFFIX if _is_flodls(pre / d) else d
    _symlink(pre / name, Path(env.libtorch_root))
    return f"precompiled/{name}"


def set_active(home: Home, env: Env) -> None:
    _write_line(home.active_pointer, link_variant(home, env) + "\n")


def active_label(home: Home) -> str | None:
    """What `.active` names; None for nothing, and for a pointer that is no one line of text
    (not UTF-8, a directory): a broken record never stops a command."""
    try:
        label = (home.active_pointer).read_text(errors="strict").strip()
    except (OSError, ValueError):
        return None
    return label if label and "\n" not in label and "\0" not in label else None


def variant_of_label(label: str | None) -> str | None:
    """`precompiled/cu128` or `precompiled/cu128-fdlenv` -> `cu128`; anything else -> None."""
    family, _, name = (label or "").partition("/")
    if family != "precompiled":
        return None
    name = name.removesuffix(OWN_SUFFIX)
    return next((v.name for v in variants.VARIANTS.values() if v.flodl_name == name), None)


def env_of(path: Path) -> Env | None:
    """The fdlenv env `path` lies in (through links), or None."""
    from .env import Damaged

    target = Path(os.path.realpath(path))
    while target != target.parent:
        if os.path.lexists(target / MANIFEST):
            try:
                return from_dir(target)
            except Damaged:
                return None   # a damaged env is no answer: a realise builds it again
        target = target.parent
    return None


def pointed_env(home: Home, variant: str) -> Env | None:
    """The env fdlenv's pointer names for `variant` (`precompiled/<dir>`, else `<dir>-fdlenv`);
    None when neither is an fdlenv env (flodl's own download, or nothing)."""
    pre = home.precompiled
    d = variants.get(variant).flodl_name
    for link in (pre / d, pre / (d + OWN_SUFFIX)):
        if link.is_symlink():
            env = env_of(follow(home, link) or link)
            if env is not None:
                return env
    if os.path.lexists(pre / d) and not (pre / d).is_symlink() or (pre / (d + OWN_SUFFIX)).is_symlink():
        return None      # flodl's own download, or a pointer naming no env: not fdlenv's to mend
    return _rooted(home, variant)


def _rooted(home: Home, variant: str, relink: bool = True) -> Env | None:
    """Both pointers gone while a root still names an env of `variant` (`env remove` drops the
    roots with the pointers, so this is damage, a deleted link): that env, newest first, and
    its pointer made again where the home can be written."""
    found = []
    for link in variant_roots(home, variant):
        env = env_of(link)
        if env is not None and env.variant == variant:
            found.append((os.lstat(env.path).st_mtime_ns, env))
    if not found:
        return None
    env = max(found, key=lambda f: f[0])[1]
    try:
        if relink:
            link_variant(home, env)
    except OSError:
        pass        # a read-only home still answers
    return env


def missing(home: Home) -> list[tuple[str, Env]]:
    """(label, env) for each variant a root keeps whose fdlenv pointer is gone (`env verify`
    reports it, `--repair` makes it again with `link_variant`)."""
    out = []
    names = {p.name.rsplit("-", 1)[0] for p in home.roots.iterdir()} if home.roots.is_dir() else set()
    pre = home.precompiled
    for v in sorted(n for n in names if n in variants.VARIANTS):
        d = variants.get(v).flodl_name
        if (pre / d).is_symlink() or (pre / (d + OWN_SUFFIX)).is_symlink():
            continue
        env = _rooted(home, v, relink=False)
        if env is not None:
            out.append((f"precompiled/{d + OWN_SUFFIX if _is_flodls(pre / d) else d}", env))
    return out


def follow(home: Home, link: Path) -> Path | None:
    """`link` when it leads somewhere; a link left dangling by a moved home leads to the same
    env under this home instead (and is rewritten relative when the home is writable)."""
    if os.path.exists(link):
        return link
    if not link.is_symlink():
        return None
    cand = _here(home, link)
    if cand is not None:
        try:
            _symlink(link, cand)
        except OSError:
            pass        # a read-only home still works, through `cand`
    return cand


def root_link(home: Home, lock: Path, variant: str) -> Path:
    """roots/<variant>-<hash of the lock's path>: one per (lock path, variant)."""
    return home.roots / f"{variant}-{hashing.of_text(str(lock.absolute()))[:12]}"


def variant_roots(home: Home, variant: str) -> list[Path]:
    """Every root `root_link` made for `variant`, whatever its lock."""
    return [p for p in sorted(home.roots.glob(f"{variant}-*")) if p.is_symlink()] if home.roots.is_dir() else []


def root(home: Home, lock: Path, env: Env) -> None:
    """The lock's root -> env: a new lock at that path moves the root."""
    _symlink(root_link(home, lock, env.spec.name), env.path)


def links(home: Home) -> Iterator[Path]:
    """Every root and flodl precompiled pointer that is a symlink."""
    return _links(home)


def _links(home: Home) -> Iterator[Path]:
    for d in (home.roots, home.precompiled):
        if d.is_dir():
            yield from (p for p in d.iterdir() if p.is_symlink())


def live_targets(home: Home, skip: AbstractSet[Path] = frozenset()) -> set[Path]:
    """Env dirs something still uses: roots and flodl's precompiled pointers (but `skip`)."""
    out: set[Path] = set()
    envs = home.envs.resolve()
    for link in _links(home):
        if link in skip:
            continue
        target = Path(os.path.realpath(link))
        # A precompiled pointer names <env>/libtorch; the env is its parent.
        while target != target.parent and target.parent != envs:
            target = target.parent
        out.add(target)
    return out


def _here(home: Home, link: Path) -> Path | None:
    """Where a stale link's target lives in this home: the same env dir name under envs/."""
    parts = Path(os.readlink(link)).parts
    if "envs" not in parts:
        return None
    i = len(parts) - 1 - parts[::-1].index("envs")
    cand = home.envs.joinpath(*parts[i + 1:])
    return cand if cand.exists() else None


def stale_links(home: Home) -> list[tuple[Path, str]]:
    """Pointers and roots that are absolute or lead nowhere: (link, what is wrong)."""
    out = []
    for link in _links(home):
        target = os.readlink(link)
        if not os.path.exists(link):
            out.append((link, f"leads nowhere ({target}): the home moved?"))
        elif os.path.isabs(target):
            out.append((link, f"absolute ({target}): breaks if the home moves"))
    return out


def relink(home: Home) -> list[Path]:
    """Rewrite stale links relative, to the same env under this home; returns what was fixed."""
    fixed = []
    for link, _what in stale_links(home):
        cand = _here(home, link) if not os.path.exists(link) else Path(os.path.realpath(link))
        if cand is not None:
            _symlink(link, cand)
            fixed.append(link)
    return fixed


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of the roots: a root whose env is gone."""
    for p in listing(home.roots):
        if p.is_symlink() and not p.exists():
            yield p, "a root whose env is gone (deleted by hand?)"


SWEEPER = Sweeper(("roots",), sweep)
