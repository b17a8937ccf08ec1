"""The walk-through: from a bare machine to a C++ program running on a locked libtorch.

Six steps, each timed, each reusing what an earlier run left in the home:
1. obtain a torch CPU wheel through pip (cached under the home);
2. pack it as `libtorch-cpu` into the home's `flodl` channel (skipped when
   that channel already holds the package packed from the same wheel bytes);
3. lock a walk-through env file naming `flodl::libtorch-cpu ==<version>`
   (no toolchain from conda: the host's g++ builds the example);
4. realise the env through the store;
5. build examples/agent inside its activation (a build keyed by sources +
   env key is reused);
6. run the binary through `fdlenv run --libtorch cpu --lock <lock>`.
Nothing here needs a conda channel: the only package source is the wheel.
"""

from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from .errors import Fail
from .home import Home
from .progress import during, say

# The torch release pip resolves to a local CPU wheel on the machines fdlenv
# is developed and tested on (its find-links hold torch-2.13.0+cpu); bump it
# with that wheel. Where pip cannot get it, the fallback asks for plain
# `torch` from the index in $FDLENV_TORCH_INDEX (set it to PyTorch's CPU
# wheel index), or from pip's configured index when unset.
TORCH_WHEEL_VERSION = "2.13.0"
TORCH_INDEX_ENV = "FDLENV_TORCH_INDEX"
EXAMPLE = Path(__file__).resolve().parent.parent / "examples" / "agent"


@dataclass
class Step:
    title: str
    seconds: float = 0.0
    detail: str = ""


@dataclass
class Walkthrough:
    home: Path
    steps: list[Step] = field(default_factory=list)
    wheel: Path | None = None
    package: Path | None = None
    lock: Path | None = None
    env: Path | None = None
    env_key: str = ""
    binary: Path | None = None
    output: str = ""

    def to_json(self) -> dict:
        out = {k: str(v) if isinstance(v, Path) else v for k, v in self.__dict__.items() if k != "steps"}
        out["steps"] = [s.__dict__ for s in self.steps]
        return out


class _Steps:
    """Numbered, timed steps with a newcomer-readable header and result line."""

    def __init__(self, result: Walkthrough, total: int):
        self.result, self.total = result, total

    def run(self, title: str, explain: str, fn):
        n = len(self.result.steps) + 1
        say(f"step {n}/{self.total}: {title}")
        say(f"  {explain}")
        t0 = time.monotonic()
        detail = fn()
        step = Step(title, round(time.monotonic() - t0, 3), detail)
        self.result.steps.append(step)
        say(f"  done in {step.seconds:.1f} s: {detail}")


def run_walkthrough(home: Home) -> Walkthrough:
    from .pack.libtorch import pack_libtorch, packed_from, sha256_file

    work = home.root / "walkthrough"
    result = Walkthrough(home=home.root)
    steps = _Steps(result, 6)

    def obtain() -> str:
        result.wheel = obtain_wheel(work / "wheels")
        return f"{result.wheel.name} ({result.wheel.stat().st_size / 1e6:.0f} MB)"

    def pack() -> str:
        existing = packed_from(home.channel, "cpu", sha256_file(result.wheel))
        if existing:
            result.package = existing
            return f"{existing.name} is already in {home.channel} (packed from these bytes)"
        result.package = pack_libtorch("cpu", str(result.wheel), home.channel).path
        return f"{result.package.name} in {home.channel}"

    def lock() -> str:
        import rattler

        from .lock import lock_envs

        # <name>-<version>-<build>.conda; conda versions hold no '-'
        version = result.package.name.removeprefix("libtorch-cpu-").rsplit("-", 1)[0]
        envs = work / "envs"
        envs.mkdir(parents=True, exist_ok=True)
        (envs / "cpu.yml").write_text(
            "# Written by `fdlenv walkthrough`: libtorch from the home's channel,\n"
            "# the host's g++ as the compiler (the channel has no toolchain).\n"
            f"name: walkthrough-cpu\nchannels: [flodl]\nplatforms: [{rattler.Subdir.current()}]\n"
            f"dependencies:\n  - flodl::libtorch-cpu =={version}\n")
        (result.lock,) = lock_envs(envs, work / "conda-lock.yml", home=home)
        return f"{result.lock} (libtorch-cpu {version})"

    def realise_env() -> str:
        from .store.realise import realise

        env = realise(home, "cpu", lock=result.lock)
        result.env = env.path
        result.env_key = env.key
        return f"{env.path}" + ("" if env.created else " (already realised)")

    def build() -> str:
        from .store.activation import child_environ
        from .store.env import from_dir

        environ = child_environ(home, from_dir(result.env))
        result.binary, reused = build_example(environ, work / "build", result.env_key)
        return f"{result.binary}" + (" (reused: sources and env unchanged)" if reused else "")

    def run() -> str:
        cmd = [sys.executable, "-m", "fdlenv", "run", "--libtorch", "cpu", "--lock", str(result.lock),
               "--home", str(home.root), "--", str(result.binary)]
        say("  $ fdlenv run --libtorch cpu --lock " + f"{result.lock} -- {result.binary}")
        proc = subprocess.run(cmd, capture_output=True, text=True)
        result.output = proc.stdout
        if proc.returncode != 0:
            raise Fail.permanent(f"walkthrough: the agent failed (exit {proc.returncode}):\n"
                                 f"{proc.stdout}{proc.stderr}")
        for line in proc.stdout.splitlines():
            say(f"  | {line}")
        return proc.stdout.splitlines()[0] if proc.stdout else "(no output)"

    steps.run("obtain a torch CPU wheel",
              f"pip downloads torch=={TORCH_WHEEL_VERSION} once; later runs reuse {work / 'wheels'}", obtain)
    steps.run("pack it as the conda package libtorch-cpu",
              "torch/lib, include and share become <env>/libtorch/ in a reproducible .conda, "
              "indexed into the local channel `flodl`", pack)
    steps.run("lock an env naming that package",
              "py-rattler solves the env file for declared virtual packages and writes conda-lock v1", lock)
    steps.run("realise the locked env",
              "the store fetches and hash-checks each archive, installs by hard links into a "
              "staging dir and publishes the env by rename", realise_env)
    steps.run("build examples/agent inside the env",
              "the host's g++ compiles main.cpp against $LIBTORCH_PATH with the env's activation", build)
    steps.run("run it through `fdlenv run`",
              "fdlenv activates the env and execs the binary with no shell in between", run)
    say("what each step cost:")
    for i, s in enumerate(result.steps, 1):
        say(f"  {i}. {s.title:<48} {s.seconds:8.2f} s")
    say(f"  {'total':<51} {sum(s.seconds for s in result.steps):8.2f} s")
    return result


