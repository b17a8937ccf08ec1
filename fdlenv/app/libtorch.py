"""Which libtorch a command uses: the one resolver behind env realize/use, run, shell-hook,
prepare and join.

It sits above the store, the locks and the hardware survey because it reads
all three (each imported only when the answer needs it). Given the variant
token (or none), the lock view (`lockview.LockView`) and the settings, the
answer is an `store.active.Active` (an fdlenv env, or flodl's own libtorch),
or None when nothing is settled. The token arrives parsed (`names.variants.parse`, called once by
the front or, for fdl.yml's `join.libtorch`, by `joinsettings`): a `names.variants.Libtorch`.
In order:
1. No token: the box's active libtorch as flodl reads it (`store.active`),
   carried as it is, unless a near lock (given, beside fdl.yml, in the source
   tree) holds its variant: then that lock decides, so a changed project lock
   moves the box on the next re-dial.
2. A token: `auto` routes on this box's GPUs (`hw.routing`, its one-line
   reason becomes a note), else the token names the variant. Among the
   variants the box can run (routing's candidates), one already realised in
   the home wins over routing's first choice when that one is not realised
   (`auto_route`): a baked image's rocm7.1 is used, not locked past; on a box
   where routing picks cpu a realised GPU build is used before cpu is locked
   or fetched. Realised means fdlenv's pointer for the variant names an env
   (a few stat calls, no lock parsed, no index asked). `--frozen` never
   changes the choice.
3. The env for the variant, first hit wins (one rule for join, prepare, run and
   shell-hook; docs/ROUTING.md, "Which env a variant names"):
   a. a near lock holding it (the project's: given, beside fdl.yml, in the
      source tree): realised from it, online or not (offline and not realised:
      exit 1, the realised env of another build named in a note, never used);
   b. `prefer_realised` (every command but `env realize VARIANT`, and that one
      too for `auto`): the env fdlenv's pointer names for it, with no index
      asked, before any far lock; a far lock naming another build gets a note;
   c. a far lock holding it (the home's on-demand locks, the shipped lock);
   d. the env fdlenv's pointer names for it (a realised env is usable from any
      directory, with no lock in sight and no index request);
   e. `--frozen`: refused (exit 2); else locked on demand (`lock.ondemand`)
      and realised.
"""

from __future__ import annotations

from ..names import variants
from ..base.errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from ..names.variants import Libtorch

    from ..hw.model import Survey
    from ..hw.routing import Route
    from ..names.home import Home
    from ..store.active import Active
    from .settings import Settings, StoreAsk


def realised_variants(home, names=None) -> frozenset[str]:
    """Which of `names` (default: every variant) fdlenv's pointers name a realised env for, in `home`."""
    from ..store import pointers

    return frozenset(v for v in (variants.VARIANTS if names is None else names)
                     if pointers.pointed_env(home, v) is not None)


def auto_route(s: Survey, home: Home | Callable[[], Home | None] | None = None) -> Route:
    """`hw.routing.route` of the Survey `s`, with the variants realised in `home` (a Home, or
    a callable returning one or None; None: none looked at): a realised candidate may win (on a GPU-less
    box a GPU build, which runs on the CPU), and a realised variant passed over is named."""
    from ..hw.routing import route

    if callable(home):
        home = home()
    return route(s) if home is None else route(s, realised_variants(home))


def variant_for(libtorch: Libtorch, survey=None, notes: list[str] | None = None, home=None,
                routes: list | None = None) -> str:
    """The canonical variant `libtorch` names (`auto`: routed); `survey`: a callable returning
    the Survey (default: the real one); `home`: where realised variants are looked for
    (`auto_route`). `auto` appends its one line to `notes` and its Route to `routes`."""
    if not libtorch.auto:
        return libtorch.name
    if survey is None:
        from ..hw.survey import survey
    r = auto_route(survey(), home)
    if routes is not None:
        routes.append(r)
    if r.variant is None:
        raise Fail.permanent(f"--libtorch auto: {r.reason}")
    if notes is not None:
        notes.append(r.line())
    return r.variant


def choose(home, libtorch: Libtorch | None, view, mirrors: dict[str, str], *, platform: str,
           frozen: bool = False, prefer_realised: bool = False, project_root=None, survey=None,
           activate: bool = False, fork: bool = False, notes: list[str], routes: list | None = None,
           check: bool = False):
    """The libtorch to use (a `store.active.Active`), or None when no token is given and
    nothing is active. See the module's docstring for the order; `auto`'s Route goes to `routes`.
    `check`: the env is checked against what its realise recorded, and healed (`store.heal`)."""
    from ..store import active as _active

    if libtorch is None:
        act = _active.find(home, project_root, notes=notes)
        if act is None or act.variant is None or view.holder(act.variant, platform, near_only=True) is None:
            if check and act is not None and act.env is not None:
                act = act._replace(env=_checked(home, act.env, mirrors))
            return act
        variant = act.variant
    else:
        variant = variant_for(libtorch, survey, notes, home, routes)
        prefer_realised = prefer_realised or libtorch.auto   # auto chose it for what the box has
    return _active.of_env(env_for(home, variant, view, mirrors, platform=platform, frozen=frozen,
                                  prefer_realised=prefer_realised, activate=activate, fork=fork,
                                  notes=notes, check=check))


