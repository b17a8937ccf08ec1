"""The walk-through: from a bare machine to a C++ program running on a locked libtorch.

Four steps, each timed, each reusing what an earlier run left in the home:
1. find the lock shipped with fdlenv (the `cu128` variant: PyTorch's own
   torch 2.10.0 wheel and its CUDA 12.8 runtime wheels, as the default pip
   index serves them; `--libtorch`/`--lock` pick another);
2. realise the env through the store: the wheels are looked up through the
   index your pip or uv is configured with (read from their settings, so no
   pip needs to be installed: `pipindex.configured_index`), downloaded side
   by side (about 3.9 GB for cu128), verified, extracted once into the
   package cache and hard-linked into one site-packages (about 6 GB on disk);
3. build examples/agent inside its activation with the host's g++ (a build
   keyed by sources + env key is reused);
4. run the binary through `fdlenv run`: it prints the product on the CPU, and
   on `cuda:0` too where a driver and a GPU are visible.
Nothing here needs a conda channel, conda or a local wheel: only an index
that serves PyTorch's wheels (PyPI's does, for cu128).
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from dataclasses import dataclass, field
from collections.abc import Iterator
from pathlib import Path

from .. import PACKAGE_DIR
from ..base import hashing
from ..base.errors import Fail
from ..names.home import Home, Living, Sweeper, listing
from ..base.progress import during, say

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable
    from typing import Any

EXAMPLE_PARTS = ("main.cpp", "build.sh")


def example_dir() -> Path:
    """examples/agent: shipped in the package (fdlenv/data/agent), or the checkout's."""
    pkg = Path(PACKAGE_DIR)
    for cand in (pkg / "data" / "agent", pkg.parent / "examples" / "agent"):
        if (cand / "build.sh").is_file():
            return cand
    return pkg / "data" / "agent"


@dataclass
class Step:
    title: str
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Walkthrough:
    home: Path
    variant: str = "cu128"
    steps: list[Step] = field(default_factory=list)
    lock: Path | None = None
    env: Path | None = None
    env_key: str = ""
    libtorch_root: Path | None = None
    binary: Path | None = None
    output: str = ""

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items() if k != "steps"}
        out["steps"] = [s.__dict__ for s in self.steps]
        return out


class _Steps:
    """Numbered, timed steps with a newcomer-readable header and result line."""

    def __init__(self, result: Walkthrough, total: int) -> None:
        self.result, self.total = result, total

    def run(self, title: str, explain: str, fn: Callable[[], str]) -> None:
        n = len(self.result.steps) + 1
        say(f"step {n}/{self.total}: {title}")
        say(f"  {explain}")
        t0 = time.monotonic()
        detail = fn()
        step = Step(title, round(time.monotonic() - t0, 3), detail)
        self.result.steps.append(step)
        say(f"  done in {step.seconds:.1f} s: {detail}")


