"""What `fdlenv detect --json` costs beyond starting Python (not a test).

Times a regular install's `fdlenv detect --json` (bench/regular.py: a fresh venv, this checkout
installed without dependencies, its `fdlenv` command) against that venv's `python -c pass`,
interleaved so machine noise hits both alike, and prints min/median/max and the difference of
medians. On a box with no GPU the difference is fdlenv's own cost (goal: 10 ms). `--also DIR`
installs another checkout too (e.g. a worktree of main) into its own venv and times it in the
same rounds, so a before and an after are measured in one sitting.

    python bench/detect.py [N] [--also CHECKOUT ...]      (default N=30)
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path[0] = str(REPO)     # bench/ itself must not be importable (bench/build.py)

from bench.regular import ENV, regular_install  # noqa: E402
from bench.rounds import Took, ms3, ran  # noqa: E402


def once(argv: list[str]) -> Took:
    return ran(argv, stdout=subprocess.DEVNULL, env=ENV)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("n", nargs="?", type=int, default=30)
    ap.add_argument("--also", type=Path, action="append", default=[], help="another checkout, timed beside")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fdlenv-bench-detect-") as tmp:
        sides: dict[str, list[str]] = {}
        for i, source in enumerate([REPO, *a.also]):
            bin_dir = regular_install(Path(tmp) / str(i), deps=False, source=source.resolve())
            sides[f"detect ({source.resolve().name})"] = [str(bin_dir / "fdlenv"), "detect", "--json"]
        sides["python -c pass"] = [str(bin_dir / "python"), "-c", "pass"]
        for argv in sides.values():
            once(argv)      # warm the page cache and write __pycache__
        times: dict[str, list[Took]] = {k: [] for k in sides}
        for _ in range(a.n):
            for k, argv in sides.items():
                times[k].append(once(argv))
    bare = statistics.median(t.wall for t in times["python -c pass"])
    bare_cpu = statistics.median(t.cpu for t in times["python -c pass"])
    print(f"runs: {a.n} each, interleaved; regular installs; wall min/median/max, CPU median (user+sys)")
    for k, xs in times.items():
        wall, cpu = statistics.median(t.wall for t in xs), statistics.median(t.cpu for t in xs)
        own = "" if k == "python -c pass" else f"   own {(wall - bare) * 1000:6.1f} ms (CPU {(cpu - bare_cpu) * 1000:.1f})"
        print(f"{k:<28} {ms3([t.wall for t in xs])} ms, CPU {cpu * 1000:.1f} ms{own}")


if __name__ == "__main__":
    main()
