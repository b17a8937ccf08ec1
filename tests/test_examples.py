"""The examples a user copies: examples/fdl.yml loads as is, and examples/bake/bake.sh bakes an
image on a machine with no GPU (run here against a small real lock, fdlenv already installed)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from helpers_store import make_world

from fdlenv.config.load import load_project

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"


def test_the_example_fdl_yml_loads_and_names_every_block(tmp_path, monkeypatch):
    shutil.copy(EXAMPLES / "fdl.yml", tmp_path / "fdl.yml")
    monkeypatch.chdir(tmp_path)
    project = load_project()
    assert project is not None and project.join is not None
    assert project.join.libtorch == "auto" and project.join.source is not None
    # no lock is named: the locks beside it, the home's and the shipped one compose (docs/LOCK.md),
    # so a box cloud-init wrote nothing more than this file to still prepares
    assert project.fdlenv.lock is None and project.fdlenv.frozen is None


def test_the_bake_script_prepares_every_variant_without_a_gpu_and_bakes_no_token(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu126"))
    project = tmp_path / "project"
    project.mkdir()
    example = yaml.safe_load((EXAMPLES / "fdl.yml").read_text())
    example["join"].pop("source")                 # no git server here: the binary comes from elsewhere
    example["fdlenv"] = {"lock": str(w.lock)}
    example["join"]["data_path"] = str(tmp_path / "datasets")   # a root that exists on this box
    (tmp_path / "datasets").mkdir()
    (project / "fdl.yml").write_text(yaml.safe_dump(example))
    fdlenv = tmp_path / "bin" / "fdlenv"          # the already installed fdlenv the script uses
    fdlenv.parent.mkdir()
    fdlenv.write_text(f"#!/bin/sh\nexec {sys.executable} -m fdlenv \"$@\"\n")
    fdlenv.chmod(0o755)
    units = tmp_path / "units"
    units.mkdir()
    home = tmp_path / "baked-home"
    env = {**os.environ, "PROJECT": str(project), "FLODL_HOME": str(home), "VARIANTS": "cpu cu126",
           "WORKER_USER": "root", "FDLENV": str(fdlenv), "UNIT_DIR": str(units),
           "FLODL_TESTING_GPU_JSON": "[]"}             # a build machine with no GPU at all
    res = subprocess.run(["sh", str(EXAMPLES / "bake" / "bake.sh")], env=env, capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    for v in ("cpu", "cu126"):
        out = json.loads((home / f"prepare-{v}.json").read_text())
        assert out["variant"] == v and Path(out["env"]["path"]).parent == home / "envs"
    unit = (units / "fdlenv-join.service").read_text()
    assert "LoadCredential=" in unit and f"FLODL_HOME={home}" in unit and str(fdlenv) in unit
    assert "--token " not in unit


def test_the_bake_scripts_default_covers_every_variant_auto_may_pick():
    import re

    from fdlenv.hw.model import Device, Survey
    from fdlenv.hw.routing import route
    from fdlenv.names.variants import VARIANTS

    default = re.search(r'VARIANTS=\$\{VARIANTS:-"([^"]+)"\}', (EXAMPLES / "bake" / "bake.sh").read_text())
    assert default is not None
    # an AMD box whose host ROCm is unknown: auto's pick must be among the baked ones
    amd = route(Survey(devices=(Device("amd", 0, "MI300X", "gfx942", 196000),), findings=(),
                       driver_cuda=None, host_rocm=None))
    assert amd.variant == "rocm7.0" and set(default.group(1).split()) == set(VARIANTS) - {"cu130"}
    # cu130 is never routing's first choice (baked, it wins as what the box has): not in the default
    h100 = Survey(devices=(Device("nvidia", 0, "H100", "9.0", 81000),), findings=(), driver_cuda="13.0", host_rocm=None)
    assert route(h100).variant == "cu128" and "cu130" in route(h100).candidates
