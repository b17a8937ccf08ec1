"""The image bake and `auto` agree: `prepare --libtorch rocm7.1` bakes an env into a home, and
`auto` on an AMD box whose host ROCm is unknown uses it, under `--frozen`, with no index.

End to end, as a user runs it: fdlenv in child processes, the bake from the suite's loopback
index shaped like PyTorch's (`helpers_pytorch_index`), the AMD box spoofed through
FLODL_TESTING_GPU_JSON, and after the bake every index out of reach (a proxy that refuses
stands in for PyTorch's own; the loopback one must see no request).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from sshd import free_port

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
MI300X = json.dumps([{"vendor": "amd", "arch": "gfx942", "vram_mb": 196000, "name": "MI300X"}])
LINE = "auto: rocm7.1 (realised; routing would pick rocm7.0: host ROCm unknown)"


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


@pytest.fixture
def baked(tmp_path, index):
    """A home with rocm7.1 baked in by the README's bake, and the environment of the AMD box
    it then boots on: no host ROCm, no index reachable."""
    (tmp_path / "work").mkdir()
    home = tmp_path / "home"
    bake = fdlenv(tmp_path, {"FLODL_TESTING_GPU_JSON": "[]"}, "prepare", "--libtorch", "rocm7.1",
                  "--mirror", f"pytorch={index.url}", "--home", str(home))
    assert bake.returncode == 0, bake.stderr
    proxy = f"http://127.0.0.1:{free_port()}"
    box = {"FLODL_TESTING_GPU_JSON": MI300X, "FLODL_HOME": str(home), "https_proxy": proxy,
           "HTTPS_PROXY": proxy, "http_proxy": proxy, "HTTP_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""}
    return tmp_path, home, box, len(index.requests)


def fdlenv(tmp_path: Path, env: dict, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True,
                          cwd=tmp_path / "work", env={**os.environ, **env}, timeout=300)


def test_detect_on_the_baked_amd_box_says_auto_uses_the_realised_rocm71_and_why(baked, index):
    tmp_path, _home, box, before = baked
    human = fdlenv(tmp_path, box, "detect")
    assert human.returncode == 0, human.stderr
    assert LINE in human.stdout.splitlines()
    assert "runnable here: rocm7.0, rocm7.1; realised in the home: rocm7.1" in human.stdout
    doc = json.loads(fdlenv(tmp_path, box, "detect", "--json").stdout)["auto"]
    assert (doc["variant"], doc["candidates"], doc["realised"]) == ("rocm7.1", ["rocm7.0", "rocm7.1"], ["rocm7.1"])
    assert doc["routing"]["variant"] == "rocm7.0" and "unknown" in doc["routing"]["reason"]
    assert len(index.requests) == before


def test_prepare_and_join_auto_frozen_on_the_baked_amd_box_use_rocm71_with_no_index_request(baked, index):
    tmp_path, home, box, before = baked
    prep = fdlenv(tmp_path, box, "prepare", "--libtorch", "auto", "--frozen", "--json")
    assert prep.returncode == 0, prep.stderr
    out = json.loads(prep.stdout)
    assert out["variant"] == "rocm7.1" and out["notes"][0] == LINE and f"fdlenv prepare: {LINE}" in prep.stderr
    assert out["auto"]["variant"] == "rocm7.1" and out["auto"]["routing"]["variant"] == "rocm7.0"
    join = fdlenv(tmp_path, box, "join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe",
                  "--libtorch", "auto", "--frozen", "--", STANDIN, str(tmp_path / "out"), "0")
    assert join.returncode == 0, join.stderr
    assert f"fdlenv join: {LINE}" in join.stderr
    agent = json.loads((tmp_path / "out" / "agent0.json").read_text())["env"]
    assert (Path(agent["LIBTORCH_PATH"]) / "lib/libamdhip64.so").read_text() == "hip rocm7.1"
    assert not (home / "lockfiles" / "rocm7.0.conda-lock.yml").exists() and len(index.requests) == before


def test_frozen_never_changes_the_rule_without_it_auto_uses_the_realised_rocm71_too(baked, index):
    tmp_path, _home, box, before = baked
    prep = fdlenv(tmp_path, box, "prepare", "--libtorch", "auto", "--json")
    assert prep.returncode == 0, prep.stderr
    assert json.loads(prep.stdout)["variant"] == "rocm7.1" and len(index.requests) == before


def test_run_auto_follows_a_variant_realised_after_it_answered(baked, index):
    """`run --libtorch auto` is not replayed from a memo: once routing's own rocm7.0 is realised
    beside the baked rocm7.1, the next run uses rocm7.0."""
    tmp_path, home, box, _before = baked
    show = ("run", "--libtorch", "auto", "sh", "-c", 'cat "$LIBTORCH_PATH/lib/libamdhip64.so"')
    for _ in range(2):   # a memo, were there one, would be written by the second call
        res = fdlenv(tmp_path, box, *show)
        assert (res.returncode, res.stdout) == (0, "hip rocm7.1"), res.stderr
    got = fdlenv(tmp_path, {"FLODL_HOME": str(home)}, "env", "realize", "--libtorch", "rocm7.0",
                 "--mirror", f"pytorch={index.url}")
    assert got.returncode == 0, got.stderr
    res = fdlenv(tmp_path, box, *show)
    assert (res.returncode, res.stdout) == (0, "hip rocm7.0"), res.stderr
