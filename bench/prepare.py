"""Re-dial cost of `fdlenv prepare`, against `python -c pass` (medians, interleaved).

Preparation runs before every dial; with nothing changed (env realised, tree
unchanged, artifact built) it must cost at most 100 ms more than starting a
bare interpreter. Two shapes, both in the re-dial state:

  --bin:    fdlenv prepare --libtorch cpu --lock L --bin B
  --source: fdlenv prepare --libtorch cpu --lock L --source file://TREE (trivial recipe)

The store is real (a real channel and lock from tests/helpers_store.py); the
command is the installed `fdlenv` script when on PATH, else `python -m fdlenv`.

    python bench/prepare.py [--runs 21] [--files 300]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/ itself must not be importable: bench/build.py would shadow the `build` package.
sys.path[0] = str(Path(__file__).resolve().parent.parent / "tests")
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench.rounds import Took, ms3, ran  # noqa: E402
from helpers_store import make_world  # noqa: E402

GOAL_MS = 100
RECIPE = "mkdir -p target/release && cp src/f0.rs target/release/train"


def make_tree(root: Path, files: int) -> None:
    (root / "src").mkdir(parents=True)
    for i in range(files):
        (root / "src" / f"f{i}.rs").write_text(f"pub fn f{i}() -> u32 {{ {i} }}\n" * 20)
    (root / ".fdl-run.yml").write_text(f"bin: target/release/train\nbuild: {RECIPE}\nargs: []\n")


def timed(argv: list[str], env: dict, cwd: Path) -> Took:
    return ran(argv, env=env, cwd=cwd, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs", type=int, default=21)
    ap.add_argument("--files", type=int, default=300)
    a = ap.parse_args()
    exe = shutil.which("fdlenv")
    cmd = [exe] if exe else [sys.executable, "-m", "fdlenv"]
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        world = make_world(tmp / "world")
        for d in ("user", "tmp", "work"):
            (tmp / d).mkdir()
        (tmp / "work" / "train").write_text("#!/bin/sh\n")
        make_tree(tmp / "src", a.files)
        # Measured as installed: with bytecode (pip compiles it; this sandbox's
        # PYTHONDONTWRITEBYTECODE would recompile every module on every run).
        env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
        env = {**env, "HOME": str(tmp / "user"), "TMPDIR": str(tmp / "tmp"),
               "FLODL_HOME": str(tmp / "home"), "FLODL_TESTING_GPU_JSON": "[]"}
        common = [*cmd, "prepare", "--libtorch", "cpu", "--lock", str(world.lock)]
        shapes = {"--bin": [*common, "--bin", "train"],
                  "--source": [*common, "--source", f"file://{tmp / 'src'}"]}
        for argv in shapes.values():      # first dial: realise, activation capture, fetch, build
            subprocess.run(argv, check=True, env=env, cwd=tmp / "work", capture_output=True)
        time.sleep(2.2)                   # past the source caches' racy window, as any real re-dial is
        for argv in shapes.values():      # fill those caches once
            subprocess.run(argv, check=True, env=env, cwd=tmp / "work", capture_output=True)
        samples: dict[str, list[Took]] = {"pass": [], **{k: [] for k in shapes}}
        for _ in range(a.runs):           # interleaved: drift hits every column alike
            samples["pass"].append(timed([sys.executable, "-c", "pass"], env, tmp / "work"))
            for name, argv in shapes.items():
                samples[name].append(timed(argv, env, tmp / "work"))
        med = {k: statistics.median(t.wall for t in v) * 1000 for k, v in samples.items()}
        cpu = {k: statistics.median(t.cpu for t in v) * 1000 for k, v in samples.items()}
        print(f"python -c pass                       {ms3([t.wall for t in samples['pass']])} ms (min/median/max), "
              f"CPU {cpu['pass']:.1f} ms")
        for name, argv in shapes.items():
            steps = json.loads(subprocess.run([*argv, "--json"], check=True, env=env, cwd=tmp / "work",
                                              capture_output=True, text=True).stdout)["seconds"]
            own = med[name] - med["pass"]
            verdict = "ok" if own <= GOAL_MS else "OVER"
            print(f"fdlenv prepare {name:<9} (re-dial)  {ms3([t.wall for t in samples[name]])} ms, CPU {cpu[name]:.1f} ms"
                  f"   minus pass {own:6.1f} ms (CPU {cpu[name] - cpu['pass']:.1f})  goal <= {GOAL_MS} ms: {verdict}")
            print("    in-process steps: " + ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in steps.items()))
        print(f"(medians of {a.runs}; {a.files}-file tree; command: {' '.join(cmd)})")


if __name__ == "__main__":
    main()