def settle(ask: StoreAsk, say: Callable[[str], None], *, prefer_realised: bool, activate: bool = False,
           fork: bool = False, settings: Settings | None = None, check: bool = False) -> tuple[Settings, Active]:
    """(Settings, Active) for a store command's request, through `choose`; its notes go through
    `say`. No variant asked and nothing active is one `error:` line. `fork`: the caller owns
    the process (the store's install worker may fork it)."""
    from .settings import settings_for

    st = settings or settings_for(ask)
    notes: list[str] = []
    try:
        act = choose(st.home, ask.libtorch, st.view(), st.mirrors, platform=st.platform, frozen=st.frozen,
                     prefer_realised=prefer_realised, project_root=st.project_root, activate=activate,
                     fork=fork, notes=notes, check=check)
    finally:
        for n in notes:
            say(n)
    if act is None:
        from ..store.maintain import env_dirs, variant_of

        realised = sorted({v for d in env_dirs(st.home) if (v := variant_of(d))})
        hint = (f"; realised here: {', '.join(realised)} (`fdlenv env use {realised[0]}` makes one active)"
                if realised else "")
        raise Fail.permanent("--libtorch: no variant given and none active (flodl's libtorch/.active names "
                             f"none){hint}; accepted: " + variants.ACCEPTED)
    return st, act


def env_for(home, variant: str, view, mirrors: dict[str, str], *, platform: str, frozen: bool = False,
            prefer_realised: bool = False, activate: bool = False, fork: bool = False, notes: list[str],
            check: bool = False):
    """Step 3 of the module's docstring: the realised `store.env.Env` of `variant` (`check`:
    checked and healed, `store.heal`; from its lock's index where a lock is in view)."""
    from ..store.realise import realise

    def realised(lock):
        return realise(home, variant, lock, mirrors, platform=platform, activate=activate, fork=fork, check=check)

    def pointed():
        env = _pointed(home, variant, activate)
        if env is not None and check:
            env = _checked(home, env, mirrors)
        return env

    near = view.holder(variant, platform, near_only=True)
    if near is not None:
        try:
            return realised(near)
        except Fail as f:   # the project's lock decides: a realised env of another build is not used
            if f.transient and (env := _pointed(home, variant, False)) is not None:
                notes.append(f"libtorch: {variant}: {near} (the project's lock) names a build not realised "
                             f"here; the realised {env.path.name} is not used in its place, as a project's lock "
                             "pins what it names (docs/ROUTING.md, \"Which env a variant names\")")
            raise
    if prefer_realised and (env := pointed()) is not None:
        if (note := _far_note(home, env, view, variant, platform)):
            notes.append(note)
        return env
    far = view.holder(variant, platform)
    if far is not None:
        return realised(far)
    if (env := pointed()) is not None:
        notes.append(f"libtorch: {variant} as realised before ({env.path.name}); no lock in view holds it")
        return env
    from ..lock import ondemand

    if frozen:
        raise ondemand.refuse_frozen(variant, platform, view)
    return realised(ondemand.lock_variant(home, variant, platform, mirrors, notes.append))


def _checked(home, env, mirrors: dict[str, str]):
    """`env` checked against what its realise recorded, healed when damaged (`store.heal`, imported
    only then)."""
    from ..store import health

    if health.whole(env.path):
        return env
    from ..store.heal import checked
    return checked(home, env, mirrors)


def _far_note(home, env, view, variant: str, platform: str) -> str | None:
    """A note when a far lock (the home's on-demand lock, the shipped one) holds `variant` as
    another build than the realised `env` that is used in its place; None when it names `env`.
    A lock remembered as naming `env` (`store.fastpath`) is not parsed again."""
    far = view.holder(variant, platform)
    if far is None:
        return None
    from ..store import fastpath

    digest = fastpath.lock_digest(far)
    known = fastpath.lookup(home, digest, variant, platform)
    if known is not None and known.path == env.path:
        return None
    if known is not None:
        key = known.key
    else:
        from ..lock.file import read_variant
        from ..store.envkey import env_key

        key = env_key(read_variant(far, variant, platform), platform)
        if key == env.key:
            fastpath.remember(home, digest, variant, platform, env)   # this lock names it: said once
            return None
    return (f"libtorch: {variant} as realised ({env.path.name}); {far} names another build "
            f"({variant}-{key[:16]}), not used: a realised env wins over the home's and fdlenv's own locks "
            f"(docs/ROUTING.md); `fdlenv env realize {variant}` moves this box to that build")


def _pointed(home, variant: str, activate: bool):
    from ..store import pointers

    env = pointers.pointed_env(home, variant)
    if env is not None and activate:
        pointers.set_active(home, env)
    return env
