"""The shipped ./conda-lock.yml: present, conda-lock's format, current with envs/, found by default.

It is written by `fdlenv lock --libtorch cu128` against the default pip index
(never by hand) and holds at least cu128: torch 2.10.0 and its CUDA 12.8
runtime wheels, index-relative. `fdlenv lock --check` is offline, so CI runs it.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections import defaultdict
from pathlib import Path

import pytest
import yaml

from fdlenv.index import pipindex
from fdlenv.lock.paths import shipped_lock
from fdlenv.names.variants import VARIANTS

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

ROOT = Path(__file__).resolve().parent.parent
SHIPPED = ROOT / "conda-lock.yml"


def test_shipped_lock_parses_with_conda_lock_and_holds_cu128():
    from conda_lock.lockfile import parse_conda_lock_file

    lf = parse_conda_lock_file(SHIPPED)
    cu128 = {p.name: p for p in lf.package if p.categories & {"main", "cu128"}}
    assert cu128["torch"].version == "2.10.0" and cu128["torch"].manager == "pip"
    assert {n for n in cu128 if n.startswith("nvidia-") and n.endswith("-cu12")} >= {
        "nvidia-cuda-runtime-cu12", "nvidia-cublas-cu12", "nvidia-cudnn-cu12", "nvidia-nccl-cu12"}
    for p in cu128.values():
        index, project, filename = pipindex.parse_entry_url(p.url)
        assert index == "pypi" and project == p.name and filename.endswith(".whl")


def test_shipped_lock_structure_and_invariant():
    doc = yaml.safe_load(SHIPPED.read_text())
    assert doc["version"] == 1
    assert set(doc["metadata"]["content_hash"]) == set(doc["metadata"]["platforms"])
    builds: dict[tuple[str, str, str], set[tuple[str, str]]] = defaultdict(set)
    categories = set()
    for e in doc["package"]:
        assert e["manager"] in ("conda", "pip")
        assert e["platform"] in doc["metadata"]["platforms"]
        assert e["hash"].get("sha256"), e["name"]
        if e["manager"] == "conda":
            assert e["hash"].get("md5"), e["name"]
        assert "://" not in e["url"].removeprefix(pipindex.SCHEME), "a lock entry names a host"
        categories.add(e.get("category", "main"))
        builds[(e["manager"], e["name"], e["platform"])].add((e["url"], str(e["hash"]["sha256"])))
    assert {k: v for k, v in builds.items() if len(v) > 1} == {}
    assert categories <= {"main", *VARIANTS}


def test_shipped_lock_is_current_with_the_env_files():
    for args in (["--variant", "cu128"], []):      # bare, in the checkout: the variants it lacks lock on demand
        res = subprocess.run([sys.executable, "-m", "fdlenv", "lock", "--check", *args],
                             cwd=ROOT, capture_output=True, text=True)
        assert res.returncode == 0, (args, res.stderr)


def test_the_shipped_lock_is_what_the_store_finds_by_default():
    found = shipped_lock()
    assert found is not None and found.read_bytes() == SHIPPED.read_bytes()


@pytest.mark.slow
def test_a_regular_install_carries_the_lock_the_env_files_and_the_example(tmp_path):
    """Not only a checkout: the wheel holds what the commands read at run time."""
    from helpers_install import fdlenv_wheel

    wheel = fdlenv_wheel(tmp_path / "dist")
    target = tmp_path / "site"
    subprocess.run([sys.executable, "-m", "pip", "install", "-q", "--no-deps", "--no-index", "--target",
                    str(target), str(wheel)], check=True, capture_output=True)
    empty = tmp_path / "empty"
    empty.mkdir()
    probe = ("from fdlenv.lock.paths import shipped_lock; from fdlenv.app.walkthrough import example_dir; "
             "from fdlenv.front.commands.lock import envs_dir; "
             "print(shipped_lock()); print(example_dir()); print(envs_dir(None))")
    out = subprocess.run([sys.executable, "-c", probe], cwd=empty, capture_output=True, text=True, check=True,
                         env={"PYTHONPATH": str(target), "PATH": "/usr/bin:/bin"}).stdout.split()
    lock, example, envs = map(Path, out)
    assert lock.is_relative_to(target) and lock.read_bytes() == SHIPPED.read_bytes()
    assert example.is_relative_to(target) and (example / "build.sh").is_file() and (example / "main.cpp").is_file()
    assert envs.is_relative_to(target) and (envs / "cu128.yml").read_bytes() == (ROOT / "envs/cu128.yml").read_bytes()


def test_auto_on_a_pascal_box_frozen_names_cu126_and_the_command_that_locks_it(tmp_path):
    gpu = json.dumps([{"vendor": "nvidia", "arch": "6.1", "vram_mb": 11000, "name": "GTX 1080 Ti"}])
    res = subprocess.run([sys.executable, "-m", "fdlenv", "env", "realize", "--libtorch", "auto", "--frozen",
                          "--home", str(tmp_path / "home")], cwd=tmp_path, capture_output=True, text=True,
                         env={**os.environ, "FLODL_TESTING_GPU_JSON": gpu})
    assert res.returncode == 2 and res.stderr.count("error:") == 1, res.stderr
    assert "cu126" in res.stderr and "fdlenv lock --libtorch cu126" in res.stderr
    assert not (tmp_path / "home" / "envs").exists()
