"""Writing the hot commands' memo, which `hot.replay` replays: the answer the slow path settled
and a signature of every file it was settled from.

An eligible command (`replay.answer` says which) names a variant and has no project, so
the resolver reads only these, and they are the memo's dependencies:
- the lock given, its split sibling for the variant, and the root a realise refreshes
  for each (`roots/<variant>-<tag>`); for `env realize`, with or without a lock given, the
  same of each far lock it may reach (the home's on-demand lock, the shipped lock at
  either place it may be: `lockview`), so the re-dial without `--lock` is replayed too;
- flodl's pointers for the variant (`precompiled/<dir>`, `<dir>-fdlenv`) and `.active`;
- the env's manifest (gone when gc removed the env) and, for run and shell-hook, its
  cached activation;
- on AMD, each host ROCm lib dir the lookup tries (a ROCm install added or removed
  changes LD_LIBRARY_PATH);
- fdlenv's own package directory (an upgrade rewrites it).
In order: `start` signs the first group before the resolver runs; `record` signs every
dependency after it, and writes the memo only when none moved meanwhile (an answer
settled from a state that changed under it is never replayed) and each is older than
the memo itself (one changed within the memo's clock tick would keep its signature; a
dependency on another file system, whose clock may differ, must be two seconds older).
The first call after a change therefore writes nothing; the next one writes the memo.
Writing is best effort: a read-only home simply has no memo.
"""

from __future__ import annotations

import os
from pathlib import Path

from .. import PACKAGE_DIR
from ..base import atomic
from ..base.record import Record
from ..names.home import Home, Living, Sweeper, listing
from ..lock.paths import home_lock, shipped_candidates, split_path
from ..names.roots import absolute, home_root
from ..store import pointers, statecodec
from ..store.env import MANIFEST
from . import replay

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator
    from typing import Protocol

    from ..store.active import Active
    from ..store.env import Env

    class Settled(Protocol):
        """What `start` reads of the command's settings (`app.settings.Settings`, above hot)."""
        @property
        def home(self) -> Home: ...
        @property
        def project(self) -> object: ...

_OTHER_FS_MARGIN_NS = 2_000_000_000


class Plan(Record):
    """What `start` found: the memo's kind, key and path, and the dependencies it signed."""

    kind: str
    key: str
    path: str
    deps: dict[str, str]     # path -> its signature (`replay.sig`)


def start(ask: replay.Ask | None, variant: str | None, st: Settled) -> Plan | None:
    """A plan when this call is one `replay` may replay later (see its docstring), else None.
    `ask`: the command's request as the replay reads it (None: none it could replay);
    `variant`: the canonical variant the command asked for (None: none, or `auto`)."""
    from ..names import variants

    if (ask is None or variant is None or not ask.libtorch or st.project is not None
            or os.environ.get("FDLENV_NO_HOTPATH") == "1"):
        return None
    base = statecodec.restored(os.environ)
    key = replay.key_of(ask, os.environ, base)
    root = home_root(ask.home, os.environ)
    v = variants.VARIANTS[variant]
    pre = str(st.home.precompiled / v.flodl_name)
    paths = [pre, pre + pointers.OWN_SUFFIX, str(st.home.active_pointer),
             PACKAGE_DIR]
    locks = [Path(absolute(ask.lock))] if ask.lock else []
    if ask.kind == "realize":   # past the given lock (or without one) a realise reads the far locks
        locks += [home_lock(st.home), *shipped_candidates()]
    for lock in locks:
        for f in (lock, split_path(lock, v.name)):
            paths += [str(f), str(pointers.root_link(st.home, f, v.name))]
    return Plan(ask.kind, key, replay.memo_path(root, ask.kind, key), {p: replay.sig(p) for p in paths})


def record(plan: Plan | None, home: Home, act: Active) -> None:
    """Write the memo of `act` (a `store.active.Active` of an fdlenv env) under `plan`."""
    if plan is None or act.env is None:
        return
    try:
        _record(plan, home, act, act.env)
    except OSError:
        pass   # a read-only or full home: no memo, the slow path answers


def _record(plan: Plan, home: Home, act: Active, env: Env) -> None:
    deps = {p: replay.sig(p) for p in plan.deps}
    if deps != plan.deps:
        return                          # the resolver's inputs moved while it ran
    later = [os.path.join(str(env.path), MANIFEST)]   # signed now: the answer names them
    answer = {"variant": env.variant, "key": env.key, "path": str(env.path),
              "libtorch_root": str(env.libtorch_root), "label": act.label,
              "active": pointers.active_label(home) or ""}
    unset: list[str] = []
    sets: list[tuple[str, str]] = []
    if plan.kind != "realize":
        from ..store import activation

        template = {var: statecodec.SENTINEL for var in statecodec.PATH_LISTS}
        template.update({v: os.environ[v] for v in statecodec.ROCM_VARS if v in os.environ})
        result = activation.environ_for(home, act, template)
        unset = sorted({*activation.activation_diff(home, env)["unset"], *(v for v in template if v not in result)})
        sets = [(k, v) for k, v in result.items() if template.get(k) != v]
        later.append(str(activation.cache_file(home, env)))
        if act.vendor == "amd":
            later += [os.path.join(str(root), sub) for root in activation.rocm_roots(template) for sub in ("lib", "lib64")]
    deps.update({p: replay.sig(p) for p in later})
    _write_if_settled(plan.path, replay.memo_text(plan.key, deps, answer, unset, sets), deps)


def _write_if_settled(path: str, text: str, deps: dict[str, str]) -> None:
    """Write the memo (temp, rename) unless a dependency is as young as the memo itself."""

    def settled(now: os.stat_result) -> bool:
        for p in deps:
            for stat in (os.lstat, os.stat):   # a symlink and what it names
                try:
                    st = stat(p)
                except OSError:
                    continue
                margin = 0 if st.st_dev == now.st_dev else _OTHER_FS_MARGIN_NS
                if max(st.st_mtime_ns, st.st_ctime_ns) + margin >= now.st_mtime_ns:
                    return False
        return True

    # 0644 whatever the umask: a memo others may write is never replayed (`replay.trusted`)
    atomic.write_text(Path(path), text, durable=False, publish_if=settled, mode=0o644)


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of the memos, handed in by the command (the store imports no cache): a
    memo naming an env that goes or is gone (`replay.memo_env`)."""
    for p in listing(home.hot):
        env = None if p.name.startswith(".") else replay.memo_env(str(p))
        name = os.path.basename(env) if env is not None else None
        if name is not None and (name in living.gone or not (home.env_dir(name) / MANIFEST).is_file()):
            yield p, "memo of an env that is gone"


SWEEPER = Sweeper(("hot",), sweep)
