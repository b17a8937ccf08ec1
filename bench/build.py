"""Wall time of a no-change `fdlenv build` re-dial, against `python -c pass`.

The re-dial case: the tree was fetched and built before and nothing changed.
What remains is fdlenv's own work: import, spec parse, a stat snapshot of both
sides (file://: rsync runs only when one changed) or
`git ls-remote` (git+file://), a stat walk of the tree, the cached manifest,
and finding `builds/<key>/`. The store is stubbed (its own fast path is the
store's bench), so the figure is the source step alone. Goal: under 60 ms
over `python -c pass`. A last line times the whole `fdlenv build` command with
the real store (an env realised from a test lock) when py-rattler is present.

Switching variants (`--switch N`, N rounds): a crate whose build.rs compiles a
C++ unity file (the shape of flodl-sys's, rerun when LIBTORCH_PATH changes),
built with `fdlenv build` for variant A, then B, then one Rust file edited,
then A again; the peer does the same with plain cargo in one target dir
(LIBTORCH_PATH switched by hand), as a box without per-variant build trees
does. Ratio = the last A build, fdlenv / peer (goal: well under 1: the C++
is not rebuilt on the way back).

    python bench/build.py [--files 300] [--runs 15] [--switch 3]
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
from typing import NamedTuple

sys.path[0] = str(Path(__file__).resolve().parent.parent)   # bench/ itself must not be importable (this file)

from bench.rounds import ran  # noqa: E402

REDIAL = """
import sys
from pathlib import Path
from fdlenv.front import cli
from fdlenv.app import libtorch
from fdlenv.store import activation
from fdlenv.store.env import Env
cli.COMMANDS = ("build",)
libtorch.env_for = lambda req, variant, notes: Env("cpu", "e" * 64, Path("/nonexistent"), Path("/nonexistent"),
                                                    False)
activation.child_environ = lambda home, env, base=None, rocm_root=None: {"PATH": "/usr/bin:/bin",
                                                                       "LIBTORCH_PATH": "/x"}
