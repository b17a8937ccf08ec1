"""Wheel-env benchmarks on a real-sized env: the cu128 env of the shipped lock (18 index wheels,
~3.9 GB of downloads, ~6.5 GB and ~13,800 files installed), each row its sides side by side in
one run (bench/rounds.py: rounds rotate who goes first, each round's ratio printed, then
min/median/max per side and the ratio of medians against the goal).

1. cold:     fresh empty home, every wheel from the configured index (network-bound)
             / uv from the same index                                    (goal <= 0.9x uv)
2. extract:  the wheels on local disk (`--mirror pypi=file://<wheels>`)
             / uv given the same local files                             (goal <= 0.6x uv)
3. loopback: the wheels served on 127.0.0.1 as real indexes serve them (bench/serve.py: Range
             answered, files by sendfile, threaded), pages PEP 503 HTML without sizes
             / uv from the same index                       (goal <= 0.80x uv, wall and CPU)
             / the streaming floor (bench/floor.py)                      (goal <= 1.05x floor)
4. loopback-sized: the same, pages PEP 691 JSON stating PEP 700 sizes
             / uv from the same index                                    (goal <= 0.75x uv)
5. second:   a second env sharing every wheel (the package cache warm: only linking; the env,
             the fast-path cache, roots and pointers deleted before each of its runs, before
             the settle time)
             / `cp -al` of that env's whole tree                         (goal <= 1.05x cp -al)
6. verify:   `env verify --full` of that env (page cache warm: the realise just wrote it;
             nothing is dropped) / one `openssl dgst -sha256` over the same files, all of them
             fed to one process at a time by `xargs -0` (argv would overflow) (goal <= 0.6x; peak RSS
             of each side printed, goal <= 256 MiB)
Peak RSS of the cold realises (rows 1-4): <= 1.0x uv's. Every row prints CPU time (user+sys of
each side's process tree, bench/rounds.py) beside wall time, per round and as min/median/max,
and the ratio of medians of both; rows 1 and 3 hold CPU to <= 0.80x uv's too.

uv runs as a uv user installs a lock's pins: `uv pip install --no-deps name==version ...
--index-url URL` (the pins are the lock's; `--no-deps` because the lock is the whole closure):
it reads the project pages and, without a size or PEP 658 file, whatever it needs of a wheel by
Range, as it would from a real index. Its `--link-mode` is `hardlink`, like fdlenv's env (links
into its package cache): uv's default (clone, falling back to a copy on ext4) would write every
byte twice and flatter fdlenv. fdlenv verifies every wheel's sha256 against the lock; uv, given
no hashes to require, checks what the index states.
Before each side runs (every round, every side alike) the rounds settle (bench/rounds.py):
`sync`, then, as root, the caches dropped and the wheels read back in (rows 1-4; rows 5 and 6
time a warm cache and delete no inodes, so they are not dropped), then `--settle` seconds
(default 10, for the host to take back the freed memory; 65 where the caches cannot be
dropped; bench/rounds.py says why). `/` here is ext4 without a journal, whose
inode allocator skips recently deleted inodes while their table blocks are cached: torch's
stream took 14.4 s right after a 6.5 GB deletion and 7.4 s after a drop, so whoever followed
a deletion would lose (a 20 s pause, this bench's old default, is inside ext4's 60 s window).
Every timing of rows 1-5 runs until the data is on disk (`sync` before, untimed, and after,
timed): fdlenv fsyncs its manifest before publishing and uv does not. fdlenv runs as
`python -m fdlenv` in rows 1-4 (~25 s: imports do not show) and as a regular install's
`fdlenv` command (bench/regular.py) in rows 5-6. Each env is ~6.5 GB: every side's output is
deleted once timed, and at most two envs' data is on disk at once (plus the wheels).

    python bench/wheels.py [--reps N] [--settle S] [--only cold,extract,loopback,loopback-sized,second,verify]
                           [--lock conda-lock.yml] [--work DIR] [--wheels DIR] [--index URL]
                           [--also CHECKOUT ...]

`--also CHECKOUT`: another checkout (an earlier commit, say), as a regular install, is one more
side of rows 1-6, in the same rounds (a change's before and after in one run; goal: within
5 % of it).

`--wheels DIR`: a PEP 503-style directory (`DIR/<project>/<file>`) already holding the lock's
wheels (checked against the lock's sha256 once per file size and mtime; the record kept in
`--work`); without it they are downloaded once into `<work>/index`, kept when `--work` is given.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
# bench/ itself must not be importable: bench/build.py would shadow the `build` package.
sys.path[0] = str(REPO)

import yaml  # noqa: E402

from bench import serve  # noqa: E402
from bench.floor import floor  # noqa: E402
from bench.regular import label_of, regular_install  # noqa: E402
from bench.rounds import Side, Took, row, rm, settle_between, table, timed, warm_after_drop  # noqa: E402
from fdlenv.index import pipindex, simpleapi  # noqa: E402

PY = sys.executable
VARIANT = "cu128"
PYVER = "3.12"                      # the envs' lib/python3.12; torch's wheel is cp312
# uv checks wheel tags against an interpreter; state the target's instead of needing a 3.12 here.
UV_TARGET = ["--python-version", PYVER, "--python-platform", "x86_64-manylinux_2_28", "--link-mode", "hardlink"]
ROWS = ("cold", "extract", "loopback", "loopback-sized", "second", "verify")
RSS_GOAL = 1.0


def find_uv() -> str:
    beside = Path(PY).parent / "uv"
    uv = str(beside) if beside.is_file() else shutil.which("uv")
    if not uv:
        sys.exit("wheels.py: no `uv` beside this Python nor on PATH")
    return uv


class Wheel:
    def __init__(self, name: str, version: str, project: str, filename: str, sha256: str):
        self.name, self.version = name, version
        self.project, self.filename, self.sha256 = pipindex.normalize(project), filename, sha256


def read_wheels(lock: Path) -> list[Wheel]:
    doc = yaml.safe_load(lock.read_text())
    out = []
    for p in doc.get("package", []):
        if p.get("manager") != "pip" or p.get("category") != VARIANT:
            continue
        index, project, filename = pipindex.parse_entry_url(p["url"])
        if index != "pypi":
            sys.exit(f"wheels.py: {p['url']}: only the `pypi` index is benchmarked")
        out.append(Wheel(p["name"], p["version"], project, filename, p["hash"]["sha256"]))
    if not out:
        sys.exit(f"wheels.py: {lock} has no `manager: pip` entries of category {VARIANT}")
    return out


def sha256_of(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while chunk := f.read(1 << 20):
            h.update(chunk)
    return h.hexdigest()


def local_index(wheels: list[Wheel], root: Path, index_url: str, record: Path) -> Path:
    """`root/<project>/<file>` for every wheel: a file there already is checked against the lock
    once per (size, mtime) (`record` keeps what was checked); a missing one is downloaded."""
    seen = json.loads(record.read_text()) if record.is_file() else {}

    def one(w: Wheel) -> None:
        dest = root / w.project / w.filename
        if dest.is_file():
            st = dest.stat()
            key = f"{dest}:{st.st_size}:{st.st_mtime_ns}"
            if seen.get(key) == w.sha256 or sha256_of(dest) == w.sha256:
                seen[key] = w.sha256
                return
            sys.exit(f"wheels.py: {dest}: not the lock's file (sha256 differs); remove it or pick another --wheels")
        url, _, _ = simpleapi.find_file(index_url, w.project, w.filename)
        dest.parent.mkdir(parents=True, exist_ok=True)
        part = dest.with_name(dest.name + ".part")
        with urllib.request.urlopen(url, timeout=120) as resp, open(part, "wb") as f:
            shutil.copyfileobj(resp, f, 1 << 20)
        if sha256_of(part) != w.sha256:
            part.unlink()
            sys.exit(f"wheels.py: {url}: its sha256 is not the lock's {w.sha256}")
        os.replace(part, dest)
        seen[f"{dest}:{dest.stat().st_size}:{dest.stat().st_mtime_ns}"] = w.sha256
    with ThreadPoolExecutor(6) as ex:
        list(ex.map(one, wheels))
    record.write_text(json.dumps(seen, indent=1))
    return root


def realise_cmd(home: Path, lock: Path, mirror: str | None, exe: list[str] | None = None) -> list[str]:
    cmd = [*(exe or [PY, "-m", "fdlenv"]), "env", "realize", "--libtorch", VARIANT, "--lock", str(lock),
           "--home", str(home), "--json"]
    return cmd + (["--mirror", f"pypi={mirror}"] if mirror else [])


def uv_cmd(uv: str, target: Path, sources: list[str], index: str | None = None) -> list[str]:
    where = ["--index-url", index] if index else []
    return [uv, "pip", "install", "--no-deps", "--no-cache", "--target", str(target), *UV_TARGET, *where, *sources]


def pins(wheels: list[Wheel]) -> list[str]:
    return [f"{w.name}=={w.version}" for w in wheels]


def fdlenv_side(work: Path, lock: Path, mirror: str | None, also: list[tuple[str, list[str]]] = ()) -> list[Side]:
    """fdlenv's side, then one per `--also` checkout (label, its regular install's command)."""
    def side(label: str, exe: list[str] | None, home: str) -> Side:
        return Side(label, lambda i, rss: timed(realise_cmd(work / f"{home}{i}", lock, mirror, exe), rss=rss),
                    lambda i: work / f"{home}{i}")
    return [side("fdlenv", None, "home"), *(side(label, exe, f"also{k}-") for k, (label, exe) in enumerate(also))]


def also_goals(also: list[tuple[str, list[str]]]) -> dict[str, float]:
    return {label: 1.05 for label, _ in also}


def uv_side(work: Path, uv: str, sources: list[str], index: str | None = None) -> Side:
    return Side("uv", lambda i, rss: timed(uv_cmd(uv, work / f"uv{i}", sources, index), rss=rss),
                lambda i: work / f"uv{i}")


def bench_cold(work: Path, lock: Path, wheels: list[Wheel], uv: str, index_url: str, mirror: str | None,
               reps: int, also: list[tuple[str, list[str]]]) -> list[dict]:
    ours, *others = fdlenv_side(work, lock, mirror, also)
    sides = [ours, uv_side(work, uv, pins(wheels), index_url), *others]
    return row("cold", sides, reps, {"uv": 0.9, **also_goals(also)}, RSS_GOAL, cpu_goals={"uv": 0.80})


def bench_extract(work: Path, lock: Path, wheels: list[Wheel], uv: str, index: Path, reps: int,
                  also: list[tuple[str, list[str]]]) -> list[dict]:
    files = [str(index / w.project / w.filename) for w in wheels]
    ours, *others = fdlenv_side(work, lock, index.as_uri(), also)
    sides = [ours, uv_side(work, uv, files), *others]
    return row("extract", sides, reps, {"uv": 0.6, **also_goals(also)}, RSS_GOAL)


def bench_loopback(work: Path, lock: Path, wheels: list[Wheel], uv: str, index: Path, reps: int,
                   sized: bool, also: list[tuple[str, list[str]]]) -> list[dict]:
    """The wheels served on 127.0.0.1 by bench/serve.py, pages with sizes or without; fdlenv
    through `--mirror pypi=URL`, uv through `--index-url URL`; without sizes also the floor."""
    listing = [{"project": w.project, "filename": w.filename, "sha256": w.sha256,
                "path": str(index / w.project / w.filename)} for w in wheels]
    with serve.started(listing, sized, work) as url:
        ours, *others = fdlenv_side(work, lock, url, also)
        sides = [ours, uv_side(work, uv, pins(wheels), url + "/"), *others]
        goals = {"uv": 0.75 if sized else 0.80, **also_goals(also)}
        if not sized:
            files = [(f["path"], f["sha256"]) for f in listing]
            sides.append(Side("floor", lambda i, rss: floor(files, work / f"floor{i}"), lambda i: work / f"floor{i}"))
            goals["floor"] = 1.05
        return row("loopback-sized" if sized else "loopback", sides, reps, goals, RSS_GOAL,
                   cpu_goals={"uv": 0.80})


def env_dir(home: Path) -> Path:
    envs = [d for d in (home / "envs").iterdir() if (d / ".fdlenv").is_dir() and not d.name.startswith(".")]
    if len(envs) != 1:
        sys.exit(f"wheels.py: expected one env under {home / 'envs'}, found {len(envs)}")
    return envs[0]


def bench_env(work: Path, lock: Path, mirror: str | None, reps: int, which: list[str],
              also: list[tuple[str, list[str]]]) -> list[dict]:
    """Rows 5 and 6 on one realised env, from a regular install's `fdlenv` command
    (bench/regular.py): a fraction of a second, where an interpreter's own start-up shows."""
    exe = [str(regular_install(work) / "fdlenv")]
    home = work / "home"
    timed(realise_cmd(home, lock, mirror, exe))      # setup: fills the package cache (a cold realise)
    whl = sorted(p.name for p in (home / "pkgs").glob("whl-*"))
    out: list[dict] = []
    if "second" in which:
        def forget(i: int) -> None:
            for d in (home / "envs", home / "cache" / "fast", home / "roots", home / "libtorch"):
                rm(d)

        def second(command: list[str]):
            def run(i: int, rss: list[float]) -> float:
                t = timed(realise_cmd(home, lock, mirror, command))
                if sorted(p.name for p in (home / "pkgs").glob("whl-*")) != whl:
                    sys.exit("wheels.py: second: the package cache changed; the run was not link-only")
                return t
            return run
        # cp -al copies the env left by the setup or by fdlenv's last run: the same tree.
        cpal = Side("cp -al", lambda i, rss: timed(["cp", "-al", str(env_dir(home)), str(work / f"cpal{i}")]),
                    lambda i: work / f"cpal{i}")
        others = [Side(label, second(command), before=forget) for label, command in also]
        out += row("second", [Side("fdlenv", second(exe), before=forget), cpal, *others], reps,
                   {"cp -al": 1.05, **also_goals(also)}, drop=False)
    if "verify" in which:
        env = env_dir(home)
        names = work / "verify-files"
        paths = sorted(os.path.join(d, f) for d, _, fs in os.walk(env) for f in fs
                       if not os.path.islink(os.path.join(d, f)))
        names.write_bytes(b"\0".join(p.encode() for p in paths) + b"\0")
        size = sum(os.path.getsize(p) for p in paths)
        print(f"verify: {len(paths)} files, {size / 1e9:.2f} GB; page cache warm, nothing dropped", flush=True)
        def verify(command: list[str]) -> Callable[[int, list[float]], Took]:
            return lambda i, rss: timed([*command, "env", "verify", "--full", "--home", str(home), "-q"], sync=False,
                                        rss=rss)
        ssl = Side("openssl", lambda i, rss: timed(["xargs", "-0", "openssl", "dgst", "-sha256"], sync=False,
                                                   stdin_path=names, rss=rss))
        out += row("verify", [Side("fdlenv", verify(exe)), ssl, *(Side(label, verify(command)) for label, command in also)],
                   reps, {"openssl": 0.6, **also_goals(also)}, drop=False)
    rm(home)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--settle", type=float, default=None,
                    help="seconds every side waits, after a sync and a cache drop, before it runs (default 10"
                         " where the caches can be dropped (root), else 65; bench/rounds.py says why)")
    ap.add_argument("--only", default=",".join(ROWS), help=f"comma-separated: {','.join(ROWS)}")
    ap.add_argument("--lock", type=Path, default=REPO / "conda-lock.yml", help="default: conda-lock.yml at the repo root")
    ap.add_argument("--work", type=Path, default=None,
                    help="work dir, one filesystem for homes and targets (default: a new temp dir under /var/tmp,"
                         " removed at the end; a given one keeps its index/ of wheel files for the next run)")
    ap.add_argument("--wheels", type=Path, default=None,
                    help="a directory <project>/<file> holding the lock's wheels already (default: <work>/index)")
    ap.add_argument("--index", default=None,
                    help="PEP 503 index URL the wheels come from (default: the index pip is configured with;"
                         " given, fdlenv gets it as --mirror pypi=URL)")
    ap.add_argument("--also", type=Path, action="append", default=[], help="another checkout, one more side")
    a = ap.parse_args()
    which = [w for w in a.only.split(",") if w]
    bad = set(which) - set(ROWS)
    if bad:
        ap.error(f"--only: unknown {', '.join(sorted(bad))}; known: {', '.join(ROWS)}")
    if a.reps < 1:
        ap.error("--reps: at least 1")
    if a.settle is not None and a.settle < 0:
        ap.error("--settle: seconds, 0 or more")
    lock = a.lock.absolute()
    if not lock.is_file():
        ap.error(f"--lock: no file {lock}")
    wheels = read_wheels(lock)
    uv = find_uv()
    index_url = a.index or pipindex.configured_pip_index()
    mirror = a.index                            # None: fdlenv asks pip, as it would for a user
    own_work = a.work is None
    work = Path(tempfile.mkdtemp(prefix="fdlenv-bench-wheels-", dir="/var/tmp")) if own_work else a.work.absolute()
    work.mkdir(parents=True, exist_ok=True)
    print(f"{len(wheels)} wheels of {VARIANT} from {lock}; work dir {work}; {a.reps} round(s)", flush=True)
    settle_between(a.settle)
    also = [(label_of(c), [str(regular_install(work / f"also-install{k}", source=c.absolute()) / "fdlenv")])
            for k, c in enumerate(a.also)]
    results = []
    index: Path | None = None
    try:
        for name in ROWS:
            if name not in which or (name == "verify" and "second" in which):
                continue
            if name != "cold" and index is None:
                index = local_index(wheels, (a.wheels or work / "index").absolute(), index_url,
                                    work / "wheels-checked.json")
                warm_after_drop([index / w.project / w.filename for w in wheels])
            d = work / name
            rm(d)
            d.mkdir()
            print(f"{name}:", flush=True)
            if name == "cold":
                results += bench_cold(d, lock, wheels, uv, index_url, mirror, a.reps, also)
            elif name == "extract":
                results += bench_extract(d, lock, wheels, uv, index, a.reps, also)
            elif name.startswith("loopback"):
                results += bench_loopback(d, lock, wheels, uv, index, a.reps, name == "loopback-sized", also)
            else:       # second and verify: one env, its setup realise from the local wheels
                results += bench_env(d, lock, index.as_uri(), a.reps, which, also)
            rm(d)
    finally:
        if own_work:
            shutil.rmtree(work, ignore_errors=True)
    table(results)


if __name__ == "__main__":
    main()
