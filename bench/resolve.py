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
plus realise of the small fixture wheels) and its re-dial. And the backtracking case
(issue 48): 12 roots of 300 versions each, every version of p0 needing zz==1 and every
version of p11 zz==2 (tests/helpers_simple_index.py), which no versions satisfy: fdlenv's
`lock` against `uv pip compile` (a fresh cache each time) on the same loopback index,
both exit codes and first lines printed. Before issue 48 fdlenv walked the versions to
its round limit (180 s here); uv proves it from every version's metadata.

    python bench/resolve.py [--reps N] [--only backtrack|variants]
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
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from helpers_pytorch_index import Index, serve  # noqa: E402
from helpers_simple_index import Release, lay_out  # noqa: E402

from bench.rounds import Took, ran  # noqa: E402
from fdlenv.lock.closure import platform_tags  # noqa: E402

PY = sys.executable
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENVS = Path(__file__).resolve().parent.parent / "envs"


def timed(cmd: list[str], **kw) -> Took:
    return ran(cmd, capture_output=True, env=ENV, **kw)


def spread(times: list[float] | list[Took]) -> str:
    walls = [t.wall if isinstance(t, Took) else t for t in times]
    return f"({min(walls) * 1000:.0f}-{max(walls) * 1000:.0f})"


def med(times: list[Took]) -> tuple[float, float]:
    """Median wall and median CPU seconds."""
    return statistics.median(t.wall for t in times), statistics.median(t.cpu for t in times)


def fdlenv_lock(url: str, variant: str, tmp: Path) -> Took:
    out = tmp / f"{variant}-{time.monotonic_ns()}.yml"
    return timed([PY, "-m", "fdlenv", "lock", "--libtorch", variant, "--envs", str(ENVS), "--platform", "linux-64",
                  "--out", str(out), "--mirror", f"pytorch={url}", "--home", str(tmp / "h"), "-q"])


def pip_report(url: str, variant: str, tmp: Path) -> Took:
    target = tmp / f"t-{time.monotonic_ns()}"
    cmd = [PY, "-m", "pip", "install", "--dry-run", "--ignore-installed", "--quiet", "--disable-pip-version-check",
           "--report", str(target) + ".json", "--only-binary", ":all:", "--python-version", "3.12",
           "--implementation", "cp", "--abi", "cp312", "--target", str(target), "--no-cache-dir",
           "--index-url", f"{url}/{variant}"]
    for tag in platform_tags("linux-64"):
        cmd += ["--platform", tag]
    return timed(cmd + ["torch==2.10.0"], cwd=tmp)


def unsatisfiable(tmp: Path) -> Path:
    """The backtracking case's index under `tmp/bt` and its env file under `tmp/bt/envs`."""
    def needs(i: int) -> tuple[str, ...]:
        return ("zz==1",) if i == 0 else ("zz==2",) if i == 11 else ()
    projects = {f"p{i}": [Release(f"1.{v}", needs(i)) for v in range(300)] for i in range(12)}
    root = lay_out(tmp / "bt", dict(projects, zz=[Release("1"), Release("2")]))
    (root / "envs").mkdir()
    (root / "envs" / "cpu.yml").write_text("platforms: [linux-64]\npip-index: pytorch/simple\ndependencies:\n"
                                           "  - pip:\n" + "".join(f"      - p{i}\n" for i in range(12)))
    return root


def failing(cmd: list[str], **kw) -> tuple[float, float, str]:
    """(wall s, children's CPU s, exit code and the error's first line) of a command expected to fail."""
    t0, c0 = time.perf_counter(), os.times()
    out = subprocess.run(cmd, capture_output=True, text=True, env=dict(ENV, NO_COLOR="1"), **kw)
    c1 = os.times()
    said = [ln.strip() for ln in out.stderr.splitlines() if ln.strip().startswith(("error", "cause", "And"))]
    line = " / ".join(said[-2:] if len(said) > 2 else said)   # uv: its cause, in two lines
    return (time.perf_counter() - t0, c1.children_user + c1.children_system - c0.children_user - c0.children_system,
            f"exit {out.returncode}: {line}")


def backtrack(tmp: Path, reps: int) -> None:
    root = unsatisfiable(tmp)
    uv = shutil.which("uv") or str(Path(PY).with_name("uv"))
    with Index(root) as idx:
        host = idx.simple.removesuffix("/simple")
        ours, theirs = [], []
        for n in range(reps):
            ours.append(failing([PY, "-m", "fdlenv", "lock", "--libtorch", "cpu", "--envs", str(root / "envs"),
                                 "--platform", "linux-64", "--out", str(tmp / f"bt-{n}.yml"),
                                 "--mirror", f"pytorch={host}", "--home", str(tmp / "h"), "-q"]))
            theirs.append(failing([uv, "pip", "compile", "--no-config", "--cache-dir", str(tmp / f"uv-{n}"),
                                   "--python", PY, "--index-url", idx.simple, "--python-version", "3.12",
                                   "--python-platform", "x86_64-manylinux_2_28", "--no-build", "-"],
                                  input="".join(f"p{i}\n" for i in range(12))))
    a, b = (statistics.median(t[0] for t in x) for x in (ours, theirs))
    ca, cb = (statistics.median(t[1] for t in x) for x in (ours, theirs))
    print(f"unsatisfiable 12x300 fdlenv {a:6.2f} s (cpu {ca:.2f} s) {spread([t[0] for t in ours])}   "
          f"uv pip compile {b:6.2f} s (cpu {cb:.2f} s) {spread([t[0] for t in theirs])}   ratio {a / b:.2f}")
    print(f"  fdlenv {ours[0][2]}\n  uv     {theirs[0][2]}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--only", choices=("backtrack", "variants"))
    args = ap.parse_args()
    tmp = Path(tempfile.mkdtemp(prefix="fdlenv-bench-resolve-"))
    if args.only != "variants":
        try:
            backtrack(tmp, max(1, min(args.reps, 3)))
        finally:
            if args.only == "backtrack":
                shutil.rmtree(tmp, ignore_errors=True)
        if args.only == "backtrack":
            return
    idx = serve(tmp)
    try:
        for variant in ("rocm7.1", "cu126"):
            ours, theirs = [], []
            for _ in range(args.reps):            # interleaved: both see the same machine moment
                ours.append(fdlenv_lock(idx.url, variant, tmp))
                theirs.append(pip_report(idx.url, variant, tmp))
            (a, ca), (b, cb) = med(ours), med(theirs)
            print(f"lock {variant:8s} fdlenv {a * 1000:7.0f} ms {spread(ours)} (cpu {ca * 1000:.0f} ms)   pip --dry-run "
                  f"--report {b * 1000:7.0f} ms {spread(theirs)} (cpu {cb * 1000:.0f} ms)   ratio {a / b:.2f} (cpu {ca / cb:.2f})")
        home = tmp / "fresh"
        cold = timed([PY, "-m", "fdlenv", "env", "realize", "--libtorch", "rocm7.1", "--mirror",
                      f"pytorch={idx.url}", "--home", str(home), "-q"])
        redials = [timed([PY, "-m", "fdlenv", "env", "realize", "--libtorch", "rocm7.1", "--home", str(home), "-q"])
                   for _ in range(args.reps)]
        print(f"env realize rocm7.1 on a fresh home (lock on demand + realise): {cold.wall * 1000:.0f} ms "
              f"(cpu {cold.cpu * 1000:.0f}); re-dial {med(redials)[0] * 1000:.0f} ms {spread(redials)} "
              f"(cpu {med(redials)[1] * 1000:.0f})")
    finally:
        idx.close()
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
