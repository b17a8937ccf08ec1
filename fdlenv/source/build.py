"""The content-keyed build: run the recipe once per (tree, env, toolchain, recipe).

Build key = sha256 over (what the source delivered: the tree content digest of
fetch; the env key; the toolchain's identity, `source.toolchain`; recipe,
cwd, bin), all decided before the recipe runs. `bin` must name a path inside
the project before anything is built.
`builds/<key>/` is published by rename, so it either holds the artifact or
does not exist; when it holds it the recipe is not run at all, and that check
comes before any lock. Otherwise, under
`locks/build-<key>.lock`, the check is repeated (a racing prepare may have
published meanwhile), the recipe runs in the source tree itself with a build
tree per variant (`target/fdlenv-<variant>` as CARGO_TARGET_DIR,
`FDLENV_BUILD_DIR` for CMake), so switching variants stays incremental, and
the artifact is copied out. The recipe's output streams to stderr through a pipe
that keeps its last 64 KiB (`_Tail`) to class a failure: in a CUDA env, CMake's
words for a missing toolkit (`nvcc.cmake_cuda_gap`) are permanent, then missing
GPU toolkit headers are; any other failed build is transient.

The caller passes the env (anything with key, path, variant) and the complete
child environment, so this module never imports the store.
Not in the key: untracked files a build leaves in a git checkout, files a
copied source does not own, what a compiler loads itself (see
source/toolchain.py), the environment beyond the env key and PATH.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from fnmatch import fnmatchcase
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, NamedTuple

from ..base import hashing
from ..base.flocks import held
from ..base.errors import Fail
from ..names.home import Home, Living, Sweeper, listing
from ..base.progress import say
from . import nvcc, toolkit
from .manifest import RunManifest

if TYPE_CHECKING:
    import subprocess
    from collections.abc import Mapping
    from typing import IO

    from .nvcc import BuildEnv

DEFAULT_RECIPE = "cargo build --release"
KEY_SCHEMA = 2   # 2: the toolchain's identity is in the key
META = ".fdlenv-build.json"


class Recipe(NamedTuple):
    """How to build the tree (a NamedTuple: it is on the re-dial path, see variants)."""

    build: str
    cwd: str           # relative to the tree; "" is the root
    bin: str           # relative to cwd
    default: bool      # the default recipe: needs cargo on PATH


class Built(NamedTuple):
    """The build's outcome (a NamedTuple: it is on the re-dial path, see variants)."""

    bin: Path          # the published artifact, builds/<key>/<name>
    cwd: Path          # <tree>/<cwd>, where the binary runs
    key: str
    built: bool        # False: reused, the recipe did not run


def resolve(manifest: RunManifest | None, cwd: str | None = None,
            build: str | None = None, bin: str | None = None) -> Recipe:
    """Merge the run manifest over the box's own settings, field by field."""
    if manifest is not None:
        cwd, build, bin = manifest.cwd or cwd, manifest.build or build, manifest.bin
    elif not bin:
        raise Fail.retry("the source has no run manifest (.fdl-run.yml) and no binary is named: "
                         "publish a run on the controller (`fdl publish`), or name it with --source-bin")
    return Recipe(build or DEFAULT_RECIPE, (cwd or "").strip("/"), bin, not build)


def build_key(tree_content: str, env_key: str, recipe: Recipe, tools: str = "") -> str:
    blob = json.dumps({"schema": KEY_SCHEMA, "tree": tree_content, "env": env_key, "toolchain": tools,
                       "recipe": recipe.build, "cwd": recipe.cwd, "bin": recipe.bin},
                      sort_keys=True, separators=(",", ":"))
    return hashing.of_text(blob)


def check_bin(tree: Path, project: Path, recipe: Recipe) -> None:
    """Before anything builds: `bin` is a relative path that stays inside the tree, also through
    whatever symlink already stands at it."""
    rel = recipe.bin
    parts = Path(rel).parts
    if not rel or os.path.isabs(rel) or ".." in parts:
        raise Fail.permanent(f"bin {rel!r}: the artifact must be a relative path inside the project "
                             "(e.g. target/release/train), without `..`")
    if os.path.lexists(project / rel) and not _inside(project / rel, tree):
        raise Fail.permanent(f"bin {rel!r} resolves to {os.path.realpath(project / rel)}, outside the "
                             f"fetched source {tree}; refusing to build or publish it")


def _inside(path: Path, root: Path) -> bool:
    p, r = os.path.realpath(path), os.path.realpath(root)
    return p == r or p.startswith(r + os.sep)


