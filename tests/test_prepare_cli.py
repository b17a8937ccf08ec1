"""`fdlenv prepare` as a user runs it: JSON, exit codes, notes, fdl.yml, the re-dial's imports."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest
from helpers_source import wait_out_racy_window, write_tree
from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.source import manifest
from fdlenv.store import health
from fdlenv.source.manifest import RunManifest

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

RECIPE = ('mkdir -p target/release && '
          'printf "%s|%s" "$LIBTORCH_PATH" "$FDL_GPU_FEATURE" > target/release/train')
HEAVY = ("rattler", "conda_lock", "yaml", "filelock", "git", "paramiko", "pynvml", "amdsmi")


@pytest.fixture(scope="module")
def world(tmp_path_factory):
    return make_world(tmp_path_factory.mktemp("world"), variants=("cpu", "rocm7.1"))


@pytest.fixture
def box(tmp_path):
    """A CPU-only box: its own HOME, temp dir, fdlenv home and an empty spoofed survey."""
    (tmp_path / "user").mkdir()
    (tmp_path / "tmp").mkdir()
    (tmp_path / "work").mkdir()
    return {"HOME": str(tmp_path / "user"), "TMPDIR": str(tmp_path / "tmp"), "FLODL_HOME": str(tmp_path / "home"),
            "FLODL_TESTING_GPU_JSON": "[]"}


def prepare(box, tmp_path, *args):
    return fdlenv("prepare", *args, env=box, cwd=tmp_path / "work")


def published(tmp_path) -> Path:
    src = write_tree(tmp_path / "src", {"src/main.rs": "fn main() {}\n"})
    (src / ".fdl-run.yml").write_text(manifest.dump(RunManifest(bin="target/release/train", build=RECIPE,
                                                                run="ab" * 16, args=("--x",))))
    return src


def test_json_is_prepared_and_a_given_bin_is_made_absolute(world, box, tmp_path):
    (tmp_path / "work" / "train").write_text("#!/bin/sh\n")
    res = prepare(box, tmp_path, "--libtorch", "cpu", "--lock", str(world.lock), "--bin", "train", "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert list(out) == ["schema", "variant", "libtorch", "env", "bin", "cwd", "data_path", "args", "run_id", "notes",
                         "auto", "seconds"]
    assert out["auto"] is None                                   # no `--libtorch auto`
    assert out["variant"] == "cpu" and out["bin"] == str(tmp_path / "work" / "train")
    assert set(out["env"]) == {"key", "path", "libtorch_root"} and Path(out["env"]["libtorch_root"], "lib").is_dir()
    assert out["cwd"] is None and out["data_path"] is None and out["args"] is None and out["run_id"] is None
    assert (tmp_path / "user" / ".flodl" / "data").is_dir()
    assert "fdlenv prepare: libtorch: precompiled/cpu at" in res.stderr
    assert all(f"fdlenv prepare: {n}" in res.stderr for n in out["notes"])


def test_the_rocm71_env_is_baked_and_built_on_a_cpu_only_builder(world, box, tmp_path):
    src = published(tmp_path)
    res = prepare(box, tmp_path, "--libtorch", "rocm7.1", "--lock", str(world.lock), "--source", f"file://{src}",
                  "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["variant"] == "rocm7.1" and out["run_id"] == "ab" * 16 and out["args"] == ["--x"]
    assert Path(out["bin"]).read_text() == f"{out['env']['libtorch_root']}|rocm"
    assert (tmp_path / "home" / "libtorch" / ".active").read_text() == "precompiled/rocm71\n"


def test_the_gpu_gate_runs_only_with_the_flag(world, box, tmp_path):
    res = prepare(box, tmp_path, "--gpu-gate")
    assert res.returncode == 2 and "error: no GPUs detected" in res.stderr
    res = fdlenv("prepare", "--gpu-gate", "--json", cwd=tmp_path / "work",
                 env={**box, "FLODL_TESTING_GPU_JSON": '[{"vendor": "amd", "arch": "gfx90a"}]'})
    assert res.returncode == 0 and json.loads(res.stdout)["variant"] is None


def test_notes_print_before_the_error_and_a_waiting_source_exits_1(world, box, tmp_path):
    src = write_tree(tmp_path / "src", {"main.rs": "x"})
    res = fdlenv("prepare", "--libtorch", "cpu", "--lock", str(world.lock), "--source", f"file://{src}",
                 cwd=tmp_path / "work", env={**box, "HOME": ""})
    assert res.returncode == 1, res.stderr
    lines = res.stderr.splitlines()
    note = next(i for i, ln in enumerate(lines) if ln.startswith("fdlenv prepare: HOME is unset"))
    err = next(i for i, ln in enumerate(lines) if ln.startswith("error:"))
    assert note < err and "fdl publish" in lines[err]
    assert any(ln.startswith("fdlenv prepare: source: copied") for ln in lines[:err])


def test_the_arch_gate_refuses_an_offered_card_the_variant_cannot_serve(world, box, tmp_path):
    first = prepare(box, tmp_path, "--libtorch", "rocm7.1", "--lock", str(world.lock), "--json")
    root = Path(json.loads(first.stdout)["env"]["libtorch_root"])
    arch = (root / ".arch").read_text()
    (root / ".arch").unlink()        # the env is immutable: replace the file, keep the hard-linked original
    (root / ".arch").write_text(arch.replace("archs=", "archs=gfx90a"))
    health.record(Path(json.loads(first.stdout)["env"]["path"]))   # as a realise of such a variant records it
    cards = [{"vendor": "amd", "arch": "gfx90a"}, {"vendor": "amd", "arch": "gfx942"}]
    spoof = {**box, "FLODL_TESTING_GPU_JSON": json.dumps(cards)}
    args = ("prepare", "--libtorch", "rocm7.1", "--lock", str(world.lock))
    res = fdlenv(*args, cwd=tmp_path / "work", env=spoof)
    assert res.returncode == 2 and "no kernel image is available for amd 1" in res.stderr
    assert fdlenv(*args, "--devices", "0", cwd=tmp_path / "work", env=spoof).returncode == 0


def test_the_join_block_of_fdl_yml_is_read_and_flags_win(world, box, tmp_path):
    (tmp_path / "work" / "data").mkdir()
    (tmp_path / "work" / "fdl.yml").write_text(textwrap.dedent(f"""\
        join:
          libtorch: rocm7.1
          data_path: data
          controller: ctrl:1337
        fdlenv:
          lock: {world.lock}
        """))
    res = prepare(box, tmp_path, "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["variant"] == "rocm7.1" and out["data_path"] == str(tmp_path / "work" / "data")
    res = prepare(box, tmp_path, "--libtorch", "cpu", "--json")
    assert json.loads(res.stdout)["variant"] == "cpu"


@pytest.mark.parametrize("args,why", [
    (("--source", "file://relative"), "source:"),
    (("--", "--epochs", "1"), "no arguments after `--`"),
    (("--libtorch", "cu99"), "unknown variant"),
    (("--identity", "/k"), "--identity needs an ssh hop"),
])
def test_bad_input_exits_2(box, tmp_path, args, why):
    res = prepare(box, tmp_path, *args)
    assert res.returncode == 2 and why in res.stderr and not (tmp_path / "home" / "envs").exists()


REDIAL = """
import json, sys
from fdlenv.front import cli
code = cli.main(sys.argv[1:])
heavy = sorted(m for m in {heavy!r} if m in sys.modules)
print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
"""


@pytest.mark.slow   # the source case waits out the 2 s racy window
@pytest.mark.parametrize("kind", ["bin", "source"])
def test_a_redial_with_nothing_changed_imports_nothing_heavy(world, box, tmp_path, kind):
    (tmp_path / "work" / "train").write_text("#!/bin/sh\n")
    what = ["--bin", "train"] if kind == "bin" else ["--source", f"file://{published(tmp_path)}"]
    argv = ["prepare", "--libtorch", "cpu", "--lock", str(world.lock), *what]
    assert prepare(box, tmp_path, *argv[1:]).returncode == 0
    if kind == "source":
        # Past the racy window of the per-file and manifest caches (as any real
        # re-dial is), then once more to fill them.
        wait_out_racy_window(time.time_ns())
        assert prepare(box, tmp_path, *argv[1:]).returncode == 0
    res = subprocess.run([sys.executable, "-c", REDIAL.format(heavy=HEAVY), *argv], capture_output=True, text=True,
                         cwd=tmp_path / "work", env={**os.environ, **box})
    report = json.loads(res.stderr.splitlines()[-1])
    assert report == {"code": 0, "heavy": []}, res.stderr
