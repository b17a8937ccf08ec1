"""The hot commands answered from a memo: `run`, `shell-hook` and the re-dial `env realize`.

Why: every new shell with the hook in .bashrc, every `fdlenv run` and every re-dial
would otherwise import the resolver (pathlib, json, re and some thirty modules, about
25 ms) to derive an answer that has not changed. So the slow path writes its answer
down (`hot.memo`) with a signature of every file it was derived from, and this module,
importing only os and sys (fcntl for the locks), replays it while every signature
still matches, and only a memo this user owns, no one else may write (`trusted`) and that
names an env in this home's envs/ (`within`). Anything else returns None and the slow path runs (and writes the memo
again): another shape, `auto` or no token, a project's fdl.yml from the cwd up (its
settings need YAML), a changed, new or missing file, a store lock held by `env gc`.

In order:
1. `answer(ask)`, an `Ask` the front read (`front.table`): the key, everything the answer
   depends on that is not a file (the command, the token, the home, the values of the front
   table's memo-keying options: the lock's absolute path, the frozen flag, the mirrors, the
   shell; FDLENV_FROZEN, ROCm's variables, the machine, fdlenv's version).
2. The memo, `<home>/cache/hot/<kind>-<hash of the key>`: NUL-separated fields, the key
   itself first (a hash collision is a miss), then each dependency as a path and its
   signature (`sig`), then the answer: the env and, for `run` and `shell-hook`, the
   activation as a recipe (variables to unset; variables to set, where SENTINEL stands
   for the inherited value of a path list).
3. The replay: `env realize` prints the env, `shell-hook` the changes, `run` takes the
   env's lease and execs CMD, each under the store lock as the slow path is.
`hot.memo` writes a memo only when no dependency changed while the slow path ran and
none is younger than the memo itself (a change within the same clock tick would keep
its signature; `memo.record`). `FDLENV_NO_HOTPATH=1` turns the replay off.

The replay imports a short, named list (the Layers table's `hot` row): the activation's
codec from `store.statecodec` (so both paths apply an activation the same way), the home's
root and config names from `names.roots`, and only where the shape needs them the lease file
(`names.leasefile`, run) and cargo's tree per variant (`names.buildtree`, shell-hook and run:
it depends on the cwd, so it is never in a memo and the replay derives it on every call, as
the slow path does), shell syntax (`base.shells`) and the JSON writer or a failure's line
(`base.output`). tests/test_hot_imports.py pins each shape's list. `exec_in` (run's exec, with a shell's 126 and 127)
lives here and `commands.run` calls it.
"""

import os
import sys

from ..base.record import Record
from ..names.roots import ENVS, HOT, STORE_LOCK, home_root, project_above
from ..store.statecodec import ROCM_VARS, STATE, apply, restored, shell_state

TYPE_CHECKING = False   # `typing` stays off the replay's path
if TYPE_CHECKING:
    from collections.abc import Mapping

    # A memo's answer (its fields by name: variant, key, path, libtorch_root, label, active),
    # the variables its activation unsets, and those it sets (`read_memo`).
    Memo = tuple[dict[str, str], list[str], list[tuple[str, str]]]

FORMAT = "fdlenv-hot-1"
END = "end"   # a memo's last field: a torn write is no memo
NOT_FOUND, NOT_EXECUTABLE = 127, 126


class Ask(Record):
    """What a hot command was asked, as the front read it (`front.table.ask_of`, from its one
    option table): the memo's kind, the `--libtorch` token as given (`env realize VARIANT`
    folded in), --home and --lock, `keyed` (the values of the table's memo-keying options,
    in its order, as strings), and what the replay prints or runs."""
    kind: str                       # realize | shell-hook | run
    libtorch: str | None = None
    home: str | None = None
    lock: str | None = None
    keyed: tuple[str, ...] = ()
    json: bool = False
    shell: str = "sh"
    deactivate: bool = False
    argv: tuple[str, ...] = ()      # run's CMD, `--` and its tail included


