"""Cost of the per-attempt check (`store.health`): every file of the env against its realise's table.

The real cu128 env (13,800 files, 6.46 GB) cannot be downloaded by every bench run, so this
one is synthetic with the same shape: one package-cache entry of FILES files in ~1,000
directories (torch's `include/ATen/ops` is half of its files), hard-linked into ENVS envs of a
home as a realise links them, each with a manifest and the table a realise records
(`health.record`). Timed, medians of --reps, interleaved:
- `check`: `health.whole(env)`, what join, prepare, run and env realize add per attempt
  (in-process: the manifest's read and one lstat per file), with 1, 5 and 20 envs in the home
  (the check reads one env, so the others must not show), and per 1,000 files;
- `verify`: `fdlenv env verify` (quick: now the same check for every env) over 1, 5 and 20
  envs, beside an empty home's, the command's own cost.

    python bench/heal.py [--files 13800] [--reps 21]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from fdlenv.store import health

KEY = "ab" * 32


def make_entry(pkgs: Path, files: int) -> Path:
    entry = pkgs / f"whl-{KEY}"
    ops = entry / "site" / "torch" / "include" / "ATen" / "ops"
    for i in range(files):
        d = ops / f"d{i // 14:04d}"
        if i % 14 == 0:
            d.mkdir(parents=True)
        (d / f"f{i}.h").write_bytes(b"x" * (i % 97))
    return entry


def make_env(home: Path, entry: Path, n: int) -> Path:
    """Env n: the entry hard-linked under site-packages, a manifest and the table."""
    key = f"{n:04d}" + "cd" * 30
    env = home / "envs" / f"cpu-{key[:16]}"
    site = env / "lib" / "python3.12" / "site-packages"
    site.mkdir(parents=True)
    subprocess.run(["cp", "-al", str(entry / "site" / "torch"), str(site / "torch")], check=True)
    (site / "torch" / "lib").mkdir(exist_ok=True)
    dist = site / "torch-2.10.0+cpu.dist-info"
    dist.mkdir()
    (dist / "RECORD").write_text("")
    record = {"manager": "pip", "name": "torch", "version": "2.10.0+cpu", "sha256": KEY, "build": "",
              "url": "pip+index://pytorch/cpu/torch/torch.whl", "platform": "linux-64", "dependencies": {},
              "md5": None}
    manifest = {"key": key, "variant": "cpu", "platform": "linux-64", "records": [record],
                "lock": {"path": str(home / "lock.yml"), "sha256": "00" * 32},
                "libtorch_root": str(site / "torch"), "created": "2026-01-01T00:00:00+00:00",
                "tool_version": "bench", "links": {"hardlinked": 1, "copied": []},
                "size": {"own": 0, "entries": [entry.name]}}
    health.record(env)
    (env / ".fdlenv" / "manifest.json").write_text(json.dumps(manifest))
    return env


def median_ms(samples: list[float]) -> str:
    return f"{statistics.median(samples) * 1000:.1f} ms ({min(samples) * 1000:.1f}-{max(samples) * 1000:.1f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--files", type=int, default=13800)
    ap.add_argument("--reps", type=int, default=21)
    a = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        entry = make_entry(root / "h20" / "pkgs", a.files)
        homes = {}
        for n in (1, 5, 20):   # one home per size, sharing the entry through hard links
            home = root / f"h{n}"
            (home / "pkgs").mkdir(parents=True, exist_ok=True)
            homes[n] = [make_env(home, entry, i) for i in range(n)]
        (root / "empty").mkdir()
        check: dict[int, list[float]] = {n: [] for n in homes}
        verify: dict[str, list[float]] = {"empty": [], **{str(n): [] for n in homes}}
        env = {**os.environ, "FDLENV_NO_HOTPATH": "1"}
        env.pop("PYTHONDONTWRITEBYTECODE", None)
        for _ in range(a.reps):   # interleaved: the machine's drift hits every column alike
            for n, envs in homes.items():
                t0 = time.perf_counter()
                assert health.whole(envs[0])
                check[n].append(time.perf_counter() - t0)
            for name in verify:
                home = root / ("empty" if name == "empty" else f"h{name}")
                t0 = time.perf_counter()
                subprocess.run([sys.executable, "-m", "fdlenv", "env", "verify", "--home", str(home)], check=True,
                               env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
                verify[name].append(time.perf_counter() - t0)
        print(f"per-attempt check of one env of {a.files} files (health.whole, in-process), median (min-max):")
        for n in homes:
            per = statistics.median(check[n]) * 1000 / a.files * 1000
            print(f"  home of {n:2d} env(s): {median_ms(check[n])}  = {per:.2f} ms per 1,000 files")
        print("`fdlenv env verify` (quick), median (min-max):")
        base = statistics.median(verify["empty"])
        for name, samples in verify.items():
            extra = "" if name == "empty" else f"  (+{(statistics.median(samples) - base) * 1000:.0f} ms over empty)"
            print(f"  {name:>5} env(s): {median_ms(samples)}{extra}")


if __name__ == "__main__":
    main()
