"""`fdlenv env realize|list|path|use|remove|verify|gc`: the store from the command line.

Where output goes, in every command: what was asked for (a list, a path, a
report, a summary) on stdout, as JSON with `--json`; progress, notes and
warnings on stderr; a failure is one `error:` line on stderr (and, with
`--json`, `{"error", "exit"}` on stdout: the CLI front prints it).
"""

from __future__ import annotations

from ...base.output import emit, error_line

import sys
import time

from ...base.errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers
    import argparse
    from typing import Any

    from ...names.home import Home, Sweeper
    from ...store.gc import GcPlan


EPILOG = """examples:
  fdlenv env realize --libtorch cu128 --json
  fdlenv env realize --libtorch rocm7.1 --lock conda-lock.yml --mirror conda-forge=https://mirror.example/conda-forge
  fdlenv env list
  fdlenv env use cpu
  fdlenv env verify cu128 --full --repair
  fdlenv env gc --dry-run
"""


# Each action's own --help examples.
EXAMPLES = {
    "realize": ["fdlenv env realize cu128", "fdlenv env realize --libtorch auto --json",
                "fdlenv env realize rocm7.1 --lock conda-lock.yml --mirror pytorch=https://mirror.example/whl"],
    "list": ["fdlenv env list", "fdlenv env list --json | jq '.envs[].size'"],
    "path": ["fdlenv env path cu128",
             "fdlenv env path cpu --json | jq -r .libtorch_root   # libtorch's dir (shell-hook sets LIBTORCH_PATH)"],
    "use": ["fdlenv env use cpu", "fdlenv env use cu128 --lock conda-lock.yml"],
    "remove": ["fdlenv env remove cpu --dry-run", "fdlenv env remove cpu"],
    "verify": ["fdlenv env verify", "fdlenv env verify cu128 --full --repair"],
    "gc": ["fdlenv env gc --dry-run", "fdlenv env gc --sources --json"],
}


def _action(s: Subparsers, name: str, **kw: Any) -> argparse.ArgumentParser:   # kw: argparse's own
    import argparse

    return s.add_parser(name, epilog="examples:\n" + "".join(f"  {e}\n" for e in EXAMPLES[name]),
                        formatter_class=argparse.RawDescriptionHelpFormatter, **kw)


