"""Rounds of side-by-side timings that cannot flatter one side (bench/wheels.py, bench/maintenance.py).

A row is a few sides (fdlenv, its peer, a floor) timed in rounds. In round i the sides run in
turn starting with side i mod n, so who goes first (into a page cache another side warmed, after
a 6 GB deletion another side left, while the network is in a mood) changes each round. Each
round prints every side's seconds and fdlenv's ratio to each other side in that round; the row
ends with min/median/max per side and, per goal, the ratio of medians against the goal.
Peak RSS (the process or any child it waited for: `wait4`'s maxrss) is kept where asked.

Every side's CPU time is kept beside its wall time: user+sys of the command's whole process
tree (`wait4`'s rusage of the child, which on Linux includes every descendant it waited for;
for a side that runs in this process, `cpu_of`: this process's own time plus its reaped
children's, deltas around the call). The `sync`s around a timed command are not in it: CPU is
what the command spent, the figure that a machine's load disturbs least (a busy neighbour
stretches wall time, not the instructions a side runs). Rounds, min/median/max and the ratio
of medians are printed for both, so a goal on either reads off the same run.

Between sides (before every side's run, the first included) the rounds settle the machine
the same way for every side (`settle_between`, printed). Why: on ext4 without a journal (`/`
here) the inode allocator skips every inode deleted in the last 60 s whose inode-table block is
still in the buffer cache (`recently_deleted` in ext4's ialloc.c; 360 s while that block is
dirty), so files made right after a 6.5 GB tree was deleted cost twice the system time: torch's
stream from a local file took 14.4 s (9.9 s sys) right after a deletion, 7.4 s (2.9 s sys)
once the cache was dropped. A journalled filesystem (a user's, usually) never pays this, and
whoever ran after a deletion would lose. So each settle `sync`s and then, where this process
may (root), drops the page, dentry and inode caches (`/proc/sys/vm/drop_caches`) and reads
the row's source files back in (so a server still serves them from memory), then waits
`seconds`; where it may not, it waits out the 60 s (`RECENCY`) instead.
Why `seconds` is 10 after a drop: this VM hands free memory back to its host (virtio-balloon's
free page reporting, 2 s after pages are freed, in batches), and a page the host took back
costs a fault on the host when it is next written. Writing into the page cache is then most of
a realise's kernel time, and how much of the freed memory had been handed back when a side
started decided it: 2 GB written in 256 KiB steps took 1.0-4.0 s of system time 2 s after a
drop and 4.5-5.1 s, steadily, 10 s after. Every side starts from the same state that way.
"""

from __future__ import annotations

import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from collections.abc import Callable
from typing import NamedTuple

from bench.regular import ENV


class Took(NamedTuple):
    """One timed run: wall seconds (until on disk, where synced) and CPU seconds (user+sys of
    its process tree)."""

    wall: float
    cpu: float


def _cpu_now() -> float:
    """User+sys of this process and of its reaped children so far."""
    me, kids = os.times(), resource.getrusage(resource.RUSAGE_CHILDREN)
    return me.user + me.system + kids.ru_utime + kids.ru_stime


def cpu_of(run: Callable[[], float]) -> Took:
    """`run()`'s wall seconds (what it returns) with its CPU: this process's and its reaped
    children's, deltas around the call (a side run in this process, its worker processes joined
    before it returns: the floor's)."""
    c0 = _cpu_now()
    wall = run()
    return Took(wall, _cpu_now() - c0)


