"""Rounds of side-by-side timings that cannot flatter one side (bench/wheels.py, bench/maintenance.py).

A row is a few sides (fdlenv, its peer, a floor) timed in rounds. In round i the sides run in
turn starting with side i mod n, so who goes first (into a page cache another side warmed, after
a 6 GB deletion another side left, while the network is in a mood) changes each round. Each
round prints every side's seconds and fdlenv's ratio to each other side in that round; the row
ends with min/median/max per side and, per goal, the ratio of medians against the goal.
Peak RSS (the process or any child it waited for: `wait4`'s maxrss) is kept where asked.

Between sides (before every side's run, the first included) the rounds `sync` and wait a
settle time (`settle_between`, printed; 0 unless a bench sets it), the same for every side:
on ext4 without a journal, files created right after a 6.5 GB tree was deleted are slower
to make (the allocator skips recently deleted inodes; torch's stream took 20.1 s right after
a deletion and 16.9 s after a 65 s pause), so without a pause whoever runs after a deletion
is handicapped.
"""

from __future__ import annotations

import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable

from bench.regular import ENV


def timed(cmd: list[str], cwd: Path | None = None, rss: list[float] | None = None, sync: bool = True,
          stdin_path: Path | None = None) -> float:
    """Seconds until `cmd` finished and, with `sync`, what it wrote is on disk: a `sync` runs
    (untimed) before and (timed) after, so neither side leaves its write-back to the next
    measurement, and an installer that fsyncs (fdlenv publishes its manifest durably) is
    compared with one that does not (uv) on the same terms. On failure print stderr's tail and
    exit 1 (no rerun)."""
    if sync:
        subprocess.run(["sync"], check=True)
    with tempfile.TemporaryFile() as err, open(stdin_path or os.devnull, "rb") as stdin:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdin=stdin, stdout=subprocess.DEVNULL, stderr=err, env=ENV, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        if sync:
            subprocess.run(["sync"], check=True)
        dt = time.perf_counter() - t0
        if rss is not None:
            rss.append(usage.ru_maxrss / 1024)     # KiB -> MiB
        if rc != 0:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace")[-3000:]
            print(f"FAILED (exit {rc}): {' '.join(cmd)[:500]}\n--- stderr tail ---\n{tail}", file=sys.stderr)
            raise SystemExit(1)
    return dt


_SETTLE = [0.0]     # seconds between sides: `settle_between`


def settle_between(seconds: float) -> None:
    """From now on, every side of every row waits `seconds` after a `sync` before it runs."""
    _SETTLE[0] = seconds
    print(f"between sides: sync, then {seconds:g} s to settle (the same for every side)", flush=True)


def settle() -> None:
    if _SETTLE[0] > 0:
        subprocess.run(["sync"], check=True)
        time.sleep(_SETTLE[0])


def rm(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


class Side:
    """One side of a row: `run(i, rss)` times round i (appending its peak RSS to `rss` when the
    row keeps RSS); `out(i)`, if given, is removed after each round's run; `before(i)`, if
    given, runs untimed before the settle time that precedes the run (a deletion the run
    needs done gets the same pause as the other sides' deletions)."""

    def __init__(self, label: str, run: Callable[[int, list[float]], float],
                 out: Callable[[int], Path] | None = None, before: Callable[[int], None] | None = None):
        self.label, self.run, self.out, self.before = label, run, out, before
        self.times: list[float] = []
        self.rss: list[float] = []


def fmt(xs: list[float]) -> str:
    return f"min {min(xs):.2f} median {statistics.median(xs):.2f} max {max(xs):.2f}"


def row(name: str, sides: list[Side], reps: int, goals: dict[str, float],
        rss_goal: float | None = None) -> list[dict]:
    """Run `reps` rounds of `sides` (the first is fdlenv), rotating who goes first; `goals`: the
    most fdlenv's median may be over each named side's. Returns one result per goal."""
    ours = sides[0]
    for i in range(reps):
        k = i % len(sides)
        order = sides[k:] + sides[:k]
        for s in order:
            if s.before is not None:
                s.before(i)
            settle()
            s.times.append(s.run(i, s.rss))
            if s.out is not None:
                rm(s.out(i))
        t = ours.times[-1]
        vs = ", ".join(f"{s.label} {s.times[-1]:.2f} s ({t / s.times[-1]:.2f}x)" for s in sides[1:])
        print(f"  {name} round {i + 1} (first: {order[0].label}): {ours.label} {t:.2f} s; {vs}", flush=True)
    for s in sides:
        extra = f"; peak RSS median {statistics.median(s.rss):.0f} MiB" if s.rss else ""
        print(f"  {name} {s.label}: {fmt(s.times)} s over {reps}{extra}", flush=True)
    out = []
    for label, goal in goals.items():
        ref = next(s for s in sides if s.label == label)
        a, b = statistics.median(ours.times), statistics.median(ref.times)
        out.append({"name": name, "ref": label, "ours": a, "base": b, "ratio": a / b, "goal": goal})
    if rss_goal is not None and ours.rss and sides[1].rss:
        a, b = statistics.median(ours.rss), statistics.median(sides[1].rss)
        out.append({"name": f"{name} RSS", "ref": sides[1].label, "ours": a, "base": b, "ratio": a / b,
                    "goal": rss_goal, "unit": "MiB"})
    for r in out:
        print(f"{r['name']}: {ours.label} {r['ours']:.2f} vs {r['ref']} {r['base']:.2f} -> ratio of medians "
              f"{r['ratio']:.2f} (goal <= {r['goal']:g}: {'ok' if r['ratio'] <= r['goal'] else 'MISSED'})",
              flush=True)
    return out


def table(results: list[dict]) -> None:
    print()
    print(f"{'measurement':<20}{'fdlenv':>12}{'reference':>10}{'ref':>12}{'ratio':>8}{'goal':>8}  result")
    for r in results:
        unit = r.get("unit", "s")
        print(f"{r['name']:<20}{r['ours']:>8.2f} {unit:<3}{r['ref']:>10}{r['base']:>8.2f} {unit:<3}{r['ratio']:>8.2f}"
              f"{'<= ' + format(r['goal'], 'g'):>8}  {'ok' if r['ratio'] <= r['goal'] else 'MISSED'}")