def exec_in(argv: list[str], environ: "Mapping[str, str]") -> int:
    """Exec CMD with `environ`; what a shell says when it cannot: 127 not found, 126 not
    executable (returned; on success this never returns)."""
    if "/" in argv[0] and not os.path.lexists(argv[0]):   # built into the variant's tree?
        from ..names.buildtree import in_tree
        if (found := in_tree(argv[0], environ, os.getcwd())) is not None:
            shown = os.path.relpath(found)
            print(f"fdlenv run: {argv[0]} is not there; running {found if shown.startswith('..') else shown}, "
                  "built into this variant's tree (CARGO_TARGET_DIR)", file=sys.stderr, flush=True)
            argv = [found, *argv[1:]]
    try:
        _execvpe(argv, environ)
    except FileNotFoundError:
        from ..base.output import fail
        if "/" in argv[0]:   # a path is never searched on PATH
            return fail(f"run: no such file: {argv[0]!r} (a path with a `/` is run as it is; a build "
                        f"under fdlenv lands in $CARGO_TARGET_DIR: {environ.get('CARGO_TARGET_DIR') or 'target/'})",
                        NOT_FOUND)
        return fail(f"run: command not found: {argv[0]!r} (searched the env's PATH)", NOT_FOUND)
    except OSError as e:
        from ..base.output import fail
        return fail(f"run: cannot execute {argv[0]!r}: {e.strerror or e}", NOT_EXECUTABLE)
    return 0  # not reached: exec replaced this process


def _execvpe(argv: list[str], environ: "Mapping[str, str]") -> None:
    """`os.execvpe`, without the `warnings` module its PATH lookup (`os.get_exec_path`) imports
    on every call: CMD as it is when it names a directory, else each of the env's PATH entries
    in turn (`os.defpath` when it has none), a missing one or a non-directory passed over; what
    raises is the first other failure (EACCES, ENOEXEC), else the last one."""
    file = argv[0]
    if os.path.dirname(file):
        os.execve(file, argv, environ)
    path = environ.get("PATH")
    last: OSError | None = None
    saved: OSError | None = None
    for d in (os.defpath if path is None else path).split(os.pathsep):
        try:
            os.execve(os.path.join(d, file), argv, environ)
        except (FileNotFoundError, NotADirectoryError) as e:
            last = e
        except OSError as e:
            last = e
            saved = saved or e
    raise saved or last or FileNotFoundError(file)


# ------------------------------------------------------------------ the key and the memo

def sig(path: str) -> str:
    """What a change to `path` changes: its lstat (and, through a symlink, its target's stat);
    `-` when absent. ctime is in it, which no `touch` can set back."""
    out = []
    for stat in (os.lstat, os.stat):
        try:
            st = stat(path)
        except OSError:
            out.append("-")
            break
        out.append(f"{st.st_dev}.{st.st_ino}.{st.st_mode}.{st.st_size}.{st.st_mtime_ns}.{st.st_ctime_ns}")
        if (st.st_mode & 0o170000) != 0o120000:   # not a symlink: lstat said it all
            break
    return "/".join(out)


def key_of(ask: Ask, environ: "Mapping[str, str]", base: "Mapping[str, str]") -> str:
    """Everything a memo's answer depends on that is not a file (see the module docstring)."""
    from .. import __version__

    fields = [FORMAT, __version__, ask.kind, ask.libtorch or "", home_root(ask.home, environ), *ask.keyed,
              environ.get("FDLENV_FROZEN") or "", environ.get("FDLENV_CONDA_VARS") or "",
              *(f"{v}={base.get(v) or ''}" for v in ROCM_VARS),
              os.uname().machine]
    return "\x1f".join(fields)


def memo_path(root: str, kind: str, key: str) -> str:
    h = 0xcbf29ce484222325   # FNV-1a, 64 bits: a file name, not a secret (the key is checked)
    for b in key.encode("utf-8", "surrogateescape"):
        h = ((h ^ b) * 0x100000001b3) & 0xFFFFFFFFFFFFFFFF
    return os.path.join(root, HOT, f"{kind}-{h:016x}")