def run_walkthrough(home: Home, variant: str = "cu128", lock: Path | None = None,
                    mirrors: dict[str, str] | None = None, fork: bool = False) -> Walkthrough:
    result = Walkthrough(home=home.root, variant=variant)
    steps = _Steps(result, 4)

    def find_lock() -> str:
        from ..lock.paths import shipped_lock

        result.lock = lock or shipped_lock()
        if result.lock is None:
            raise Fail.permanent("walkthrough: this fdlenv has no shipped conda-lock.yml; give --lock FILE")
        return f"{result.lock}"

    def realise_env() -> str:
        from ..store.realise import realise

        assert result.lock is not None   # the lock step ran first
        _say_index(result.lock, variant, mirrors)
        env = realise(home, variant, lock=result.lock, mirrors=mirrors, fork=fork)
        result.env, result.env_key, result.libtorch_root = env.path, env.key, env.libtorch_root
        return f"{env.path}" + ("" if env.created else " (already realised)")

    def build() -> str:
        from ..store.activation import child_environ
        from ..store.env import from_dir

        assert result.env is not None   # the realise step ran first
        environ = child_environ(home, from_dir(result.env))
        result.binary, reused = build_example(environ, builds_dir(home), result.env_key)
        return f"{result.binary}" + (" (reused: sources and env unchanged)" if reused else "")

    def run() -> str:
        cmd = [sys.executable, "-m", "fdlenv", "run", "--libtorch", variant, "--lock", str(result.lock),
               "--home", str(home.root), "--", str(result.binary)]
        say(f"  $ fdlenv run --libtorch {variant} -- {result.binary}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        result.output = proc.stdout
        if proc.returncode != 0:
            raise Fail.permanent(f"walkthrough: the agent failed (exit {proc.returncode}):\n"
                                 f"{proc.stdout}{proc.stderr}")
        for line in proc.stdout.splitlines():
            say(f"  | {line}")
        return proc.stdout.splitlines()[0] if proc.stdout else "(no output)"

    steps.run("find the lock shipped with fdlenv",
              f"conda-lock v1; variant {variant} is PyTorch's own wheels, recorded index-relative "
              "with their sha256", find_lock)
    steps.run(f"realise the locked {variant} env",
              "wheels come through the index your pip or uv uses, side by side, sha256-checked while they "
              "stream, extracted once into the package cache and hard-linked into one site-packages; "
              "the env is published by rename (first run: about 3.9 GB down, 6 GB on disk for cu128)",
              realise_env)
    steps.run("build examples/agent inside the env",
              "the host's g++ compiles main.cpp against $LIBTORCH_PATH (the torch wheel's own "
              "lib/, include/) with the env's activation", build)
    steps.run("run it through `fdlenv run`",
              "fdlenv activates the env and execs the binary with no shell in between", run)
    say("what each step cost:")
    for i, s in enumerate(result.steps, 1):
        say(f"  {i}. {s.title:<48} {s.seconds:8.2f} s")
    say(f"  {'total':<51} {sum(s.seconds for s in result.steps):8.2f} s")
    return result


def _say_index(lock: Path, variant: str, mirrors: dict[str, str] | None) -> None:
    """Name the index the lock's `pypi` wheels come from, and why (a newcomer's first question)."""
    from ..index import pipindex
    from ..lock.paths import split_sibling

    texts = []
    for f in (lock, split_sibling(lock, variant)):
        try:
            texts.append(f.read_text(errors="replace") if f else "")
        except OSError:
            pass   # the realise names an unreadable lock
    if not any(f"{pipindex.SCHEME}{pipindex.DEFAULT}/" in t for t in texts):
        return
    if mirrors and pipindex.DEFAULT in mirrors:
        say(f"  wheel index {pipindex.DEFAULT}: {mirrors[pipindex.DEFAULT]} (a mirror you gave)")
        return
    try:
        url, source = pipindex.configured_index()
    except Fail:
        return   # the realise fails with the one line that says what to give
    say(f"  wheel index {pipindex.DEFAULT}: {url} (from {source})")


def build_example(environ: dict[str, str], builds: Path, env_key: str) -> tuple[Path, bool]:
    """Compile examples/agent with its build.sh in `environ`; reuse a build of the same inputs."""
    example = example_dir()
    if not (example / "build.sh").is_file():
        raise Fail.permanent(f"walkthrough: the example's sources are missing from this install ({example}); "
                             "reinstall fdlenv, or run it from a source checkout")
    if not shutil.which(environ.get("CXX") or "g++", path=environ.get("PATH")):
        raise Fail.permanent("walkthrough: no C++ compiler: install g++ (or set CXX)")
    h = hashing.Digest()
    h.update(env_key.encode())
    for name in EXAMPLE_PARTS:
        h.update((example / name).read_bytes())
    binary = builds / h.sha256[:16] / "agent"
    if binary.is_file():
        return binary, True
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".agent.{os.getpid()}")
    with during("compiling examples/agent/main.cpp against libtorch (g++ takes a while on <torch/torch.h>)"):
        proc = subprocess.run(["bash", str(example / "build.sh"), str(partial)], env=environ,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise Fail.permanent(f"walkthrough: building examples/agent failed:\n{proc.stderr[-4000:]}")
    os.replace(partial, binary)
    return binary, False


def builds_dir(home: Home) -> Path:
    """The walk-through's builds, one per (env key, example sources)."""
    return home.walkthrough / "build"


def sweep(home: Home, living: Living) -> Iterator[tuple[Path, str]]:
    """`env gc`'s sweep of the walk-through's builds, handed in by the command: all but the
    newest."""
    builds = sorted((p for p in listing(builds_dir(home)) if p.is_dir()), key=lambda p: p.stat().st_mtime)
    for p in builds[:-1]:
        yield p, "an older walk-through build"


SWEEPER = Sweeper(("walkthrough",), sweep)
