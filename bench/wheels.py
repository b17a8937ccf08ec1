"""Wheel-env benchmarks: the cu128 env of a real lock (16 index wheels, ~3.9 GB of downloads,
~6 GB installed), measured side by side with uv in one run (medians; these machines are noisy).

1. cold:    cold realise, fresh empty home, every wheel downloaded from the index
            / `uv pip install --no-deps --no-cache --target DIR <the 16 absolute wheel URLs>`   (goal <= 0.6;
            peak RSS <= 1.5x uv's)
2. extract: the wheels already on local disk (a PEP 503 directory index `<work>/index`,
            downloaded once and checked against the lock's sha256), realised through
            `--mirror pypi=file://...` into a fresh home: hash + extract + link
            / `uv pip install --no-deps --no-cache --target DIR <the 16 local wheel files>`   (goal <= 0.6;
            peak RSS <= 1.5x uv's)
3. loopback: the same local wheel files served over HTTP by a loopback server (`python -m http.server`,
            its directory pages a PEP 503 index): fdlenv through `--mirror pypi=http://127.0.0.1:PORT`
            / uv given the same files' URLs   (goal <= 0.6; peak RSS <= 1.5x uv's)
            and / the floor: every wheel's sha256 plus ISA-L inflate of every member plus writing
            the files, a process per core, largest wheel first   (goal <= 1.25)
4. second:  a second env sharing the wheels (warm package cache: only linking; the env, the fast-path
            cache, roots and libtorch pointers are deleted between reps)
            / `cp -al` of the first env's `lib/python3.12/site-packages`   (goal <= 1.1: no install worker)
            fdlenv runs here as a regular install's command (a fresh venv, bench/regular.py)

fdlenv verifies every wheel's sha256 against the lock; uv, given bare URLs or files, verifies none,
so the uv figures are a lower bound for an install with the same guarantees.
In rows 1-3 each rep starts with another side (`in_turn`): what the one before left (a 6 GB
deletion discarded in the background, the network's moods) is spread over all of them.
Every timing runs until the data is on disk (`sync` before, untimed, and after, timed): fdlenv
fsyncs its manifest before publishing (which, on ext4, waits for the payload too) and uv does not,
so without it each side's write-back would land in the other's next measurement.
Nothing is dropped from the page cache. Each env is ~6 GB: every rep's outputs are deleted once
timed, and at most two envs' worth of data is on disk at once (plus the local index for `extract`).

    python bench/wheels.py [--reps N] [--only cold,extract,second] [--lock conda-lock.yml]
                           [--work DIR] [--index URL]
"""

from __future__ import annotations

import argparse
import hashlib
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# bench/ itself must not be importable: bench/build.py would shadow the `build` package.
sys.path[0] = str(REPO)

import yaml  # noqa: E402

from bench.floor import floor  # noqa: E402
from bench.regular import ENV, regular_install  # noqa: E402
from fdlenv import pipindex, simpleapi  # noqa: E402

PY = sys.executable
VARIANT = "cu128"
PYVER = "3.12"                      # the envs' lib/python3.12; torch's wheel is cp312
SITE = Path("lib") / f"python{PYVER}" / "site-packages"
# uv checks wheel tags against an interpreter; state the target's instead of needing a 3.12 here.
UV_TARGET = ["--python-version", PYVER, "--python-platform", "x86_64-manylinux_2_28"]
GOALS = {"cold": 0.6, "extract": 0.6, "loopback": 0.6, "floor": 1.25, "second": 1.1}
RSS_GOAL = 1.5     # fdlenv's peak RSS over uv's, in the cold and extract rows


def find_uv() -> str:
    beside = Path(PY).parent / "uv"
    uv = str(beside) if beside.is_file() else shutil.which("uv")
    if not uv:
        sys.exit("wheels.py: no `uv` beside this Python nor on PATH")
    return uv