def memo_text(key: str, deps: dict[str, str], answer: dict[str, str], unset: list[str],
              sets: list[tuple[str, str]]) -> str:
    """A memo as `read_memo` reads it: NUL-separated, the key, the dependencies (path and
    signature), the answer's fields, the recipe (`u` VAR, `s` VAR value), then END."""
    fields = [key, str(len(deps))]
    for p, s in deps.items():
        fields += [p, s]
    fields.append(str(len(answer)))
    for name, value in answer.items():
        fields += [name, value]
    for var in unset:
        fields += ["u", var, ""]
    for var, value in sets:
        fields += ["s", var, value]
    return "\0".join([*fields, END])


def within(path: str, root: str) -> bool:
    """Whether `path`, resolved (links and `..` followed), lies under `root`, resolved: a memo
    names an env in this home's envs/ (`base.confine`'s rule, for the replay: here, so a replay
    imports no module for it)."""
    real, top = os.path.realpath(path), os.path.realpath(root)
    return real.startswith(top.rstrip("/") + "/")


def trusted(st: os.stat_result) -> bool:
    """A memo is read as ssh reads its config: owned by this user, and neither group- nor
    world-writable (anyone else who could write it could choose what a replay runs)."""
    return st.st_uid == os.geteuid() and not st.st_mode & 0o022


def _fields(parts: list[str]) -> tuple[list[str], dict[str, str], list[str]]:
    """A memo's fields after its key: (dependencies as path, signature, ...; the answer; the
    recipe). ValueError or IndexError when they are not a whole memo."""
    n = int(parts[1])
    deps, rest = parts[2:2 + 2 * n], parts[2 + 2 * n:]
    m = int(rest[0])
    answer = dict(zip(rest[1:1 + 2 * m:2], rest[2:2 + 2 * m:2], strict=True))
    recipe = rest[1 + 2 * m:-1]
    if rest[-1] != END or len(recipe) % 3:
        raise ValueError("torn")
    return deps, answer, recipe


