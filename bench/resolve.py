"""Locking a variant, measured side by side in one run (medians; these machines are noisy).

Against one loopback index laid out like PyTorch's (tests/helpers_pytorch_index.py:
a real HTTP server, PEP 658 metadata, torch 2.10-shaped wheels and the Python
packages torch requires), for the rocm7.1 and cu126 variants:
1. fdlenv's own resolver, what lock-on-demand runs: `fdlenv lock --libtorch V`
   (a child process, from start to the written lock);
2. pip, what `fdlenv lock` ran before: `pip install --dry-run --report` of
   `torch==2.10.0` for the same fixed target (CPython 3.12, the manylinux
   ladder, `--only-binary :all:`), which reads the same metadata.
Ratio = fdlenv / pip (goal: seconds, well under pip); medians, (min-max) beside them. Also printed: one
`fdlenv env realize` on a fresh home with the variant unlocked (lock on demand
plus realise of the small fixture wheels) and its re-dial.

    python bench/resolve.py [--reps N]
"""

from __future__ import annotations

import argparse
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path[0] = str(Path(__file__).resolve().parent.parent / "tests")

from helpers_pytorch_index import serve  # noqa: E402

from fdlenv.lock.closure import platform_tags  # noqa: E402

PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENVS = Path(__file__).resolve().parent.parent / "envs"


def timed(cmd: list[str], **kw) -> float:
    t0 = time.perf_counter()
    subprocess.run(cmd, check=True, capture_output=True, env=ENV, **kw)
    return time.perf_counter() - t0


def spread(times: list[float]) -> str:
    return f"({min(times) * 1000:.0f}-{max(times) * 1000:.0f})"


def fdlenv_lock(url: str, variant: str, tmp: Path) -> float:
    out = tmp / f"{variant}-{time.monotonic_ns()}.yml"
    return timed([PY, "-m", "fdlenv", "lock", "--libtorch", variant, "--envs", str(ENVS), "--platform", "linux-64",
                  "--out", str(out), "--mirror", f"pytorch={url}", "--home", str(tmp / "h"), "-q"])


def pip_report(url: str, variant: str, tmp: Path) -> float:
    target = tmp / f"t-{time.monotonic_ns()}"
    cmd = [PY, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--disable-pip-version-check",
           "--report", str(target) + ".json", "--only-binary", ":all:", "--python-version", "3.12",
           "--implementation", "cp", "--abi", "cp312", "--target", str(target), "--no-cache-dir",
           "--index-url", f"{url}/{variant}"]
    for tag in platform_tags("linux-64"):
        cmd += ["--platform", tag]
    return timed(cmd + ["torch==2.10.0"], cwd=tmp)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fdlenv-bench-resolve-"))
    idx = serve(tmp)
    try:
        for variant in ("rocm7.1", "cu126"):
            ours, theirs = [], []
            for _ in range(args.reps):            # interleaved: both see the same machine moment
                ours.append(fdlenv_lock(idx.url, variant, tmp))
                theirs.append(pip_report(idx.url, variant, tmp))
            a, b = statistics.median(ours), statistics.median(theirs)
            print(f"lock {variant:8s} fdlenv {a * 1000:7.0f} ms {spread(ours)}   pip --dry-run --report "
                  f"{b * 1000:7.0f} ms {spread(theirs)}   ratio {a / b:.2f}")
        home = tmp / "fresh"
        cold = timed([PY, "-m", "fdlenv", "env", "realize", "--libtorch", "rocm7.1", "--mirror",
                      f"pytorch={idx.url}", "--home", str(home), "-q"])
        redials = [timed([PY, "-m", "fdlenv", "env", "realize", "--libtorch", "rocm7.1", "--home", str(home), "-q"])
                   for _ in range(args.reps)]
        print(f"env realize rocm7.1 on a fresh home (lock on demand + realise): {cold * 1000:.0f} ms; "
              f"re-dial {statistics.median(redials) * 1000:.0f} ms {spread(redials)}")
    finally:
        idx.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
