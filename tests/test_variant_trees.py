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

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from test_cuda_env import cargo, needs_cargo

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

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
    return {"home": home, "path": f"{Path(found).parent}:{os.environ['PATH']}"}


@pytest.fixture
def crate(tmp_path):
    crate = tmp_path / "crate"
    (crate / "src").mkdir(parents=True)
    (crate / "Cargo.toml").write_text(CARGO_TOML)
    (crate / "build.rs").write_text(BUILD_RS)
    (crate / "src" / "main.rs").write_text('fn main() { println!("shim"); }\n')
    return crate


def fdlenv_cli(cwd, *args, env=None):
    return subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True, cwd=cwd,
                          env={**os.environ, **(env or {})})


def build_in(world, variant, runs, cwd, env=None):
    env = {"PATH": world["path"], "RUNS_FILE": str(runs), **(env or {})}
    res = fdlenv_cli(cwd, "run", "--libtorch", variant, "--home", str(world["home"]),
                     "cargo", "build", "--offline", env=env)
    assert res.returncode == 0, res.stderr
    return res


def runs_of(runs: Path) -> list[str]:
    return runs.read_text().splitlines() if runs.exists() else []


@needs_cargo
def test_switching_cu126_cpu_cu126_cpu_under_run_cargo_build_runs_the_build_script_once_per_variant(world, crate, tmp_path):
    runs = tmp_path / "runs.txt"
    for variant in ("cu126", "cpu", "cu126", "cpu"):
        build_in(world, variant, runs, crate)
    print(f"build script runs over cu126 -> cpu -> cu126 -> cpu: {len(runs_of(runs))}")
    assert len(runs_of(runs)) == 2, runs_of(runs)
    assert len(set(runs_of(runs))) == 2   # one per variant's LIBTORCH_PATH
    assert (crate / "target/fdlenv-cu126/debug/shim").is_file() and (crate / "target/fdlenv-cpu/debug/shim").is_file()


@needs_cargo
def test_a_build_from_a_subdirectory_of_the_crate_uses_the_same_tree_at_the_crates_root(world, crate, tmp_path):
    runs = tmp_path / "runs.txt"
    build_in(world, "cpu", runs, crate)
    build_in(world, "cpu", runs, crate / "src")
    assert len(runs_of(runs)) == 1 and not (crate / "src" / "target").exists()


@needs_cargo
def test_a_member_crate_of_a_workspace_builds_in_the_workspaces_tree(world, crate, tmp_path):
    ws = tmp_path / "ws"
    ws.mkdir()
    (ws / "Cargo.toml").write_text('[workspace]\nmembers = ["crate"]\nresolver = "2"\n')
    crate.rename(ws / "crate")
    build_in(world, "cu126", tmp_path / "runs.txt", ws / "crate" / "src")
    assert (ws / "target/fdlenv-cu126/debug/shim").is_file() and not (ws / "crate" / "target").exists()


def printed(world, cwd, *args, env=None):
    res = fdlenv_cli(cwd, args[0], "--home", str(world["home"]), *args[1:], env=env)
    assert res.returncode == 0, res.stderr
    return res.stdout


@needs_cargo
def test_a_cargo_target_dir_of_the_users_own_is_left_as_it_is(world, crate):
    for _ in range(3):   # the slow path, then the memo's replay
        out = printed(world, crate, "run", "--libtorch", "cpu", "sh", "-c", 'echo "$CARGO_TARGET_DIR"',
                      env={"CARGO_TARGET_DIR": "/srv/mine"})
        assert out == "/srv/mine\n"
        hook = json.loads(printed(world, crate, "shell-hook", "--libtorch", "cpu", "--json",
                                  env={"CARGO_TARGET_DIR": "/srv/mine"}))
        assert "CARGO_TARGET_DIR" not in hook["environment_variables"]


@needs_cargo
@pytest.mark.parametrize("where", ["crate", "cargo home"])
def test_a_target_dir_in_cargos_config_is_the_users_choice_too(world, crate, tmp_path, where):
    conf = crate / ".cargo" / "config.toml" if where == "crate" else tmp_path / "cargo-home" / "config.toml"
    conf.parent.mkdir(parents=True)
    conf.write_text('[build]\ntarget-dir = "/srv/shared-target"\n')
    env = {"CARGO_HOME": str(tmp_path / "cargo-home")} if where == "cargo home" else None
    for _ in range(3):   # the slow path, then the memo's replay
        out = printed(world, crate / "src", "run", "--libtorch", "cpu", "sh", "-c", 'echo "${CARGO_TARGET_DIR-unset}"',
                      env=env)
        assert out == "unset\n"


