"""`fdlenv run [--libtorch V] [--] CMD [ARGS...]`: exec CMD inside a variant's activated env.

No shell sits between fdlenv and CMD: fdlenv execs it, so its exit code and
signals are CMD's own. What fdlenv itself says, like a shell does: 127 when
CMD is not found, 126 when it cannot be executed, 130 on Ctrl-C before CMD
started. `--` is needed only when CMD itself starts with `-`.

Which env: `libtorch.resolve_libtorch` through `app.libtorch.settle`, preferring what is
realised (no lock needed for a variant that is). Then the activation map, a build
tree per variant (`buildtree`: cargo's target dir at the crate's root,
`target/fdlenv-<variant>`, unless the user chose one), the host-nvcc note
once per CUDA env without its own toolkit, and every time CMD is CMake (`source.nvcc.note_once`;
the memo's replay leaves CMake in a CUDA env to this path), the memo, the exec.
"""

from __future__ import annotations

from ...base.output import fail

from ...base.errors import Fail

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  fdlenv run --libtorch cu128 --lock conda-lock.yml -- cargo build --release
  fdlenv run --libtorch cu128 ./target/release/train --epochs 3   # built into target/fdlenv-cu128/: run from there
  fdlenv run --libtorch cpu python3 -c 'import os; print(os.environ["LIBTORCH_PATH"])'
"""

INTERRUPTED = 130   # Ctrl-C before CMD started (127 and 126: hot.replay.exec_in)


def add_parser(sub: Subparsers) -> None:
    import argparse

    from ..options import add_shape

    p = sub.add_parser("run", help="run a command inside a variant's activated env",
                       usage="fdlenv run [--libtorch VARIANT] [--lock FILE] [--home DIR] [--] CMD [ARGS...]",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape(p, ("run",))
    p.add_argument("command", nargs=argparse.REMAINDER, metavar="CMD [ARGS...]",
                   help="the command and its arguments (default variant: the box's active one)")
    p.set_defaults(func=cmd_run)


def cmd_run(args: Args) -> int:
    from ..table import command_of

    argv = command_of(args.command, args.tail)
    if not argv:
        raise Fail.permanent("run: no command; usage: fdlenv run [--libtorch VARIANT] [--] CMD [ARGS...]")
    try:
        return _run(args, argv)
    except KeyboardInterrupt:
        return fail("run: interrupted", INTERRUPTED)


def _run(args: Args, argv: list[str]) -> int:
    import os

    from ...hot import memo
    from ...base import progress
    from ..options import hot_ask, owns_process, store_ask
    from ...app.libtorch import settle
    from ...app.settings import settings_for
    from ...names.buildtree import build_tree
    from ...hot.replay import exec_in
    from ...store.statecodec import restored
    from ...base.progress import say
    from ...source.nvcc import note_once, runs_cmake
    from ...store import leases
    from ...store.activation import environ_for

    ask = store_ask(args)
    st = settings_for(ask)
    plan = memo.start(hot_ask("run", args), ask.variant, st)
    st, act = settle(ask, say, prefer_realised=True, fork=owns_process(args), settings=st, check=True)
    own = restored(os.environ)   # the caller's environment, a shell activation undone
    environ = build_tree(environ_for(st.home, act), own, act.variant, os.getcwd())
    if act.env is not None:
        if (note := note_once(st.home, act.env, own, always=runs_cmake(argv))):   # once, and for CMake
            progress.note("run", note)
        leases.take(act.env.path)   # inherited through exec: env gc leaves the env while CMD runs
    memo.record(plan, st.home, act)
    return exec_in(argv, environ)
