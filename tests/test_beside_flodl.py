"""Living beside flodl: its own libtorch installs and its active-libtorch rule.

A box where `fdl libtorch download` ran holds a real `precompiled/<dir>`, and
`.active` may name it, a flodl source build (`builds/<name>`), or a per-host
case file. Every command runs the real CLI in a child process; join runs
the real loop with join_standin.py as the training binary (no controller is
needed: the stand-in records its environment and exits).
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

import pytest
from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.join.spec import decode

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
ONE_GPU = '[{"vendor": "nvidia", "arch": "8.6"}]'


def _flodl_libtorch(libtorch: Path, label: str, payload: bytes = b"flodl's own") -> Path:
    """What flodl's downloader or source build leaves: real files, and `.arch`."""
    d = libtorch / label
    (d / "lib").mkdir(parents=True)
    (d / "lib" / "libtorch.so").write_bytes(payload)
    (d / "include").mkdir()
    (d / "include" / "torch.h").write_text("// flodl\n")
    (d / "build-version").write_text("2.10.0+cpu\n")
    (d / ".arch").write_text("cuda=none\ntorch=2.10.0\narchs=\nsource=precompiled\n")
    return d


def _tree(d: Path) -> dict:
    return {str(p.relative_to(d)): (p.read_bytes() if p.is_file() else os.readlink(p) if p.is_symlink() else None)
            for p in sorted(d.rglob("*"))}


@pytest.fixture
def box(tmp_path):
    w = make_world(tmp_path, variants=("cpu",))
    flodl = _flodl_libtorch(w.home.libtorch, "precompiled/cpu")
    (w.home.libtorch / ".active").write_text("precompiled/cpu\n")
    env = {"FLODL_HOME": str(w.home.root), "FLODL_TESTING_GPU_JSON": ONE_GPU, "HOME": str(tmp_path / "user")}
    (tmp_path / "user").mkdir()
    (tmp_path / "work").mkdir()
    return w, flodl, env


def _join(tmp_path, env, *flags, out="out"):
    res = fdlenv("join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe", *flags,
                 "--", STANDIN, str(tmp_path / out), "0", env=env, cwd=tmp_path / "work")
    assert res.returncode == 0, res.stderr
    agent = json.loads((tmp_path / out / "agent0.json").read_text())
    rank = json.loads((tmp_path / out / "rank0.json").read_text())
    return agent["env"], rank, decode(agent["env"]["FLODL_INTERNAL_AGENT_JSON"]), res


def test_a_join_without_libtorch_gives_the_agent_flodls_active_libtorch_and_its_label(box, tmp_path):
    w, flodl, env = box
    agent, rank, spec, res = _join(tmp_path, env)
    assert spec["libtorch"] == "precompiled/cpu"
    for e in (agent, rank):                   # the rank child inherits the same activation
        assert e["LIBTORCH_PATH"] == str(flodl) and e["FDL_GPU_FEATURE"] == ""
        assert e["LD_LIBRARY_PATH"].split(":")[0] == str(flodl / "lib")
    assert "flodl's own" in res.stderr


def test_realise_run_prepare_and_join_with_libtorch_cpu_never_touch_flodls_files(box, tmp_path):
    w, flodl, env = box
    before = _tree(flodl)
    lock = ["--libtorch", "cpu", "--lock", str(w.lock)]
    assert fdlenv("env", "realize", *lock, env=env).returncode == 0
    run = fdlenv("run", *lock, "sh", "-c", 'cat "$LIBTORCH_PATH/lib/libtorch.so"', env=env)
    assert run.returncode == 0 and run.stdout == "cpu-lib", run.stderr   # the locked env, not flodl's
    prep = fdlenv("prepare", *lock, "--json", env=env, cwd=tmp_path / "work")
    assert prep.returncode == 0, prep.stderr
    assert json.loads(prep.stdout)["libtorch"] == "precompiled/cpu"
    agent, _rank, spec, _ = _join(tmp_path, env, *lock)
    assert spec["libtorch"] == "precompiled/cpu"
    assert (Path(agent["LIBTORCH_PATH"]) / "lib" / "libtorch.so").read_bytes() == b"cpu-lib"
    assert _tree(flodl) == before and not flodl.is_symlink()
    pre = w.home.libtorch / "precompiled"
    assert sorted(os.listdir(pre)) == ["cpu", "cpu-fdlenv"]                      # no temp debris
    assert sorted(os.listdir(w.home.libtorch)) == [".active", "precompiled"]
    # `.active` keeps a form flodl reads: two levels, a name flodl classifies as cpu
    assert (w.home.libtorch / ".active").read_text() == "precompiled/cpu-fdlenv\n"
    assert os.readlink(pre / "cpu-fdlenv").startswith("../../envs/")