sys.exit(cli.main(["build", "--home", sys.argv[1], "--libtorch", "cpu", "--source", sys.argv[2]]))
"""

RECIPE = "mkdir -p target/release && cp src/f0.rs target/release/train"


# An installed package has its bytecode compiled; a dev shell may forbid writing it.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}


class Stat(NamedTuple):
    """A command's runs: median and min wall seconds (min is the figure least disturbed by other
    load) and median CPU seconds (user+sys of its process tree); `-` takes a base off each."""

    median: float
    least: float
    cpu: float

    def __sub__(self, other: tuple) -> Stat:   # type: ignore[override]
        return Stat(*(a - b for a, b in zip(self, other, strict=True)))


def timed(argv: list[str], runs: int) -> Stat:
    samples = [ran(argv, env=ENV, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL) for _ in range(runs)]
    walls = [t.wall for t in samples]
    return Stat(statistics.median(walls), min(walls), statistics.median(t.cpu for t in samples))


def ms(s: Stat) -> str:
    return f"median {s.median * 1000:6.1f} ms  min {s.least * 1000:6.1f} ms  CPU {s.cpu * 1000:6.1f} ms"


def make_tree(root: Path, files: int) -> None:
    (root / "src").mkdir(parents=True)
    for i in range(files):
        (root / "src" / f"f{i}.rs").write_text(f"pub fn f{i}() -> u32 {{ {i} }}\n" * 20)
    (root / ".fdl-run.yml").write_text(f"bin: target/release/train\nbuild: {RECIPE}\nargs: []\n")


def git(*args: str, cwd: Path) -> None:
    env = dict(os.environ, GIT_AUTHOR_NAME="b", GIT_AUTHOR_EMAIL="b@b",
               GIT_COMMITTER_NAME="b", GIT_COMMITTER_EMAIL="b@b")
    subprocess.run(["git", *args], cwd=cwd, env=env, check=True, capture_output=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--files", type=int, default=300)
    ap.add_argument("--runs", type=int, default=15)
    ap.add_argument("--switch", type=int, default=0, metavar="N", help="only the switching bench, N rounds")
    a = ap.parse_args()
    if a.switch:
        with tempfile.TemporaryDirectory() as tmp:
            switching(Path(tmp), a.switch)
        return
    with tempfile.TemporaryDirectory() as tmp:
        tmp = Path(tmp)
        make_tree(tmp / "src", a.files)
        git("init", "-q", "--bare", str(tmp / "repo.git"), cwd=tmp)
        git("init", "-q", cwd=tmp / "src")
        git("add", "-A", cwd=tmp / "src")
        git("commit", "-qm", "v1", cwd=tmp / "src")
        git("push", "-q", str(tmp / "repo.git"), "HEAD:refs/heads/main", cwd=tmp / "src")
        specs = {"file://": f"file://{tmp / 'src'}", "git+file://": f"git+file://{tmp / 'repo.git'}#main"}
        home = str(tmp / "home")
        for spec in specs.values():  # first dial: fetch and build
            subprocess.run([sys.executable, "-c", REDIAL, home, spec], check=True, env=ENV,
                           stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        time.sleep(2.2)  # past the digest cache's racy window, as any real re-dial is
        for spec in specs.values():  # warm the per-file cache once
            subprocess.run([sys.executable, "-c", REDIAL, home, spec], check=True, env=ENV,
                           stderr=subprocess.DEVNULL, stdout=subprocess.DEVNULL)
        base = timed([sys.executable, "-c", "pass"], a.runs)
        rsync = timed(["rsync", "-a", "--delete", f"{tmp / 'src'}/", f"{tmp / 'copy'}/"], a.runs)
        # The remote's answer on a git re-dial; the goal excludes network time to a remote.
        remote = {"git+file://": timed(["git", "ls-remote", "--", f"file://{tmp / 'repo.git'}", "main",
                                        "main^{}"], a.runs)}
        print(f"python -c pass                  {ms(base)}")
        print(f"rsync alone ({a.files} files)       {ms(rsync)}   (what a re-dial skips when nothing changed)")
        for name, spec in specs.items():
            t = timed([sys.executable, "-c", REDIAL, home, spec], a.runs)
            own = t - base
            print(f"re-dial {name:<12}        {ms(t)}")
            if name in remote:
                print(f"  git ls-remote alone           {ms(remote[name])}")
                own = own - remote[name]
                print(f"  fdlenv's own (minus pass and the remote's answer) {ms(own)}   goal < 60 ms")
            else:
                print(f"  fdlenv's own (minus pass)     {ms(own)}   goal < 60 ms")
        real_store(tmp, specs["file://"], base, a.runs)


WORLD = """
import sys
from pathlib import Path
sys.path.insert(0, sys.argv[1])
from helpers_store import make_world
w = make_world(Path(sys.argv[2]))
print(w.lock)
print(w.home.root)
"""


def real_store(tmp: Path, spec: str, base: Stat, runs: int) -> None:
    """The full command: CLI, store fast path, activation map, source step."""
    # In a child: this script's own name (`build`) would shadow the PyPA
    # `build` module that conda-lock imports.
    tests = Path(__file__).resolve().parent.parent / "tests"
    made = subprocess.run([sys.executable, "-c", WORLD, str(tests), str(tmp / "world")], env=ENV,
                          cwd=tmp, capture_output=True, text=True)
    if made.returncode != 0:
        print(f"full `fdlenv build` with the real store: skipped ({made.stderr.strip()[-200:]})")
        return
    lock, home = made.stdout.split()
    argv = [sys.executable, "-m", "fdlenv", "build", "--libtorch", "cpu", "--lock", lock,
            "--home", home, "--source", spec, "--json"]
    for _ in range(2):
        subprocess.run(argv, check=True, env=ENV, capture_output=True)
    t = timed(argv, runs)
    print(f"full `fdlenv build`, real store {ms(t)}")
    print(f"  fdlenv's own (minus pass)     {ms(t - base)}")


SWITCH_BUILD_RS = r'''
use std::{env, path::PathBuf, process::Command};
fn main() {
    println!("cargo:rerun-if-env-changed=LIBTORCH_PATH");
    println!("cargo:rerun-if-changed=unity.cpp");
    let out = PathBuf::from(env::var("OUT_DIR").unwrap());
    assert!(Command::new("c++").args(["-O2", "-c", "-fPIC", "unity.cpp", "-o"]).arg(out.join("u.o")).status().unwrap().success());
    assert!(Command::new("ar").arg("crs").arg(out.join("libu.a")).arg(out.join("u.o")).status().unwrap().success());
    println!("cargo:rustc-link-search=native={}", out.display());
    println!("cargo:rustc-link-lib=static=u");
    println!("cargo:rustc-link-lib=dylib=stdc++");
}
'''
# A few seconds of C++: template instantiations standing in for a unity build over torch.h.
UNITY = ("#include <map>\n#include <string>\n#include <vector>\n#include <algorithm>\n"
         + "".join(f"template <int N> struct T{i} {{ std::map<std::string, std::vector<int>> m; int f() "
                   f"{{ std::vector<int> v(N); std::sort(v.begin(), v.end()); m[\"k\"] = v; return (int)m.size(); }} }};\n"
                   f"int g{i}() {{ return T{i}<{i}>().f(); }}\n" for i in range(400))
         + 'extern "C" int u_answer() { return 42; }\n')


def switching(tmp: Path, rounds: int) -> None:
    import shutil

    tests = Path(__file__).resolve().parent.parent / "tests"
    made = subprocess.run([sys.executable, "-c", WORLD.replace("make_world(Path(sys.argv[2]))",
                                                               "make_world(Path(sys.argv[2]), variants=('cpu', 'cu126'))"),
                           str(tests), str(tmp / "world")], env=ENV, cwd=tmp, capture_output=True, text=True)
    if made.returncode != 0:
        print(f"switching: skipped ({made.stderr.strip()[-200:]})")
        return
    lock, home = made.stdout.split()
    cargo = shutil.which("cargo") or str(Path.home() / ".cargo" / "bin" / "cargo")
    env = {**ENV, "PATH": f"{Path(cargo).parent}:{ENV['PATH']}"}
    env.pop("CARGO_TARGET_DIR", None)
    ours, peer = [], []
    for r in range(rounds):
        crate = tmp / f"crate{r}"
        (crate / "src").mkdir(parents=True)
        (crate / "Cargo.toml").write_text('[package]\nname = "sw"\nversion = "0.1.0"\nedition = "2021"\n')
        (crate / "build.rs").write_text(SWITCH_BUILD_RS)
        (crate / "unity.cpp").write_text(f"// round {r}: a tree of its own, never a reused build\n{UNITY}")
        (crate / "src" / "main.rs").write_text('extern "C" { fn u_answer() -> i32; }\nfn main() { println!("{}", unsafe { u_answer() }); }\n')
        twin = tmp / f"twin{r}"
        shutil.copytree(crate, twin)

        def fdlenv(variant: str, crate: Path = crate) -> float:
            t0 = time.perf_counter()
            res = subprocess.run([sys.executable, "-m", "fdlenv", "build", "--libtorch", variant, "--lock", lock,
                            "--home", home, "--source", f"file://{crate}", "--source-build",
                            "cargo build --offline --release", "--source-bin", "target/release/sw", "--json"],
                           env=env, capture_output=True, text=True)
            if res.returncode != 0:
                raise SystemExit(f"fdlenv build failed: {res.stderr[-800:]}")
            took = time.perf_counter() - t0
            if not json.loads(res.stdout)["built"]:
                raise SystemExit("switching: fdlenv reused a build where the source changed")
            return took

        def plain(libtorch: str, twin: Path = twin) -> float:
            t0 = time.perf_counter()
            subprocess.run([cargo, "build", "--offline", "--release", "-q"], cwd=twin, check=True,
                           env={**env, "LIBTORCH_PATH": libtorch}, capture_output=True)
            return time.perf_counter() - t0

        fdlenv("cpu"), fdlenv("cu126")
        plain("/a"), plain("/b")
        for c in (crate, twin):
            (c / "src" / "main.rs").write_text((c / "src" / "main.rs").read_text() + "// edited\n")
        ours.append(fdlenv("cpu"))
        peer.append(plain("/a"))
    a, b = statistics.median(ours), statistics.median(peer)
    print(f"switch A -> B -> edit -> A, last build: fdlenv {a:.2f} s (a build tree per variant), "
          f"one shared target dir {b:.2f} s, ratio {a / b:.2f}")


if __name__ == "__main__":
    main()