def project_dir(tree: Path, recipe: Recipe) -> Path:
    project = tree / recipe.cwd
    if not _inside(project, tree) or not project.is_dir():
        raise Fail.permanent(f"cwd {recipe.cwd!r} names no directory in the fetched source {tree}; "
                             "it must be a directory inside the tree")
    return project


def _end_group(proc: subprocess.Popen[bytes]) -> None:
    """SIGTERM to the recipe's group, SIGKILL when it has not ended within 5 s."""
    import signal
    import subprocess

    for sig, grace in ((signal.SIGTERM, 5.0), (signal.SIGKILL, None)):
        try:
            os.killpg(proc.pid, sig)
        except OSError:
            return
        try:
            proc.wait(grace)
            return
        except subprocess.TimeoutExpired:
            continue


class _Tail:
    """The recipe's output streamed to fdlenv's stderr as it comes, its last 64 KiB kept for
    classing a failure (a thread: the wait stays interruptible by Ctrl-C)."""

    KEEP = 65536

    def __init__(self, pipe: IO[bytes]) -> None:
        import threading

        self._pipe, self._kept = pipe, bytearray()
        self._thread = threading.Thread(target=self._pump, daemon=True)
        self._thread.start()

    def _pump(self) -> None:
        fd = self._pipe.fileno()
        while chunk := os.read(fd, 65536):
            try:
                view = memoryview(chunk)
                while view:
                    view = view[os.write(2, view):]
            except OSError:
                pass   # stderr gone: still keep the tail
            self._kept += chunk
            del self._kept[:-self.KEEP]

    def text(self) -> str:
        """What was kept, once the pipe ended (a daemon the recipe left holding it open: what
        came within 5 s)."""
        self._thread.join(5.0)
        return self._kept.decode(errors="replace")


def _run_recipe(recipe: Recipe, project: Path, env: BuildEnv, environ: Mapping[str, str],
                keep_fds: tuple[int, ...] = ()) -> None:
    if recipe.default and not shutil.which("cargo", path=environ.get("PATH")):
        raise Fail.permanent("the default recipe `cargo build --release` needs cargo, which is not on "
                             "PATH; install Rust with rustup (https://rustup.rs) or name a recipe")
    say(f"source: building in {project} — {recipe.build}")
    if os.isatty(2):   # the pipe to _Tail hides the terminal from cargo: keep its colours and progress bar
        environ = {"CARGO_TERM_COLOR": "always", "CARGO_TERM_PROGRESS_WHEN": "always",
                   "CARGO_TERM_PROGRESS_WIDTH": str(shutil.get_terminal_size().columns), **environ}
    try:
        # stdout joins stderr: the compiler's output streams to the terminal or
        # journal, and fdlenv's own stdout stays clean for --json. Its own process
        # group, guarded: the recipe never outlives fdlenv, even a kill -9 of it.
        from ..base.groupguard import spawn   # subprocess: imported only when a build runs

        import subprocess

        proc = spawn(["sh", "-c", recipe.build], cwd=project, env=environ, stdout=subprocess.PIPE,
                     stderr=subprocess.STDOUT, pass_fds=keep_fds)
    except OSError as e:
        raise Fail.permanent(f"cannot start the build recipe in {project}: {e}") from None
    assert proc.stdout is not None   # stdout=PIPE
    tail = _Tail(proc.stdout)
    try:
        rc = proc.wait()
    except BaseException:   # Ctrl-C (the recipe's own session does not see it) and the like
        _end_group(proc)
        raise
    finally:
        proc.guard.release()
    output = tail.text()   # all of it forwarded before fdlenv says more
    if rc == 0:
        return
    variant = env.spec
    if variant.cuda and (gap := nvcc.cmake_cuda_gap(output, variant.cuda, environ)):
        raise Fail.permanent(f"the build in {project} failed (exit {rc}): {gap}")
    vendor = variant.vendor
    if vendor in ("nvidia", "amd"):
        root = toolkit.toolkit_root(vendor, environ)
        dirs = [root / "include", Path(env.path) / "include", *Path(env.path).glob("targets/*/include")]
        missing = toolkit.missing_headers(vendor, dirs, environ)
        if missing:
            raise Fail.permanent(f"the build in {project} failed (exit {rc}) and "
                                 + toolkit.gap_message(vendor, root, missing))
    raise Fail.retry(f"the source in {project} does not build (`{recipe.build}` exit {rc}); "
                     "fix it at the source; this box picks the fix up on its next dial")