def timed(cmd: list[str], cwd: Path | None = None, rss: list[float] | None = None) -> float:
    """Seconds until `cmd` finished and what it wrote is on disk: a `sync` runs (untimed) before
    and (timed) after, so neither side leaves its write-back to the next measurement, and an
    installer that fsyncs (fdlenv publishes its manifest durably) is compared with one that
    does not (uv) on the same terms. On failure print stderr's tail and exit 1 (no rerun)."""
    subprocess.run(["sync"], check=True)
    with tempfile.TemporaryFile() as err:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=err, env=ENV, cwd=cwd)
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = rc = os.waitstatus_to_exitcode(status)
        subprocess.run(["sync"], check=True)
        if rss is not None:
            rss.append(usage.ru_maxrss / 1024)     # KiB -> MiB: the peak of the process (or a child)
        dt = time.perf_counter() - t0
        if rc != 0:
            err.seek(0)
            tail = err.read().decode("utf-8", "replace")[-3000:]
            print(f"FAILED (exit {rc}): {' '.join(cmd)[:500]}\n--- stderr tail ---\n{tail}", file=sys.stderr)
            raise SystemExit(1)
    return dt


def rm(path: Path) -> None:
    if path.is_symlink() or path.is_file():
        path.unlink()
    elif path.exists():
        shutil.rmtree(path)


class Wheel:
    def __init__(self, project: str, filename: str, sha256: str):
        self.project, self.filename, self.sha256 = project, filename, sha256
        self.url = ""               # absolute URL on the index, filled by resolve()


def read_wheels(lock: Path) -> list[Wheel]:
    doc = yaml.safe_load(lock.read_text())
    out = []
    for p in doc.get("package", []):
        if p.get("manager") != "pip" or p.get("category") != VARIANT:
            continue
        index, project, filename = pipindex.parse_entry_url(p["url"])
        if index != "pypi":
            sys.exit(f"wheels.py: {p['url']}: only the `pypi` index is benchmarked")
        out.append(Wheel(project, filename, p["hash"]["sha256"]))
    if not out:
        sys.exit(f"wheels.py: {lock} has no `manager: pip` entries of category {VARIANT}")
    return out


def resolve(wheels: list[Wheel], index: str) -> None:
    def one(w: Wheel) -> None:
        url, sha, _ = simpleapi.find_file(index, w.project, w.filename)
        if sha and sha != w.sha256:
            sys.exit(f"wheels.py: the index states sha256 {sha} for {w.filename}, the lock {w.sha256}")
        w.url = url
    with ThreadPoolExecutor(8) as ex:
        list(ex.map(one, wheels))


def realise_cmd(home: Path, lock: Path, mirror: str | None, exe: list[str] | None = None) -> list[str]:
    cmd = [*(exe or [PY, "-m", "fdlenv"]), "env", "realize", "--libtorch", VARIANT, "--lock", str(lock),
           "--home", str(home), "--json"]
    return cmd + (["--mirror", f"pypi={mirror}"] if mirror else [])


def uv_cmd(uv: str, target: Path, sources: list[str]) -> list[str]:
    return [uv, "pip", "install", "--no-deps", "--no-cache", "--target", str(target), *UV_TARGET, *sources]


def env_site(home: Path) -> Path:
    envs = [d for d in (home / "envs").iterdir() if (d / SITE).is_dir()]
    if len(envs) != 1:
        sys.exit(f"wheels.py: expected one env with {SITE} under {home / 'envs'}, found {len(envs)}")
    return envs[0] / SITE


def local_index(wheels: list[Wheel], root: Path) -> Path:
    """`root/<project>/<file>` for every wheel, downloaded once and checked against the lock."""
    def one(w: Wheel) -> None:
        dest = root / pipindex.normalize(w.project) / w.filename
        if dest.is_file():
            h = hashlib.sha256()
            with open(dest, "rb") as f:
                while chunk := f.read(1 << 20):
                    h.update(chunk)
            if h.hexdigest() == w.sha256:
                return
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        h = hashlib.sha256()
        with urllib.request.urlopen(w.url, timeout=120) as resp, open(part, "wb") as f:
            while chunk := resp.read(1 << 20):
                h.update(chunk)
                f.write(chunk)
        if h.hexdigest() != w.sha256:
            part.unlink()
            sys.exit(f"wheels.py: {w.url}: sha256 {h.hexdigest()}, the lock says {w.sha256}")
        os.replace(part, dest)
    with ThreadPoolExecutor(6) as ex:
        list(ex.map(one, wheels))
    return root