def read_memo(path: str, key: str) -> "Memo | None":
    """The memo (its answer and recipe) when it is `trusted`, its key is `key`, every
    dependency's signature still holds and the env it names signs it (its manifest is among them)."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            if not trusted(os.fstat(f.fileno())):
                return None
            parts = f.read().split("\0")
        if parts[0] != key:
            return None
        deps, answer, recipe = _fields(parts)
        for i in range(0, len(deps), 2):
            if sig(deps[i]) != deps[i + 1]:
                return None
        unset = [recipe[i + 1] for i in range(0, len(recipe) - 1, 3) if recipe[i] == "u"]
        sets = [(recipe[i + 1], recipe[i + 2]) for i in range(0, len(recipe) - 2, 3) if recipe[i] == "s"]
        manifest = os.path.join(answer["path"], ".fdlenv", "manifest.json")
        return (answer, unset, sets) if manifest in deps[::2] else None
    except (OSError, ValueError, IndexError, KeyError):
        return None


def memo_env(path: str) -> str | None:
    """The env directory a memo names, for `env gc`; None when it is no whole memo."""
    try:
        with open(path, encoding="utf-8", errors="surrogateescape") as f:
            return _fields(f.read().split("\0"))[1]["path"]
    except (OSError, ValueError, IndexError, KeyError):
        return None


def _locked_shared(path: str) -> int | None:
    """The store lock held shared, or None when that would wait (gc holds it: the slow path
    says whom it waits for). Read-only: a home baked read-only into an image still replays."""
    import fcntl

    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        fcntl.flock(fd, fcntl.LOCK_SH | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        return None
    return fd


# ------------------------------------------------------------------ the replay

def answer(ask: Ask) -> int | None:
    """The command's exit code when its memo answered it (its output printed, or CMD
    exec'd), else None: also when something the replay reads cannot be read (the slow path
    then says what)."""
    try:
        return _replay(ask)
    except BrokenPipeError:
        raise
    except OSError:
        return None


def _replay(ask: Ask) -> int | None:
    environ = os.environ
    if environ.get("FDLENV_NO_HOTPATH") == "1":
        return None
    if ask.kind == "shell-hook" and ask.deactivate:
        return _print_changes(ask, dict(environ), None, restored(environ), {})
    token = ask.libtorch
    if not token or token.strip().lower() == "auto" or project_above(os.getcwd()):
        return None
    base = restored(environ)
    key = key_of(ask, environ, base)
    root = home_root(ask.home, environ)
    fd = _locked_shared(os.path.join(root, STORE_LOCK))
    if fd is None:
        return None
    try:
        read = read_memo(memo_path(root, ask.kind, key), key)
        if read is None or not within(read[0]["path"], os.path.join(root, ENVS)):
            return None     # no memo, or one naming an env outside this home's envs/ (planted)
        memo, unset, sets = read
        if ask.kind == "realize":
            return _print_realized(ask, memo)
        if ask.kind == "shell-hook":
            from ..names.buildtree import shell_tree
            target = shell_tree(apply(unset, sets, base), base, memo["variant"])
            return _print_changes(ask, dict(environ), base, target, memo)
        from ..names.buildtree import build_tree
        target = build_tree(apply(unset, sets, base), base, memo["variant"], os.getcwd())
        if not ask.argv or _lease(root, memo["path"]) is None:
            return None
        if memo["variant"].startswith("cu") and _cmake(ask.argv):
            return None     # CMake in a CUDA env: the slow path says what its build needs (`source.nvcc`)
    finally:
        os.close(fd)
    return exec_in(list(ask.argv), target)


def _cmake(argv: tuple[str, ...]) -> bool:
    """`source.nvcc.runs_cmake`, which the replay may not import: CMD starts CMake."""
    words = [w for w in argv if w != "--"][:1]
    return bool(words) and os.path.basename(words[0]) in ("cmake", "ccmake", "cmake3")


def _lease(root: str, env_path: str) -> int | None:
    """`store.leases.take`, for the replay: the env's lease, held shared and inherited by CMD."""
    from ..names.leasefile import take_lease

    return take_lease(root, os.path.basename(env_path))


def _print_realized(ask: Ask, memo: dict[str, str]) -> int:
    import time

    t0 = time.monotonic()
    if ask.json:
        from ..base.output import emit

        emit({"variant": memo["variant"], "key": memo["key"], "path": memo["path"],
              "libtorch_root": memo["libtorch_root"], "created": False,
              "seconds": round(time.monotonic() - t0, 4), "active": memo["active"] or None,
              "was_active": memo["active"] or None})
    else:
        print(f"{memo['variant']}: {memo['path']}")
    return 0


def _print_changes(ask: Ask, base: dict[str, str], original: "Mapping[str, str] | None",
                   target: dict[str, str], memo: dict[str, str]) -> int:
    """shell-hook's output: what turns the shell's environment `base` into `target` (from
    `original`, `base` with an earlier activation undone, when a memo answered)."""
    about: dict[str, str] = {}
    if memo and original is not None:   # (a memo's call hands `original` in; deactivate's neither)
        target[STATE] = shell_state(original, target)
        about = {"variant": memo["variant"], "label": memo["label"], "libtorch": memo["libtorch_root"],
                 "key": memo["key"], "path": memo["path"]}
    changes = {k: target.get(k) for k in sorted(set(base) | set(target)) if base.get(k) != target.get(k)}
    if ask.json:
        from ..base.output import emit

        emit({"environment_variables": {k: v for k, v in changes.items() if v is not None},
              "unset": sorted(k for k, v in changes.items() if v is None), **about})
    else:
        from ..base.shells import render

        sys.stdout.write(render(ask.shell, changes))
    return 0
