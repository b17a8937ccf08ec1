"""The content-keyed build: recipe env, failure classes, reuse, racing prepares."""

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.source import build, toolkit
from fdlenv.source.build import Recipe, build_key, resolve
from fdlenv.source.manifest import RunManifest

from helpers_source import environ_for, fake_env, write_tree

# Writes what the recipe saw into the artifact and counts its runs.
RECIPE = ('echo run >> "$COUNT" && mkdir -p target/release && '
          'printf "%s|%s|%s" "$LIBTORCH_PATH" "$FDL_TEST_ACTIVATED" "$PWD" > target/release/train && '
          'echo compiling-on-stdout')


def setup(tmp_path, recipe=RECIPE, cwd="", bin="target/release/train", variant="cpu", files=None):
    home = Home(tmp_path / "home")
    tree = write_tree(tmp_path / "tree", files or {"src/main.rs": "fn main(){}\n", "app/main.rs": "x"})
    env = fake_env(tmp_path, variant)
    environ = environ_for(env, COUNT=str(tmp_path / "count"))
    return home, tree, env, environ, Recipe(recipe, cwd, bin, False)


def tools(home, environ) -> str:
    from fdlenv.source.toolchain import identity
    return identity(environ, home.cache / "toolchain.json")


def runs(tmp_path) -> int:
    p = tmp_path / "count"
    return len(p.read_text().splitlines()) if p.exists() else 0


def test_the_env_reaches_the_recipe_and_the_binary_is_returned(tmp_path, capfd):
    home, tree, env, environ, recipe = setup(tmp_path)
    b = build.build(home, tree, "d" * 64, env, environ, recipe)
    assert b.built and b.cwd == tree and b.key == build_key("d" * 64, env.key, recipe, tools(home, environ))
    assert b.bin == home.builds / b.key / "train"
    assert b.bin.read_text() == f"{env.libtorch_root}|from-{env.key[:8]}|{tree}"
    out, err = capfd.readouterr()
    assert out == "" and "compiling-on-stdout" in err  # stdout stays clean for --json
    assert json.loads((home.builds / b.key / build.META).read_text())["recipe"] == RECIPE


def test_an_unchanged_key_reuses_the_artifact_without_running_the_recipe(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path)
    first = build.build(home, tree, "d" * 64, env, environ, recipe)
    again = build.build(home, tree, "d" * 64, env, environ, recipe)
    assert (again.bin, again.built, runs(tmp_path)) == (first.bin, False, 1)
    other = build.build(home, tree, "e" * 64, env, environ, recipe)  # the tree changed
    assert other.built and other.key != first.key and runs(tmp_path) == 2


def test_every_input_moves_the_key():
    r = Recipe("make", "app", "bin/x", False)
    base = build_key("t", "e", r)
    variants = [build_key("t2", "e", r), build_key("t", "e2", r),
                build_key("t", "e", Recipe("make -j", "app", "bin/x", False)),
                build_key("t", "e", Recipe("make", "app2", "bin/x", False)),
                build_key("t", "e", Recipe("make", "app", "bin/y", False))]
    assert len({base, *variants}) == 6 and all(len(k) == 64 for k in variants)


def test_the_recipe_runs_in_the_cwd_inside_the_tree(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, cwd="app")
    b = build.build(home, tree, "d" * 64, env, environ, recipe)
    assert b.cwd == tree / "app" and b.bin.read_text().endswith(f"|{tree}/app")
    assert (tree / "app/target/release/train").is_file()  # built in place: cargo stays incremental


@pytest.mark.parametrize("cwd", ["../", "app/../..", "/tmp", "missing"])
def test_a_cwd_outside_the_fetched_tree_is_permanent(tmp_path, cwd):
    home, tree, env, environ, recipe = setup(tmp_path, cwd=cwd)
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert not e.value.transient and "names no directory" in e.value.message and runs(tmp_path) == 0