def obtain_wheel(cache: Path) -> Path:
    """A torch wheel in `cache`: the cached one, else pip's pinned download, else the fallback."""
    found = sorted(cache.glob("torch-*.whl"))
    if found:
        return found[-1]
    cache.mkdir(parents=True, exist_ok=True)
    attempts = [["torch==" + TORCH_WHEEL_VERSION]]
    index = os.environ.get(TORCH_INDEX_ENV)
    attempts.append(["torch"] + (["--index-url", index] if index else []))
    errors = []
    for extra in attempts:
        with tempfile.TemporaryDirectory(dir=cache, prefix=".pip-") as tmp:
            cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary", ":all:",
                   "-d", tmp, *extra]
            with during("pip download " + " ".join(extra)):
                proc = subprocess.run(cmd, capture_output=True, text=True)
            wheels = sorted(Path(tmp).glob("torch-*.whl"))
            if proc.returncode == 0 and wheels:
                target = cache / wheels[0].name
                os.replace(wheels[0], target)
                return target
            errors.append(f"{' '.join(extra)}: {(proc.stderr or proc.stdout).strip().splitlines()[-1:]}")
    raise Fail.retry("walkthrough: pip could not obtain a torch wheel ("
                     + "; ".join(errors) + f"); set {TORCH_INDEX_ENV} to a wheel index that has torch")


def build_example(environ: dict[str, str], builds: Path, env_key: str) -> tuple[Path, bool]:
    """Compile examples/agent with its build.sh in `environ`; reuse a build of the same inputs."""
    if not (EXAMPLE / "build.sh").is_file():
        raise Fail.permanent(f"walkthrough: {EXAMPLE} is missing (run from a source checkout of fdlenv)")
    if not shutil.which(environ.get("CXX") or "g++", path=environ.get("PATH")):
        raise Fail.permanent("walkthrough: no C++ compiler: install g++ (or set CXX)")
    h = hashlib.sha256(env_key.encode())
    for name in ("main.cpp", "build.sh"):
        h.update((EXAMPLE / name).read_bytes())
    binary = builds / h.hexdigest()[:16] / "agent"
    if binary.is_file():
        return binary, True
    binary.parent.mkdir(parents=True, exist_ok=True)
    partial = binary.with_name(f".agent.{os.getpid()}")
    with during("compiling examples/agent/main.cpp against libtorch (g++ takes a while on <torch/torch.h>)"):
        proc = subprocess.run(["bash", str(EXAMPLE / "build.sh"), str(partial)], env=environ,
                              capture_output=True, text=True)
    if proc.returncode != 0:
        partial.unlink(missing_ok=True)
        raise Fail.permanent(f"walkthrough: building examples/agent failed:\n{proc.stderr[-4000:]}")
    os.replace(partial, binary)
    return binary, False