def summary(name: str, ours: list[float], base: list[float], ref: str,
            rss: tuple[list[float], list[float]] | None = None) -> dict:
    m_ours, m_base = statistics.median(ours), statistics.median(base)
    row = {"name": name, "ours": m_ours, "base": m_base, "ratio": m_ours / m_base, "ref": ref, "n": len(ours)}
    if rss is not None:
        r_ours, r_base = statistics.median(rss[0]), statistics.median(rss[1])
        print(f"{name} peak RSS: fdlenv {r_ours:.0f} MiB, {ref} {r_base:.0f} MiB -> ratio {r_ours / r_base:.2f}"
              f" (goal <= {RSS_GOAL:g}: {'ok' if r_ours / r_base <= RSS_GOAL else 'MISSED'})", flush=True)
    ok = "ok" if row["ratio"] <= GOALS[name] else "MISSED"
    print(f"{name}: fdlenv {m_ours:.2f} s, {ref} {m_base:.2f} s -> ratio {row['ratio']:.2f}"
          f" (goal <= {GOALS[name]:g}: {ok}; medians of {len(ours)};"
          f" fdlenv {fmt(ours)}, {ref} {fmt(base)})", flush=True)
    return row


def fmt(xs: list[float]) -> str:
    return "[" + " ".join(f"{x:.2f}" for x in xs) + "]"


def step(times: list[float], run, out: Path):
    """One side of a rep: `run()` timed into `times`, then its output `out` removed."""
    def go() -> None:
        times.append(run())
        rm(out)
    return go


def in_turn(i: int, steps: list) -> None:
    """Rep `i` runs `steps` starting with a different one each time, so what the one before
    left (a 6 GB deletion discarded in the background, the network's moods) is spread."""
    k = (i - 1) % len(steps)
    for go in steps[k:] + steps[:k]:
        go()


def bench_cold(work: Path, lock: Path, wheels: list[Wheel], uv: str, mirror: str | None, reps: int) -> dict:
    urls = [w.url for w in wheels]
    ours: list[float] = []
    base: list[float] = []
    rss: tuple[list[float], list[float]] = ([], [])
    for i in range(1, reps + 1):
        home, target = work / f"home{i}", work / f"uv{i}"
        in_turn(i, [step(ours, lambda h=home: timed(realise_cmd(h, lock, mirror), rss=rss[0]), home),
                    step(base, lambda t=target: timed(uv_cmd(uv, t, urls), rss=rss[1]), target)])
    return summary("cold", ours, base, "uv", rss)


def bench_extract(work: Path, lock: Path, wheels: list[Wheel], uv: str, index: Path, reps: int) -> dict:
    files = [str(index / pipindex.normalize(w.project) / w.filename) for w in wheels]
    mirror = index.as_uri()
    ours: list[float] = []
    base: list[float] = []
    rss: tuple[list[float], list[float]] = ([], [])
    for i in range(1, reps + 1):
        home, target = work / f"home{i}", work / f"uv{i}"
        in_turn(i, [step(ours, lambda h=home: timed(realise_cmd(h, lock, mirror), rss=rss[0]), home),
                    step(base, lambda t=target: timed(uv_cmd(uv, t, files), rss=rss[1]), target)])
    return summary("extract", ours, base, "uv", rss)


