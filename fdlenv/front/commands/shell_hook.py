"""`fdlenv shell-hook`: the same activation map `run` uses, for shells and IDEs.

`eval "$(fdlenv shell-hook --libtorch cu128)"` in bash, zsh or sh;
`fdlenv shell-hook --libtorch cu128 | source` in fish (the shell is `--shell`, else
$SHELL's name as pixi reads it, else sh). What is
printed is the difference between the shell's exported environment and the
activated one, so:
- the prompt and every other shell-owned variable stay as they are;
- activating another variant over one first undoes the first (its PATH and
  loader entries and its variables: `activation.restored`);
- `--deactivate` prints what restores the shell as it was before;
- builds get a tree per variant (`buildtree.shell_tree`): CARGO_TARGET_DIR is
  `target/fdlenv-<variant>`, relative, so cargo puts it under the directory each
  build runs in, never the one where the hook ran (a target dir of the user's own
  is left); FDLENV_BUILD_DIR (`build/fdlenv-<variant>`) and FDLENV_VARIANT do the
  same for CMake.
A cu126/cu128 env says once, on stderr, when CMake's Torch config would find no
host nvcc of its CUDA major (`source.nvcc.note_once`).
`--json` prints pixi's shape, `{"environment_variables": {...}}`, plus what
fdlenv adds (variant, key, path, label, unset).
On a home where the variant was never realised, it is realised first (the
download `env realize` does, with its progress on stderr, and a note saying so):
bake `fdlenv env realize` into an image rather than into a first shell.
"""

from __future__ import annotations

from ...base.output import emit

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from ..options import Args, Subparsers


EPILOG = """examples:
  eval "$(fdlenv shell-hook --libtorch cu128)"
  fdlenv shell-hook --shell fish --libtorch cpu | source
  eval "$(fdlenv shell-hook --deactivate)"
  fdlenv shell-hook --libtorch cpu --json
"""


def add_parser(sub: Subparsers) -> None:
    import argparse

    from ..options import add_shape

    p = sub.add_parser("shell-hook", help="print the activation of a variant's env for a shell",
                       epilog=EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter)
    add_shape(p, ("shell-hook",),
              json='print {"environment_variables": {VAR: value}, "unset": [...], variant, key, path}')
    p.set_defaults(func=cmd_shell_hook)


def cmd_shell_hook(args: Args) -> int:
    from ...hot import memo
    from ...base.progress import say
    from ...base.shells import render
    from ...store.activation import STATE, environ_for, restored, shell_state

    base = dict(os.environ)
    about: dict[str, object] = {}
    if args.deactivate:
        target = restored(base)
    else:
        from ...base import progress
        from ..options import hot_ask, owns_process, store_ask
        from ...app.libtorch import settle
        from ...app.settings import settings_for
        from ...names.buildtree import shell_tree
        from ...source.nvcc import note_once

        ask = store_ask(args)
        st = settings_for(ask)
        plan = memo.start(hot_ask("shell-hook", args), ask.variant, st)
        st, act = settle(ask, say, prefer_realised=True, fork=owns_process(args), settings=st)
        if act.env is not None and act.env.created:
            say(f"shell-hook: {act.variant} was not realised on this home, so it was realised now; "
                f"`fdlenv env realize --libtorch {act.variant}` does this ahead of a shell")
        original = restored(base)
        target = shell_tree(environ_for(st.home, act, original), original, act.variant)
        if act.env is not None and (note := note_once(st.home, act.env, original)):   # before the memo
            progress.note("shell-hook", note)
        target[STATE] = shell_state(original, target)
        about = {"variant": act.variant, "label": act.label, "libtorch": str(act.dir),
                 "key": act.env.key if act.env else None,
                 "path": str(act.env.path) if act.env else None}
        memo.record(plan, st.home, act)
    changes = {k: target.get(k) for k in sorted(set(base) | set(target)) if base.get(k) != target.get(k)}
    if args.json:
        emit({"environment_variables": {k: v for k, v in changes.items() if v is not None},
                          "unset": sorted(k for k, v in changes.items() if v is None), **about})
    else:
        from ..table import chosen_shell
        print(render(chosen_shell(args.shell), changes), end="")
    return 0