def add_parser(sub: Subparsers) -> None:
    import argparse

    from ..options import add, add_shape, home_option, mirror_option, variant_option

    p = sub.add_parser("env", help="realise, inspect, verify and collect locked environments",
                       description="Locked, content-addressed libtorch environments under $FLODL_HOME/envs.",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    s = p.add_subparsers(dest="env_command", metavar="ACTION")
    s.required = True

    r = _action(s, "realize", aliases=["realise"], help="make sure a variant's env exists (atomic, verified)")
    add_shape(r, ("env", "realize"))
    r.set_defaults(func=cmd_realize)

    ls = _action(s, "list", help="realised envs: variant, key, path, size, created, active, rooted")
    ls.add_argument("--json", action="store_true")
    home_option(ls)
    ls.set_defaults(func=cmd_list)

    pa = _action(s, "path", help="print the env path of a realised variant")
    variant_option(pa, required=True)
    pa.add_argument("--json", action="store_true")
    home_option(pa)
    pa.set_defaults(func=cmd_path)

    u = _action(s, "use", help="make a variant flodl's active libtorch (realising it when a lock is given)")
    variant_option(u, required=True)
    add(u, "lock", "realise the variant from this lock first")
    u.add_argument("--json", action="store_true")
    mirror_option(u)
    home_option(u)
    u.set_defaults(func=cmd_use)

    rm = _action(s, "remove", help="drop a variant's roots and pointers, then collect what nothing uses")
    variant_option(rm, required=True)
    rm.add_argument("--dry-run", action="store_true", help="only say what would go")
    rm.add_argument("--json", action="store_true")
    home_option(rm)
    rm.set_defaults(func=cmd_remove)

    v = _action(s, "verify", help="check envs against their records; --full re-hashes every file")
    variant_option(v, required=False)
    v.add_argument("--full", action="store_true", help="re-hash file contents (sha256_in_prefix or sha256)")
    v.add_argument("--repair", action="store_true", help="rebuild envs that fail, from their manifest")
    mirror_option(v, "channel or wheel-index mirror for what --repair fetches again (repeatable)")
    v.add_argument("--json", action="store_true")
    home_option(v)
    v.set_defaults(func=cmd_verify)

    g = _action(s, "gc", help="remove what nothing uses: envs, cache entries, archives, leftovers")
    g.add_argument("--dry-run", action="store_true", help="only say what would go")
    g.add_argument("--sources", action="store_true", help="also drop fetched source trees no join holds")
    g.add_argument("--json", action="store_true")
    home_option(g)
    g.set_defaults(func=cmd_gc)


def cmd_realize(args: Args) -> int:
    import os

    from ...hot import memo
    from ...base import progress
    from ...names import variants
    from ...store.statecodec import restored
    from ..options import hot_ask, owns_process, store_ask
    from ...app.libtorch import settle
    from ...app.settings import settings_for
    from ...base.progress import say
    from ...store.pointers import active_label

    t0 = time.monotonic()
    ask = store_ask(args)
    st = settings_for(ask)
    plan = memo.start(hot_ask("realize", args), ask.variant, st)
    before = active_label(st.home)
    st, act = settle(ask, say, prefer_realised=False, activate=True, fork=owns_process(args), settings=st, check=True)
    env = act.env
    assert env is not None, "a named variant is realised as an env"   # flodl's own libtorch is never the answer
    after = active_label(st.home)
    if after != before:     # realise activates, as flodl's install does: never silently
        say(f"the active libtorch is now {after} (was {before or 'none'}); `fdlenv env use VARIANT` switches")
    if variants.get(env.variant).cuda:   # a cpu re-dial imports nothing more
        from ...source.nvcc import note_once
        if (note := note_once(st.home, env, restored(os.environ))):   # once per env, before the memo
            progress.note("env realize", note)
    if st.view().holder(env.variant, st.platform) is not None:
        memo.record(plan, st.home, act)   # a re-dial from a lock: replayed next time
    out = dict(env.to_json(), seconds=round(time.monotonic() - t0, 4), active=after, was_active=before)
    if args.json:
        emit(out)
    else:
        print(f"{env.variant}: {env.path}" + (" (created)" if env.created else ""))
    return 0


def _home(args: Args) -> Home:
    from ...app.settings import resolve
    return resolve(args.home).home


def cmd_list(args: Args) -> int:
    from ...store.maintain import listing

    envs = listing(_home(args))
    if args.json:
        emit({"envs": [e.to_json() for e in envs]})
        return 0
    if not envs:
        print("no environments realised yet (fdlenv env realize --libtorch VARIANT)", file=sys.stderr)
    if envs:
        print(f"{'VARIANT':8} {'KEY':16}  {'SIZE':>13}  {'CREATED':25}  {'STATE':13} PATH")
    for e in envs:
        flags = ",".join(f for f, on in (("DAMAGED", e.damaged), ("active", e.active), ("rooted", e.rooted)) if on) or "-"
        print(f"{e.variant:8} {e.key[:16]}  {e.size / (1 << 20):9.1f} MiB  {e.created:25}  {flags:13} {e.path}")
    for e in envs:
        if e.damaged:
            print(f"warning: {e.path.name} is damaged (its manifest: {e.damaged}); `fdlenv env verify --repair` "
                  "removes it, a realise builds it again", file=sys.stderr)
    return 0


def cmd_path(args: Args) -> int:
    from ...names import variants
    from ...store.pointers import pointed_env

    home = _home(args)
    name = variants.parse_token(args.libtorch, allow_auto=False)
    env = pointed_env(home, name)
    if env is None:
        raise Fail.permanent(f"--libtorch: variant {name!r} is not realised in {home.root}; "
                             f"run `fdlenv env realize --libtorch {name}`")
    if args.json:
        emit(env.to_json())
    else:
        print(env.path)
    return 0


def cmd_use(args: Args) -> int:
    from ..options import owns_process, store_ask
    from ...app.libtorch import settle
    from ...base.progress import say
    from ...store.pointers import active_label

    st, act = settle(store_ask(args, allow_auto=False), say, prefer_realised=True, activate=True,
                     fork=owns_process(args))
    env, home = act.env, st.home
    assert env is not None, "a named variant is realised as an env"   # flodl's own libtorch is never the answer
    if args.json:
        emit(dict(env.to_json(), active=active_label(home)))
    else:
        print(f"active: {active_label(home)} -> {env.libtorch_root}")
    return 0


def cmd_verify(args: Args) -> int:
    from ...names import variants
    from ...store.heal import repair
    from ...store.maintain import env_dirs, variant_of, verify

    home = _home(args)
    want = variants.parse_token(args.libtorch, allow_auto=False) if args.libtorch else None
    dirs = [d for d in env_dirs(home) if want is None or variant_of(d) == want]
    if want and not dirs:
        raise Fail.permanent(f"variant {want!r} is not realised in {home.root}")
    reports, bad = [], 0
    from ...base.progress import Tally

    for d in dirs:
        tally = Tally(f"verifying {d.name}") if args.full else None
        try:   # --full re-hashes every file: one progress line past a second (files, bytes, ETA)
            rep = verify(d, full=args.full, home=home, progress=tally)
        finally:
            if tally is not None:
                tally.close()
        repaired = False
        if rep.problems and args.repair:
            from ...app.settings import resolve
            repair(home, d, rep, resolve(args.home, args.mirror).mirrors)
            repaired = rep.damaged is not None or not verify(d, full=True).problems
        bad += bool(rep.problems) and not repaired
        reports.append(dict(rep.to_json(), repaired=repaired))
        if not args.json:
            state = "ok" if not rep.problems else (("removed" if rep.damaged else "repaired") if repaired
                                                   else "FAILED")
            print(f"{state:8} {d}")
            if rep.moved_from:
                print(f"         note: its home moved (built at {rep.moved_from}); it works here, "
                      f"but {len(rep.stale)} file(s) with an embedded prefix still name the old "
                      "path" + (f" ({', '.join(rep.stale[:3])})" if rep.stale else ""))
            for p in rep.problems[:20]:
                print(f"         {p.package}: {p.path}: {p.what}")
    links = _verify_links(home, args) + _verify_pointers(home, args)
    bad += sum(1 for x in links if not x["repaired"])
    message = f"{bad} env(s) or link(s) failed verification; rerun with --repair to rebuild them"
    if args.json:   # one object: the report, carrying the failure when there is one
        emit({"envs": reports, "links": links, **({"error": message, "exit": 2} if bad else {})})
    if bad:
        error_line(message)
        return 2
    return 0


def _verify_links(home: Home, args: Args) -> list[dict[str, object]]:
    """flodl's pointers and the GC roots: absolute or dangling ones (an older fdlenv, a moved
    home) are reported, and rewritten relative with --repair."""
    from ...store.pointers import relink, stale_links

    stale = stale_links(home)
    fixed = set(relink(home)) if stale and args.repair else set()
    out = []
    for link, what in stale:
        out.append({"link": str(link), "problem": what, "repaired": link in fixed})
        if not args.json:
            state = "repaired" if link in fixed else "FAILED"
            print(f"{state:8} {link}: {what}")
    return out


def _verify_pointers(home: Home, args: Args) -> list[dict[str, object]]:
    """flodl's pointer for a variant a root still keeps, gone (a deleted link): reported, and
    made again with --repair (`pointers.missing`)."""
    from ...store.pointers import link_variant, missing

    out = []
    for label, env in missing(home):
        fixed = False
        if args.repair:
            link_variant(home, env)
            fixed = True
        out.append({"link": str(home.libtorch / label), "problem": f"missing (a root keeps {env.path.name})",
                    "repaired": fixed})
        if not args.json:
            print(f"{'repaired' if fixed else 'FAILED':8} {home.libtorch / label}: missing (a root keeps "
                  f"{env.path.name})")
    return out


def sweepers() -> tuple[Sweeper, ...]:
    """The sweeps of the layers above the store that `env gc` and `env remove` hand in, each
    beside the names it cleans (the store's own are `store.gc.SWEEPERS`)."""
    from ...app import walkthrough
    from ...hot import memo
    from ...source import build, fetch

    return memo.SWEEPER, build.SWEEPER, walkthrough.SWEEPER, fetch.SWEEPER


def cmd_gc(args: Args) -> int:
    from ...store.gc import collect

    plan, _ = collect(_home(args), dry_run=args.dry_run, sources=args.sources, sweeps=sweepers())
    _report_plan(args, plan)
    return 0


def cmd_remove(args: Args) -> int:
    from ...names import variants
    from ...store.gc import collect
    from ...store.maintain import env_dirs, variant_of

    home = _home(args)
    name = variants.parse_token(args.libtorch, allow_auto=False)
    mine = [d for d in env_dirs(home) if variant_of(d) == name]
    if not mine:
        raise Fail.permanent(f"--libtorch: variant {name!r} is not realised in {home.root}")
    plan, links = collect(home, dry_run=args.dry_run, remove=name, sweeps=sweepers())
    stay = [str(d) for d in mine if d not in plan.envs]
    _report_plan(args, plan, dropped=[str(p) for p in links], still_in_use=stay)
    return 0


def _report_plan(args: Args, plan: GcPlan, **extra: list[str]) -> None:
    if args.json:
        emit(dict(plan.to_json(), dry_run=args.dry_run, **extra))
        return
    verb = "would free" if args.dry_run else "freed"
    print(f"{verb} {plan.bytes / (1 << 20):.1f} MiB: {len(plan.envs)} env(s), "
          f"{len(plan.cache_entries)} cache entr(ies), {len(plan.archives)} archive(s), "
          f"{len(plan.other)} other")
    for p in plan.envs:
        print(f"  env {p}")
    for p, why in plan.other[:20]:
        print(f"  {p}: {why}")
    for kept in extra.get("still_in_use") or ():
        print(f"  kept {kept}: a running process still uses it (gc takes it once that ends)")
    print(f"  kept envs (rooted, pointed at or in use): {plan.kept['envs'] / (1 << 20):.1f} MiB")
    if plan.kept["never_collected"]:
        print(f"  kept {', '.join(plan.kept['never_collected'])}: never collected")
    if "source" in plan.kept:
        print(f"  kept source/: {plan.kept['source']}")