def test_a_flodl_source_build_is_activated_by_its_name(box, tmp_path):
    w, _flodl, env = box
    build = _flodl_libtorch(w.home.libtorch, "builds/sm90-sm120")
    (w.home.libtorch / ".active").write_text("builds/sm90-sm120\n")
    agent, _rank, spec, _ = _join(tmp_path, env)
    assert spec["libtorch"] == "builds/sm90-sm120"
    assert agent["LIBTORCH_PATH"] == str(build) and agent["FDL_GPU_FEATURE"] == "cuda"
    run = fdlenv("run", "printenv", "LIBTORCH_PATH", env=env)
    assert run.returncode == 0 and run.stdout.strip() == str(build), run.stderr


def test_an_amd_download_puts_the_host_rocm_lib_dir_first(box, tmp_path):
    w, _flodl, env = box
    rocm = _flodl_libtorch(w.home.libtorch, "precompiled/rocm71")
    (w.home.libtorch / ".active").write_text("precompiled/rocm71\n")
    host = tmp_path / "rocm"
    (host / "lib").mkdir(parents=True)
    (host / "lib" / "libamdhip64.so.7").write_text("")
    run = fdlenv("run", "sh", "-c", 'echo "$FDL_GPU_FEATURE|$LD_LIBRARY_PATH"', env={**env, "ROCM_PATH": str(host)})
    assert run.returncode == 0, run.stderr
    feature, ld = run.stdout.strip().split("|")
    assert feature == "rocm" and ld.split(":")[:2] == [str(host / "lib"), str(rocm / "lib")]


def test_fdl_libtorch_case_selects_its_pointer_and_a_missing_one_means_none(box, tmp_path):
    w, _flodl, env = box
    case = _flodl_libtorch(w.home.libtorch, "precompiled/cu128")
    (w.home.libtorch / ".active.a100").write_text("precompiled/cu128\n")
    run = fdlenv("run", "printenv", "LIBTORCH_PATH", env={**env, "FDL_LIBTORCH_CASE": "a100"})
    assert run.returncode == 0 and run.stdout.strip() == str(case), run.stderr
    missing = fdlenv("run", "true", env={**env, "FDL_LIBTORCH_CASE": "h100"})
    assert missing.returncode == 2                                     # no fallback to .active
    assert ".active.h100 does not exist" in missing.stderr and "none active" in missing.stderr


def test_a_project_roots_pointer_wins_over_the_home(box, tmp_path):
    w, _flodl, env = box
    project = tmp_path / "proj"
    (project / "src").mkdir(parents=True)
    (project / "Cargo.toml").write_text('[dependencies]\nflodl = "0.8"\n')
    own = _flodl_libtorch(project / "libtorch", "precompiled/cpu", payload=b"project")
    (project / "libtorch" / ".active").write_text("precompiled/cpu\n")
    run = fdlenv("run", "printenv", "LIBTORCH_PATH", env=env, cwd=project / "src")
    assert run.returncode == 0 and run.stdout.strip() == str(own), run.stderr
    elsewhere = fdlenv("run", "printenv", "LIBTORCH_PATH", env=env, cwd=tmp_path / "work")
    assert elsewhere.stdout.strip() == str(w.home.libtorch / "precompiled" / "cpu")


def test_an_active_pointer_without_lib_is_ignored_with_a_note(box, tmp_path):
    w, _flodl, env = box
    (w.home.libtorch / "builds" / "half").mkdir(parents=True)
    (w.home.libtorch / ".active").write_text("builds/half\n")
    res = fdlenv("run", "true", env=env)
    assert res.returncode == 2 and "builds/half has no lib/" in res.stderr


def test_the_label_is_one_rule_whether_chosen_or_carried_from_active(tmp_path):
    import json

    from helpers_store import fdlenv, make_world

    w = make_world(tmp_path)
    own = w.home.libtorch / "precompiled" / "cpu"          # flodl's own download, beside which fdlenv points
    (own / "lib").mkdir(parents=True)
    h = ("--home", str(w.home.root))
    assert fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), *h).returncode == 0
    assert (w.home.libtorch / ".active").read_text().strip() == "precompiled/cpu-fdlenv"
    chosen = json.loads(fdlenv("shell-hook", "--libtorch", "cpu", "--json", *h).stdout)["label"]
    carried = json.loads(fdlenv("shell-hook", "--json", *h).stdout)["label"]
    assert chosen == carried == "precompiled/cpu"