@needs_cargo
def test_outside_any_crate_no_target_dir_is_set_and_the_variant_and_a_cmake_build_dir_are_named(world, tmp_path):
    (tmp_path / "elsewhere").mkdir()
    out = printed(world, tmp_path / "elsewhere", "run", "--libtorch", "cu126", "sh", "-c",
                  'echo "${CARGO_TARGET_DIR-unset} $FDLENV_VARIANT $FDLENV_BUILD_DIR"')
    assert out == f"unset cu126 {tmp_path / 'elsewhere' / 'build' / 'fdlenv-cu126'}\n"


@needs_cargo
def test_the_memos_replay_derives_the_tree_from_each_calls_own_crate(world, tmp_path):
    crates = []
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "Cargo.toml").write_text(CARGO_TOML.replace("shim", name))
        crates.append(tmp_path / name)
    probe = ("run", "--libtorch", "cpu", "sh", "-c", 'echo "$CARGO_TARGET_DIR"')
    for _ in range(3):
        assert printed(world, crates[0], *probe) == f"{crates[0]}/target/fdlenv-cpu\n"
    assert list((world["home"] / "cache" / "hot").glob("run-*"))   # the memo answers from here on
    assert printed(world, crates[1], *probe) == f"{crates[1]}/target/fdlenv-cpu\n"


@needs_cargo
def test_shell_hook_switches_the_tree_with_the_variant_and_deactivate_restores_the_users_value(world, crate):
    hook = f"{sys.executable} -m fdlenv shell-hook --home {world['home']}"
    script = (f'unset CARGO_TARGET_DIR; for v in cu126 cpu cu126; do eval "$({hook} --libtorch $v)"; echo "$CARGO_TARGET_DIR $FDLENV_VARIANT"; done; '
              f'eval "$({hook} --deactivate)"; echo "${{CARGO_TARGET_DIR-unset}} ${{FDLENV_VARIANT-unset}} ${{FDLENV_BUILD_DIR-unset}}"; '
              f'export CARGO_TARGET_DIR=/srv/before; eval "$({hook} --libtorch cpu)"; echo "$CARGO_TARGET_DIR"; '
              f'eval "$({hook} --deactivate)"; echo "$CARGO_TARGET_DIR"')
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True, cwd=crate)
    assert res.returncode == 0, res.stderr
    assert res.stdout.splitlines() == ["target/fdlenv-cu126 cu126", "target/fdlenv-cpu cpu",
                                       "target/fdlenv-cu126 cu126", "unset unset unset", "/srv/before", "/srv/before"]


@needs_cargo
def test_a_hook_from_bashrc_in_home_builds_each_crate_in_its_own_tree_after_cd(world, tmp_path):
    crates = []
    for name in ("a", "b"):
        (tmp_path / name / "src").mkdir(parents=True)
        (tmp_path / name / "Cargo.toml").write_text(CARGO_TOML.replace("shim", name).replace('build = "build.rs"\n', ""))
        (tmp_path / name / "src" / "main.rs").write_text('fn main() {}\n')
        crates.append(tmp_path / name)
    (tmp_path / "home").mkdir()
    hook = f"{sys.executable} -m fdlenv shell-hook --shell sh --home {world['home']} --libtorch cpu"
    script = (f'cd {tmp_path / "home"} && eval "$({hook})" && echo "$CARGO_TARGET_DIR $FDLENV_BUILD_DIR" && '
              f'for c in {crates[0]} {crates[1]}; do cd "$c" && cargo build --offline -q || exit 9; done')
    res = subprocess.run(["sh", "-c", script], capture_output=True, text=True,
                         env={**os.environ, "PATH": world["path"]})
    assert res.returncode == 0, res.stderr
    assert res.stdout.split() == ["target/fdlenv-cpu", "build/fdlenv-cpu"]
    for c in crates:
        assert (c / "target" / "fdlenv-cpu" / "debug" / c.name).is_file(), c
    assert not (tmp_path / "home" / "target").exists() and not (tmp_path / "home" / "build").exists()


@needs_cargo
def test_run_of_a_path_built_into_the_variants_tree_runs_it_and_names_where_it_is(world, crate, tmp_path):
    build_in(world, "cpu", tmp_path / "runs.txt", crate)
    assert not (crate / "target" / "debug" / "shim").exists()
    for _ in range(3):   # the slow path, then the memo's replay
        res = fdlenv_cli(crate, "run", "--libtorch", "cpu", "--home", str(world["home"]), "./target/debug/shim")
        assert res.returncode == 0 and res.stdout == "shim\n", res.stderr
        (line,) = res.stderr.splitlines()
        assert "./target/debug/shim is not there; running target/fdlenv-cpu/debug/shim" in line
    res = fdlenv_cli(crate, "run", "--libtorch", "cu126", "--home", str(world["home"]), "./target/release/shim")
    assert res.returncode == 127 and "searched the env's PATH" not in res.stderr
    assert "no such file: './target/release/shim'" in res.stderr and "fdlenv-cu126" in res.stderr
