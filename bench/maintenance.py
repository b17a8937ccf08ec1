"""Maintenance benchmarks: what the everyday commands cost per env, measured side by side in one run.

`env list`, `env gc --dry-run` and `env verify` (default) on a home of N envs (default 20),
   each sharing a package of F files (default 12,000, a cu128-sized file count) through the
   package cache and holding one small package of its own: seconds per command, and per env
   (goal: list and gc <= 0.3 s with 20 envs: a manifest-level cost, not a walk of every file;
   verify checks every file's lstat against its realise's table since issue 45: goal a few ms
   per 1,000 files, <= 6 s per 1,000,000, i.e. <= 1.5 s for 20 x 12,000)
`env verify --full` is timed on a real cu128 env against one `openssl dgst` in bench/wheels.py
(`--only verify`): 1 GiB in 16 synthetic files, as this bench once did, hashes faster per byte
than 13,800 real ones and flattered it.

Each command runs --reps times on the full home and on an empty one, interleaved, who goes
first alternating (bench/rounds.py); min/median/max printed. The commands run as a user runs
them: a regular install's `fdlenv` command (a fresh venv, bench/regular.py).

    python bench/maintenance.py [--envs 20] [--files 12000] [--reps 5]
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

# bench/ itself must not be importable: bench/build.py would shadow the `build` package.
sys.path[0] = str(Path(__file__).resolve().parent.parent / "tests")
sys.path.insert(1, str(Path(__file__).resolve().parent.parent))

from bench.regular import ENV, regular_install  # noqa: E402
from bench.rounds import Side, row  # noqa: E402
from helpers_conda import Pkg, make_channel, write_env  # noqa: E402
from helpers_store import base_pkgs, variant_pkg  # noqa: E402

from fdlenv.names.home import Home  # noqa: E402
from fdlenv.lock import lock_envs  # noqa: E402


EXE = [sys.executable, "-m", "fdlenv"]     # main() puts the regular install's command here


def fdlenv(*args: str) -> float:
    t0 = time.perf_counter()
    subprocess.run([*EXE, *args, "-q"], check=True, stdout=subprocess.DEVNULL, env=ENV)
    return time.perf_counter() - t0


def median(xs: list[float]) -> float:
    return statistics.median(xs)


def home_of_envs(tmp: Path, n: int, nfiles: int) -> Home:
    home = Home(tmp / "home")
    tags = [Pkg(f"tag{i}", "1.0", noarch="generic", files={f"share/tag/{i}.txt": f"{i}\n"}) for i in range(n)]
    make_channel(home.channel, base_pkgs() + [variant_pkg("cpu", nfiles=nfiles)] + tags)
    for i in range(n):
        envs, lock = tmp / f"envs{i}", tmp / f"lock{i}" / "conda-lock.yml"
        write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.0", "hooks", "common-data", f"tag{i}"])
        lock.parent.mkdir(parents=True)
        lock_envs(envs, lock, home=home)
        fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--home", str(home.root))
        print(f"  env {i + 1}/{n} realised", file=sys.stderr)
    return home


def bench_per_env(tmp: Path, n: int, nfiles: int, reps: int) -> None:
    home = home_of_envs(tmp, n, nfiles)
    empty = Home(tmp / "empty")
    print(f"1. {n} envs of {nfiles} shared files each (medians of {reps}; per env: over an empty home)")
    for name, args in (("env list", ("env", "list")), ("env gc --dry-run", ("env", "gc", "--dry-run")),
                       ("env verify", ("env", "verify"))):
        sides = [Side(f"{n} envs", lambda i, rss, a=args: fdlenv(*a, "--home", str(home.root))),
                 Side("empty", lambda i, rss, a=args: fdlenv(*a, "--home", str(empty.root)))]
        row(name, sides, reps, {})
        t, t0 = median(sides[0].times), median(sides[1].times)
        goal = 0.3 if name != "env verify" else 0.3 + 6e-6 * n * nfiles   # verify: one lstat per file
        print(f"   {name:18s} {t:6.3f} s  (empty home {t0:5.3f} s; {(t - t0) / n * 1000:5.1f} ms per env)  "
              f"goal <= {goal:.2f} s: {'met' if t <= goal else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=20)
    ap.add_argument("--files", type=int, default=12000)
    ap.add_argument("--reps", type=int, default=5)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fdlenv-bench-maint-") as tmp:
        EXE[:] = [str(regular_install(Path(tmp)) / "fdlenv")]
        bench_per_env(Path(tmp), a.envs, a.files, a.reps)


if __name__ == "__main__":
    main()