def bench_loopback(work: Path, lock: Path, wheels: list[Wheel], uv: str, index: Path, reps: int) -> list[dict]:
    """The wheels served by a loopback HTTP server (`python -m http.server`, its directory pages a
    PEP 503 index): fdlenv through `--mirror pypi=http://127.0.0.1:PORT` beside uv given the same
    files' URLs, and beside the floor (`floor`)."""
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen([PY, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(index)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        base = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 10
        while True:
            try:
                urllib.request.urlopen(base + "/", timeout=1).close()
                break
            except OSError:
                if time.monotonic() > deadline:
                    sys.exit("wheels.py: the loopback server did not start")
                time.sleep(0.1)
        urls = [f"{base}/{pipindex.normalize(w.project)}/{w.filename}" for w in wheels]
        files = [str(index / pipindex.normalize(w.project) / w.filename) for w in wheels]
        ours: list[float] = []
        base_t: list[float] = []
        low: list[float] = []
        rss: tuple[list[float], list[float]] = ([], [])
        for i in range(1, reps + 1):
            home, target, out = work / f"home{i}", work / f"uv{i}", work / f"floor{i}"
            in_turn(i, [step(ours, lambda h=home: timed(realise_cmd(h, lock, base), rss=rss[0]), home),
                        step(base_t, lambda t=target: timed(uv_cmd(uv, t, urls), rss=rss[1]), target),
                        step(low, lambda o=out: floor(files, o), out)])
        return [summary("loopback", ours, base_t, "uv", rss), summary("floor", ours, low, "floor")]
    finally:
        server.terminate()
        server.wait()


def bench_second(work: Path, lock: Path, mirror: str | None, reps: int) -> dict:
    """From a regular install's `fdlenv` command (bench/regular.py): a fraction of a second,
    where an interpreter's own start-up shows."""
    exe = [str(regular_install(work) / "fdlenv")]
    home = work / "home"
    timed(realise_cmd(home, lock, mirror, exe))      # setup: fills the package cache (a cold realise)
    whl = sorted(p.name for p in (home / "pkgs").glob("whl-*"))
    ours, base = [], []
    for i in range(1, reps + 1):
        for d in (home / "envs", home / "cache" / "fast", home / "roots", home / "libtorch"):
            rm(d)
        ours.append(timed(realise_cmd(home, lock, mirror, exe)))
        if sorted(p.name for p in (home / "pkgs").glob("whl-*")) != whl:
            sys.exit("wheels.py: second: the package cache changed; the rep was not link-only")
        dest = work / f"cpal{i}"
        base.append(timed(["cp", "-al", str(env_site(home)), str(dest)]))
        rm(dest)
    rm(home)
    return summary("second", ours, base, "cp -al")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--only", default="cold,extract,loopback,second",
                    help="comma-separated: cold,extract,loopback,second")
    ap.add_argument("--lock", type=Path, default=REPO / "conda-lock.yml", help="default: conda-lock.yml at the repo root")
    ap.add_argument("--work", type=Path, default=None,
                    help="work dir, one filesystem for homes and targets (default: a new temp dir under /var/tmp,"
                         " removed at the end; a given one keeps its index/ of wheel files for the next run)")
    ap.add_argument("--index", default=None,
                    help="PEP 503 index URL the wheels come from (default: the index pip is configured with;"
                         " given, fdlenv gets it as --mirror pypi=URL)")
    a = ap.parse_args()
    which = [w for w in a.only.split(",") if w]
    bad = set(which) - set(GOALS)
    if bad:
        ap.error(f"--only: unknown {', '.join(sorted(bad))}; known: {', '.join(GOALS)}")
    if a.reps < 1:
        ap.error("--reps: at least 1")
    lock = a.lock.absolute()
    if not lock.is_file():
        ap.error(f"--lock: no file {lock}")
    wheels = read_wheels(lock)
    uv = find_uv()
    index_url = a.index or pipindex.configured_pip_index()
    mirror = a.index                            # None: fdlenv asks pip, as it would for a user
    if {"cold", "extract", "loopback"} & set(which):
        resolve(wheels, index_url)              # once: uv needs absolute URLs, the lock has none
    own_work = a.work is None
    work = Path(tempfile.mkdtemp(prefix="fdlenv-bench-wheels-", dir="/var/tmp")) if own_work else a.work.absolute()
    work.mkdir(parents=True, exist_ok=True)
    print(f"{len(wheels)} wheels of {VARIANT} from {lock}; work dir {work}; {a.reps} rep(s)", flush=True)
    rows = []
    try:
        for name in ("cold", "extract", "loopback", "second"):
            if name not in which:
                continue
            d = work / name
            rm(d)
            d.mkdir()
            if name == "cold":
                rows.append(bench_cold(d, lock, wheels, uv, mirror, a.reps))
            elif name == "extract":
                index = local_index(wheels, work / "index")
                rows.append(bench_extract(d, lock, wheels, uv, index, a.reps))
            elif name == "loopback":
                index = local_index(wheels, work / "index")
                rows += bench_loopback(d, lock, wheels, uv, index, a.reps)
            else:
                # Its setup realise reads the local index when `extract` left one.
                local = work / "index"
                src = local.as_uri() if local.is_dir() else mirror
                rows.append(bench_second(d, lock, src, a.reps))
            rm(d)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    print()
    print(f"{'measurement':<12}{'fdlenv s':>10}{'reference':>12}{'ref s':>9}{'ratio':>8}{'goal':>7}  result")
    for r in rows:
        g = GOALS[r["name"]]
        print(f"{r['name']:<12}{r['ours']:>10.2f}{r['ref']:>12}{r['base']:>9.2f}{r['ratio']:>8.2f}"
              f"{'<= ' + format(g, 'g'):>7}  {'ok' if r['ratio'] <= g else 'MISSED'}")


if __name__ == "__main__":
    main()