def test_a_build_that_fails_is_transient_so_the_fleet_survives_a_typo(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, recipe="echo oops >&2; exit 3")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert e.value.transient and "exit 3" in e.value.message and "next dial" in e.value.message
    assert not list(home.builds.iterdir())


def test_a_build_that_produces_nothing_at_bin_is_permanent(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, recipe="true")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert not e.value.transient and "target/release/<name>" in e.value.message
    assert not list(home.builds.iterdir())


@pytest.mark.parametrize("bin", ["../secret", "/etc/passwd", "app/../../secret", "link-out"])
def test_a_bin_outside_the_tree_is_refused_before_the_recipe_runs(tmp_path, bin):
    (tmp_path / "secret").write_text("s")
    home, tree, env, environ, recipe = setup(tmp_path, recipe=f'echo ran > "{tmp_path}/ran"', bin=bin)
    (tree / "link-out").symlink_to(tmp_path / "secret")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert not e.value.transient and "bin" in e.value.message
    assert not (tmp_path / "ran").exists() and not (home.builds.exists() and list(home.builds.iterdir()))


@pytest.mark.optional   # a host with every CUDA header installed cannot show the gap
def test_a_failed_gpu_build_without_toolkit_headers_is_permanent(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, recipe="exit 1", variant="cu128")
    environ.update(CUDA_HOME=str(tmp_path / "no-cuda"), CXX="false")
    missing = toolkit.missing_headers("nvidia", [tmp_path / "no-cuda/include", env.path / "include"], environ)
    if not missing:
        pytest.skip("this host has every CUDA header in /usr/include")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert not e.value.transient
    assert all(h in e.value.message for h in missing) and "cuda-toolkit" in e.value.message
    assert str(tmp_path / "no-cuda") in e.value.message


def test_a_failed_gpu_build_with_the_headers_in_the_env_stays_transient(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, recipe="exit 1", variant="rocm7.1")
    environ.update(ROCM_PATH=str(tmp_path / "no-rocm"), CXX="false")
    write_tree(env.path / "include", {h: "" for h in toolkit.ROCM_HEADERS})
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert e.value.transient


def test_a_failed_cpu_build_never_upgrades(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path, recipe="exit 1", variant="cpu")
    environ.update(CUDA_HOME=str(tmp_path / "none"), CXX="false")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, recipe)
    assert e.value.transient


def test_the_compiler_answers_for_headers_the_path_scan_cannot_see(tmp_path):
    inc = write_tree(tmp_path / "inc", {"cuda_runtime.h": ""})
    wrapper = tmp_path / "cxx"
    wrapper.write_text(f"#!/bin/sh\nexec c++ -I{tmp_path}/hidden \"$@\"\n")
    wrapper.chmod(0o755)
    write_tree(tmp_path / "hidden", {"nccl.h": ""})
    environ = dict(os.environ, CXX=str(wrapper))
    missing = toolkit.missing_headers("nvidia", [inc], environ)
    assert "cuda_runtime.h" not in missing and "nccl.h" not in missing
    assert missing.get("cublas_v2.h", "cuda-toolkit") == "cuda-toolkit"


def test_install_hints_speak_the_platforms_manager():
    pkgs = ["hip-dev", "hipblas-common-dev", "g++"]
    assert toolkit.install_hint(pkgs, {"ID": "ubuntu", "ID_LIKE": "debian"}) == \
        "install with: apt-get install hip-dev hipblas-common-dev g++"
    assert toolkit.install_hint(pkgs, {"ID": "rocky", "ID_LIKE": "rhel centos fedora"}) == \
        "install with: dnf install hip-devel hipblas-common-devel gcc-c++"
    assert "package manager" in toolkit.install_hint(["rsync"], {"ID": "arch"})
    assert toolkit.install_hint([], {"ID": "debian"}) == ""