def variant_trees(project: Path, env: BuildEnv, environ: Mapping[str, str]) -> tuple[dict[str, str], Path | None]:
    """The recipe's environment with a build tree per variant, and cargo's target dir (None when
    the caller's environment already names one). A box alternating cu128 and cpu then rebuilds
    only what changed since that variant's last build, never the FFI crate's C++ from scratch:
    `CARGO_TARGET_DIR=<project>/target/fdlenv-<variant>` (a `target/...` artifact is looked up
    there), and `FDLENV_BUILD_DIR=<project>/build/fdlenv-<variant>` for CMake recipes
    (`cmake -S . -B "$FDLENV_BUILD_DIR"`)."""
    from ..names.buildtree import BUILD_DIR, TARGET_DIR, tree_dirs

    target, build = tree_dirs(str(project), env.spec.name)
    out = dict(environ)
    out.setdefault(BUILD_DIR, build)
    if TARGET_DIR in environ:
        return out, None
    out[TARGET_DIR] = target
    return out, Path(target)


def _artifact(project: Path, recipe: Recipe, target: Path | None) -> Path:
    """Where the recipe left `bin`: under the variant's cargo target dir for a `target/...` path."""
    parts = Path(recipe.bin).parts
    if target is not None and parts[:1] == ("target",) and len(parts) > 1:
        moved = target.joinpath(*parts[1:])
        if moved.is_file():
            return moved
    return project / recipe.bin


def _publish(home: Home, key: str, artifact: Path, meta: dict[str, object]) -> None:
    stage = home.build_stage(key, os.getpid())
    stage.mkdir()
    shutil.copy2(artifact, stage / artifact.name)
    (stage / META).write_text(json.dumps(meta, indent=1, sort_keys=True))
    for f in (stage / artifact.name, stage / META):
        with open(f, "rb") as fh:
            os.fsync(fh.fileno())
    os.rename(stage, home.build(key))


def build(home: Home, tree: Path, tree_content: str, env: BuildEnv, environ: Mapping[str, str], recipe: Recipe,
          keep_fds: tuple[int, ...] = ()) -> Built:
    """The artifact for this tree in this env: reused when published, else built. `keep_fds`:
    descriptors the recipe inherits (the source claim: held until the recipe is gone)."""
    from .toolchain import identity

    project = project_dir(tree, recipe)
    check_bin(tree, project, recipe)
    tools = identity(environ, home.toolchain)
    key = build_key(tree_content, env.key, recipe, tools)
    name = Path(recipe.bin).name
    published = home.build(key) / name
    if published.is_file():
        return Built(published, project, key, False)
    from ..base.flocks import exclusive

    home.ensure(home.builds)
    with exclusive(home.build_lock(key), f"building {key[:16]}"):
        if published.is_file():
            say(f"source: reusing the build another process just published ({key[:16]})")
            return Built(published, project, key, False)
        # A killed run's staging, or a key dir someone emptied by hand, would
        # block the publishing rename; both are safe to drop under the lock.
        for debris in [*home.builds.glob(home.build_stage(key, "*").name), home.build(key)]:
            shutil.rmtree(debris, ignore_errors=True)
        environ, target = variant_trees(project, env, environ)
        _run_recipe(recipe, project, env, environ, keep_fds)
        artifact = _artifact(project, recipe, target)
        if not artifact.is_file() or not _inside(artifact, tree):
            raise Fail.permanent(
                f"the build succeeded but bin {recipe.bin!r} is not a file at {artifact} "
                "(bin is relative to cwd; cargo puts it at target/release/<name>)")
        _publish(home, key, artifact, {"key": key, "tree": tree_content, "env": env.key,
                                       "toolchain": tools,
                                       "recipe": recipe.build, "cwd": recipe.cwd, "bin": recipe.bin,
                                       "created": time.time()})
    return Built(published, project, key, True)


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of `builds/`, handed in by the command: a killed build's staging (its
    key's lock free) and artifacts built against an env that is gone (flodl's own libtorch,
    `flodl-*`, is never gone)."""
    for p in listing(home.builds):
        if fnmatchcase(p.name, home.build_stage("*", "*").name):   # `.staging-<key>-<pid>`
            if not held(home.build_lock(p.name.split("-")[1])):
                yield p, "a killed build's staging"
        elif not p.name.startswith("."):
            try:
                env = json.loads((p / META).read_text()).get("env")
            except (OSError, ValueError, AttributeError):
                env = None
            if isinstance(env, str) and not env.startswith("flodl-") and env not in living.keys:
                yield p, "built against an env that is gone"


SWEEPER = Sweeper(("build", "build_stage"), sweep)
