"""A build tree per variant under `fdlenv run` and `shell-hook`, as `fdlenv build` keeps one.

A real cargo crate with no dependencies (crates.io is not reachable) whose
build script says `cargo:rerun-if-env-changed=LIBTORCH_PATH`, as flodl-sys's
does, and appends a line to a counter file each time it runs; two envs (cpu and
cu126) realised from the suite's loopback index laid out like PyTorch's. Then
`fdlenv run --libtorch V cargo build` alternates the variants: each variant
keeps its own `target/fdlenv-<variant>` at the crate's root, so the script runs
once per variant, not on every switch, also from a subdirectory of the crate.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from test_cuda_env import cargo, needs_cargo

CARGO_TOML = '[package]\nname = "shim"\nversion = "0.1.0"\nedition = "2021"\nbuild = "build.rs"\n'
BUILD_RS = r'''
use std::io::Write;
fn main() {
    let runs = std::env::var("RUNS_FILE").expect("RUNS_FILE");
    let torch = std::env::var("LIBTORCH_PATH").unwrap_or_default();
    let mut f = std::fs::OpenOptions::new().create(true).append(true).open(runs).unwrap();
    writeln!(f, "{}", torch).unwrap();
    println!("cargo:rerun-if-env-changed=LIBTORCH_PATH");
    println!("cargo:rerun-if-changed=build.rs");
}
'''


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    found = cargo()
    if found is None:
        pytest.skip("needs a working cargo")
    tmp = tmp_path_factory.mktemp("trees")
    home = tmp / "home"
    with serve(tmp) as idx:
        for v in ("cpu", "cu126"):
            res = fdlenv_cli(tmp, "env", "realize", "--libtorch", v, "--mirror", f"pytorch={idx.url}",
                             "--mirror", f"pypi={idx.simple}", "--home", str(home), "--json")
            assert res.returncode == 0, res.stderr
    crate = tmp / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(CARGO_TOML)
    (crate / "build.rs").write_text(BUILD_RS)
    (crate / "src" / "main.rs").write_text('fn main() { println!("shim"); }\n')
    return {"home": home, "crate": crate, "path": f"{Path(found).parent}:{os.environ['PATH']}"}


def fdlenv_cli(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


def build_in(world, variant, runs, cwd=None, env=None):
    env = {"PATH": world["path"], "RUNS_FILE": str(runs), **(env or {})}
    env = {k: v for k, v in env.items() if v is not None}
    res = fdlenv_cli(cwd or world["crate"], "run", "--libtorch", variant, "--home", str(world["home"]),
                     "cargo", "build", "--offline", env=env)
    assert res.returncode == 0, res.stderr
    return res


def runs_of(runs: Path) -> list[str]:
    return runs.read_text().splitlines() if runs.exists() else []


@needs_cargo
def test_switching_cu126_cpu_cu126_cpu_under_run_cargo_build_runs_the_build_script_once_per_variant(world, tmp_path):
    runs = tmp_path / "runs.txt"
    for variant in ("cu126", "cpu", "cu126", "cpu"):
        build_in(world, variant, runs)
    print(f"build script runs over cu126 -> cpu -> cu126 -> cpu: {len(runs_of(runs))}")
    assert len(runs_of(runs)) == 2, runs_of(runs)
    assert len(set(runs_of(runs))) == 2   # one per variant's LIBTORCH_PATH
