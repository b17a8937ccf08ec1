"""Maintenance benchmarks: what the everyday commands cost per env, measured side by side in one run.

1. `env list`, `env gc --dry-run` and `env verify` (default) on a home of N envs (default 20),
   each sharing a package of F files (default 12,000, a cu128-sized file count) through the
   package cache and holding one small package of its own: seconds per command, and per env
   (goal: each command <= 0.3 s with 20 envs: a manifest-level cost, not a walk of every file)
2. `env verify --full` of one env holding B MiB (default 1024) in 16 files
   / one `openssl dgst -sha256` over the same files   (goal <= 0.6: every core hashes)

Medians of --reps runs; the commands run as a user runs them: a regular install's `fdlenv`
command (a fresh venv, bench/regular.py).

    python bench/maintenance.py [--envs 20] [--files 12000] [--big-mib 1024] [--reps 5]
"""

from __future__ import annotations

import argparse
import os
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
from helpers_conda import Pkg, make_channel, write_env  # noqa: E402
from helpers_store import base_pkgs, variant_pkg  # noqa: E402

from fdlenv.home import Home  # noqa: E402
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
        t = median([fdlenv(*args, "--home", str(home.root)) for _ in range(reps)])
        t0 = median([fdlenv(*args, "--home", str(empty.root)) for _ in range(reps)])
        print(f"   {name:18s} {t:6.3f} s  (empty home {t0:5.3f} s; {(t - t0) / n * 1000:5.1f} ms per env)  "
              f"goal <= 0.3 s: {'met' if t <= 0.3 else 'NOT met'}")


def bench_verify_full(tmp: Path, big_mib: int, reps: int) -> None:
    home = Home(tmp / "bighome")
    part = big_mib * 1024 * 1024 // 16
    files = {f"libtorch/lib/part{k}.so": os.urandom(part) for k in range(16)}
    big = Pkg("libtorch-cpu", "2.10.0", build="h0", depends=["hooks", "common-data"],
              files={"libtorch/lib/libtorch.so": b"x", "libtorch/build-version": "2.10.0+test\n", **files})
    make_channel(home.channel, base_pkgs() + [big])
    envs, lock = tmp / "bigenvs", tmp / "big.conda-lock.yml"
    write_env(envs, "cpu", ["flodl"], ["libtorch-cpu 2.10.0", "hooks", "common-data"])
    lock_envs(envs, lock, home=home)
    fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--home", str(home.root))
    env = next(p for p in home.envs.iterdir() if p.is_dir())
    paths = sorted(str(p) for p in env.rglob("*") if p.is_file() and not p.is_symlink())
    ours, base = [], []
    for _ in range(reps):    # warm page cache for both: the same bytes, read the same way
        ours.append(fdlenv("env", "verify", "--full", "--home", str(home.root)))
        t0 = time.perf_counter()
        subprocess.run(["openssl", "dgst", "-sha256", *paths], check=True, stdout=subprocess.DEVNULL)
        base.append(time.perf_counter() - t0)
    a, b = median(ours), median(base)
    print(f"2. env verify --full, {big_mib} MiB in {len(paths)} files, {os.cpu_count()} cores (medians of {reps})")
    print(f"   fdlenv {a:6.2f} s   one openssl dgst {b:6.2f} s   ratio {a / b:4.2f}  goal <= 0.6: "
          f"{'met' if a / b <= 0.6 else 'NOT met'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--envs", type=int, default=20)
    ap.add_argument("--files", type=int, default=12000)
    ap.add_argument("--big-mib", type=int, default=1024)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--only", default="per-env,verify-full")
    a = ap.parse_args()
    with tempfile.TemporaryDirectory(prefix="fdlenv-bench-maint-") as tmp:
        EXE[:] = [str(regular_install(Path(tmp)) / "fdlenv")]
        if "per-env" in a.only:
            bench_per_env(Path(tmp), a.envs, a.files, a.reps)
        if "verify-full" in a.only:
            bench_verify_full(Path(tmp), a.big_mib, a.reps)


if __name__ == "__main__":
    main()