def test_the_default_recipe_without_cargo_is_permanent(tmp_path):
    home, tree, env, environ, _ = setup(tmp_path)
    environ["PATH"] = str(tmp_path / "empty-bin")
    with pytest.raises(Fail) as e:
        build.build(home, tree, "d" * 64, env, environ, resolve(None, bin="target/release/train"))
    assert not e.value.transient and "rustup" in e.value.message


def test_a_published_manifest_outranks_the_boxs_own_recipe():
    m = RunManifest(bin="target/release/a", cwd="app", build=None)
    r = resolve(m, cwd="other", build="make", bin="b")
    assert r == Recipe("make", "app", "target/release/a", False)
    assert resolve(RunManifest(bin="x"), cwd="c") == Recipe(build.DEFAULT_RECIPE, "c", "x", True)
    assert resolve(None, cwd="/app/", build="make", bin="b") == Recipe("make", "app", "b", False)


def test_no_manifest_and_no_local_artifact_waits_rather_than_stopping():
    with pytest.raises(Fail) as e:
        resolve(None, cwd="app", build="make")
    assert e.value.transient and "--source-bin" in e.value.message


def test_a_killed_builds_debris_is_cleared(tmp_path):
    home, tree, env, environ, recipe = setup(tmp_path)
    key = build_key("d" * 64, env.key, recipe, tools(home, environ))
    write_tree(home.builds / f".staging-{key}-99999", {"train": "half"})
    write_tree(home.builds / key, {"unrelated": "the artifact is gone"})
    b = build.build(home, tree, "d" * 64, env, environ, recipe)
    assert b.built and not list(home.builds.glob(".staging-*")) and b.bin.is_file()
    assert not (home.builds / key / "unrelated").exists()


RACER = textwrap.dedent("""
    import json, os, sys
    from pathlib import Path
    sys.path.insert(0, sys.argv[3])
    from helpers_source import fake_env, environ_for
    from fdlenv.names.home import Home
    from fdlenv.source import build
    tmp = Path(sys.argv[1])
    env = fake_env(tmp)
    recipe = build.Recipe(sys.argv[2], "", "target/release/train", False)
    b = build.build(Home(tmp / "home"), tmp / "tree", "d" * 64, env,
                    environ_for(env, COUNT=str(tmp / "count")), recipe)
    print(json.dumps({"bin": str(b.bin), "built": b.built}))
""")


@pytest.mark.slow
def test_two_prepares_racing_on_one_key_build_once(tmp_path):
    """Barriers: the first racer's recipe stops at a fifo while it holds the build; the second
    is let go only once it says it waits; then the first finishes."""
    setup(tmp_path)
    started, go = tmp_path / "started", tmp_path / "go"
    os.mkfifo(started)
    os.mkfifo(go)
    held = f'echo building > "{started}"; read x < "{go}"; ' + RECIPE
    tests_dir = str(Path(__file__).parent)

    def racer():
        return subprocess.Popen([sys.executable, "-c", RACER, str(tmp_path), held, tests_dir],
                                stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    procs = [racer()]
    try:
        with open(started) as f:
            assert f.readline().strip() == "building"     # the first holds the build lock
        procs.append(racer())
        while "waiting for" not in (line := procs[1].stderr.readline()):   # the second waits
            assert line, procs[1].communicate()
        with open(go, "w") as f:
            f.write("go\n")
        outs = [p.communicate(timeout=60) for p in procs]
        outs[1] = (outs[1][0], line + outs[1][1])
    finally:
        for p in procs:
            if p.poll() is None:
                p.kill()
    assert all(p.returncode == 0 for p in procs), outs
    results = [json.loads(o) for o, _ in outs]
    assert runs(tmp_path) == 1
    assert results[0]["bin"] == results[1]["bin"]
    assert sorted(r["built"] for r in results) == [False, True]
    waiter_err = next(e for (o, e), r in zip(outs, results, strict=True) if not r["built"])
    assert "waiting for" in waiter_err  # the waiter says so while the other builds