def ran(argv: list[str] | str, **kw: object) -> Took:
    """`subprocess.run(argv, check=True, **kw)`: its wall seconds and its process tree's CPU
    (user+sys of the children this process reaped meanwhile: `RUSAGE_CHILDREN`, deltas; this
    process's own time for the fork is not in it). The one helper the small benches time a
    command with (bench/detect.py, prepare.py, build.py, store.py)."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    subprocess.run(argv, check=True, **kw)  # type: ignore[call-overload]
    wall = time.perf_counter() - t0
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return Took(wall, r1.ru_utime - r0.ru_utime + r1.ru_stime - r0.ru_stime)


def ms3(xs: list[float]) -> str:
    """min/median/max of seconds, in ms."""
    return f"{1000 * min(xs):.1f}/{1000 * statistics.median(xs):.1f}/{1000 * max(xs):.1f}"


def timed(cmd: list[str], cwd: Path | None = None, rss: list[float] | None = None, sync: bool = True,
          stdin_path: Path | None = None) -> Took:
    """Seconds until `cmd` finished and, with `sync`, what it wrote is on disk, and the CPU its
    process tree used (`wait4`'s rusage: the `sync`s are not in it): a `sync` runs
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
    return Took(dt, usage.ru_utime + usage.ru_stime)


_SETTLE: list[float] = []      # [seconds between sides] once a bench asked (`settle_between`)
_WARM: list[Path] = []           # files read back into the page cache after a drop
_DROP = Path("/proc/sys/vm/drop_caches")
RECENCY = 65.0                   # ext4's 60 s window for a clean inode-table block, and a margin


def can_drop() -> bool:
    return os.access(_DROP, os.W_OK)


def settle_between(seconds: float | None) -> None:
    """From now on, every side of every row settles before it runs (the module's docstring):
    `sync`, the caches dropped where this process may (then the `warm_after_drop` files read
    back in), and `seconds` (None: 10 s after a drop, else RECENCY)."""
    dropping = can_drop()
    _SETTLE[:] = [seconds if seconds is not None else (10.0 if dropping else RECENCY)]
    how = "drop the caches, read the sources back, " if dropping else "(caches not droppable here) "
    print(f"between sides: sync, {how}then {_SETTLE[0]:g} s to settle (the same for every side)", flush=True)


def warm_after_drop(paths: list[Path]) -> None:
    """The rows' source files (the wheels a loopback server sends), read back after each drop."""
    _WARM[:] = paths


def settle(drop: bool = True) -> None:
    """Before a side runs: `sync`, the caches dropped (unless the row times a warm cache, or this
    process may not), the settle time."""
    if not _SETTLE:
        return
    subprocess.run(["sync"], check=True)
    if drop and can_drop():
        _DROP.write_text("3\n")
        for path in _WARM:
            with open(path, "rb", buffering=0) as f:
                while f.read(8 << 20):
                    pass
    time.sleep(_SETTLE[0])


def rm(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


class Side:
    """One side of a row: `run(i, rss)` times round i (appending its peak RSS to `rss` when the
    row keeps RSS) and returns a `Took` (a bare float of wall seconds gets its CPU from
    `cpu_of`'s deltas around the call); `out(i)`, if given, is removed after each round's run; `before(i)`, if
    given, runs untimed before the settle time that precedes the run (a deletion the run
    needs done gets the same pause as the other sides' deletions)."""

    def __init__(self, label: str, run: Callable[[int, list[float]], Took | float],
                 out: Callable[[int], Path] | None = None, before: Callable[[int], None] | None = None):
        self.label, self.run, self.out, self.before = label, run, out, before
        self.times: list[float] = []
        self.cpus: list[float] = []
        self.rss: list[float] = []

    def once(self, i: int) -> None:
        """Round i's run, its wall and CPU seconds kept."""
        took: Took | float = 0.0

        def run() -> float:
            nonlocal took
            took = self.run(i, self.rss)
            return took.wall if isinstance(took, Took) else took
        measured = cpu_of(run)
        took = took if isinstance(took, Took) else measured
        self.times.append(took.wall)
        self.cpus.append(took.cpu)


def fmt(xs: list[float]) -> str:
    return f"min {min(xs):.2f} median {statistics.median(xs):.2f} max {max(xs):.2f}"


def row(name: str, sides: list[Side], reps: int, goals: dict[str, float],
        rss_goal: float | None = None, drop: bool = True, cpu_goals: dict[str, float] | None = None) -> list[dict]:
    """Run `reps` rounds of `sides` (the first is fdlenv), rotating who goes first; `goals`: the
    most fdlenv's median wall time may be over each named side's, `cpu_goals` the same for CPU
    time (a side named in `goals` only still gets its CPU ratio, with no goal); `drop`: False
    for a row that times a warm cache and deletes no inodes between its sides (`settle`).
    Returns one result per goal: wall, then CPU, per named side."""
    ours = sides[0]
    for i in range(reps):
        k = i % len(sides)
        order = sides[k:] + sides[:k]
        for s in order:
            if s.before is not None:
                s.before(i)
            settle(drop)
            s.once(i)
            if s.out is not None:
                rm(s.out(i))
        t, c = ours.times[-1], ours.cpus[-1]
        vs = ", ".join(f"{s.label} {s.times[-1]:.2f} s ({t / s.times[-1]:.2f}x), cpu {s.cpus[-1]:.2f} s "
                       f"({c / s.cpus[-1]:.2f}x)" for s in sides[1:])
        print(f"  {name} round {i + 1} (first: {order[0].label}, load {_load()}): {ours.label} {t:.2f} s, "
              f"cpu {c:.2f} s; {vs}", flush=True)
    for s in sides:
        extra = f"; peak RSS median {statistics.median(s.rss):.0f} MiB" if s.rss else ""
        print(f"  {name} {s.label}: wall {fmt(s.times)} s, cpu {fmt(s.cpus)} s over {reps}{extra}", flush=True)
    out = []
    for label in dict.fromkeys([*goals, *(cpu_goals or {})]):
        ref = next(s for s in sides if s.label == label)
        for kind, mine, theirs, goal in (("", ours.times, ref.times, goals.get(label)),
                                         (" cpu", ours.cpus, ref.cpus, (cpu_goals or {}).get(label))):
            a, b = statistics.median(mine), statistics.median(theirs)
            out.append({"name": name + kind, "ref": label, "ours": a, "base": b, "ratio": a / b, "goal": goal})
    if rss_goal is not None and ours.rss and sides[1].rss:
        a, b = statistics.median(ours.rss), statistics.median(sides[1].rss)
        out.append({"name": f"{name} RSS", "ref": sides[1].label, "ours": a, "base": b, "ratio": a / b,
                    "goal": rss_goal, "unit": "MiB"})
    for r in out:
        print(f"{r['name']}: {ours.label} {r['ours']:.2f} vs {r['ref']} {r['base']:.2f} -> ratio of medians "
              f"{r['ratio']:.2f} ({_verdict(r)})", flush=True)
    return out


def _load() -> str:
    """The 1-minute load average (the machine's state beside each round's figures)."""
    return f"{os.getloadavg()[0]:.1f}"


def _verdict(r: dict) -> str:
    if r["goal"] is None:
        return "no goal"
    return f"goal <= {r['goal']:g}: {'ok' if r['ratio'] <= r['goal'] else 'MISSED'}"


def table(results: list[dict]) -> None:
    print()
    print(f"{'measurement':<20}{'fdlenv':>12}{'reference':>10}{'ref':>12}{'ratio':>8}{'goal':>8}  result")
    for r in results:
        unit = r.get("unit", "s")
        goal, verdict = ("", "") if r["goal"] is None else \
            ("<= " + format(r["goal"], "g"), "ok" if r["ratio"] <= r["goal"] else "MISSED")
        print(f"{r['name']:<20}{r['ours']:>8.2f} {unit:<3}{r['ref']:>10}{r['base']:>8.2f} {unit:<3}{r['ratio']:>8.2f}"
              f"{goal:>8}  {verdict}")
