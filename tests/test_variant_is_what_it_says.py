"""A variant is what it says: a `cpu` index that serves a CUDA torch is refused at lock and at realise.

`--mirror pytorch/cpu=` points at the suite's loopback index laid out like
PyTorch's, at its cu126 folder (a CUDA torch: `+cu126`, `nvidia-*-cu12`
requirements), or at an index whose plain `torch` ships `libtorch_cuda.so`
(seen only in the wheel's member list: at lock when the index has no PEP 658
file and the wheel's zip directory is read, else at realise once it is
extracted). Every refusal is exit 2, one error line naming the mapping that
served the torch, and leaves no lock and no env. The lock a realise refuses
comes from a real solve, fdlenv's own resolver and writer with the check off
(`lock.ondemand.write(check=False)`), never hand-written.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from helpers_conda import make_wheel
from helpers_pytorch_index import PYDEPS, TORCH, Index, _torch_files, build, lay_out, serve
from helpers_cli import fdlenv

from fdlenv.names.home import Home
from fdlenv.lock.ondemand import _env_file, write
from fdlenv.lock.file import read_variant

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pytorch")) as idx:
        yield idx


def hidden_cuda_index(root: Path, metadata: bool) -> Index:
    """PyTorch's layout, whose cpu torch is plain `2.10.0` with no nvidia requirement but ships
    `libtorch_cuda.so`: only its member list tells."""
    wheels = build(root)
    wheels["cpu"] = [make_wheel(root / "build" / "hidden", "torch", "2.10.0",
                                _torch_files("cpu", {"lib/libtorch_cuda.so": "cuda"}), tag=TORCH, requires=PYDEPS)]
    lay_out(root, wheels, metadata)
    return Index(root)


def refused(res, mapping: str) -> str:
    assert res.returncode == 2, res.stderr
    assert res.stderr.count("error:") == 1
    error = json.loads(res.stdout)["error"]
    assert f"--mirror {mapping}" in error and "--libtorch cpu" in error
    return error


def nothing_left(home: Path) -> None:
    assert not list((home / "envs").glob("cpu-*")) if (home / "envs").is_dir() else True
    assert not list((home / "lockfiles").glob("*.yml")) if (home / "lockfiles").is_dir() else True


def test_locking_cpu_on_demand_from_an_index_serving_a_cuda_torch_is_2_and_locks_nothing(tmp_path, index):
    mapping = f"pytorch/cpu={index.url}/cu126"
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", mapping, "--home", str(tmp_path / "h"), "--json")
    error = refused(res, mapping)
    assert "a CUDA build (torch 2.10.0+cu126, requiring nvidia-" in error and "nothing was locked" in error
    nothing_left(tmp_path / "h")


def test_fdlenv_lock_of_cpu_from_an_index_serving_a_cuda_torch_is_2_and_writes_no_file(tmp_path, index):
    mapping = f"pytorch/cpu={index.url}/cu126"
    out = tmp_path / "conda-lock.yml"
    res = fdlenv("lock", "--libtorch", "cpu", "--platform", "linux-64", "--mirror", mapping, "--out", str(out),
                 "--home", str(tmp_path / "h"), "--json", cwd=tmp_path)
    refused(res, mapping)
    assert not list(tmp_path.glob("*conda-lock.yml"))


def test_a_lock_naming_a_cuda_torch_under_cpu_is_refused_at_realise_and_nothing_is_fetched(tmp_path, index):
    mapping = f"pytorch/cpu={index.url}/cu126"
    lock = tmp_path / "lockfiles" / "cpu.conda-lock.yml"
    write(Home(tmp_path / "maker"), _env_file("cpu", "linux-64"), "linux-64",
          {"pytorch/cpu": f"{index.url}/cu126"}, lock, check=False)   # a real solve, the check off
    torch = next(r for r in read_variant(lock, "cpu", "linux-64") if r.name == "torch")
    assert torch.version == "2.10.0+cu126" and torch.url.startswith("pip+index://pytorch/cpu/torch/")
    home = tmp_path / "box"
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--frozen", "--mirror", mapping,
                 "--home", str(home), "--json")
    error = refused(res, mapping)
    assert "nothing was realised" in error
    assert not list((home / "envs").glob("cpu-*")) and not list((home / "pkgs").glob("whl-*"))


def test_a_plain_torch_shipping_libtorch_cuda_is_refused_at_lock_when_its_wheel_is_read(tmp_path):
    with hidden_cuda_index(tmp_path / "idx", metadata=False) as idx:
        mapping = f"pytorch={idx.url}"
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", mapping, "--home", str(tmp_path / "h"),
                     "--json")
    assert "shipping libtorch_cuda.so" in refused(res, mapping)
    nothing_left(tmp_path / "h")


def test_a_plain_torch_shipping_libtorch_cuda_is_refused_at_realise_once_extracted(tmp_path):
    with hidden_cuda_index(tmp_path / "idx", metadata=True) as idx:
        mapping = f"pytorch={idx.url}"
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--mirror", mapping, "--home", str(tmp_path / "h"),
                     "--json")
    error = refused(res, mapping)
    assert "shipping libtorch_cuda.so" in error and "nothing was realised" in error
    assert not list((tmp_path / "h" / "envs").glob("cpu-*"))


def test_the_variants_own_indexes_and_the_shipped_cu128_lock_pass_the_check(tmp_path, index):
    for variant in ("cpu", "cu126", "rocm7.1"):
        res = fdlenv("env", "realize", "--libtorch", variant, "--mirror", f"pytorch={index.url}",
                     "--mirror", f"pypi={index.simple}", "--home", str(tmp_path / "h"), "--json")
        assert res.returncode == 0, res.stderr
    from fdlenv.names import variants
    from fdlenv.lock.paths import shipped_lock

    torch = next(r for r in read_variant(shipped_lock(), "cu128", "linux-64") if r.name == "torch")
    assert "+" not in torch.version and variants.build_mismatch("cu128", torch.version, dict(torch.dependencies)) is None
    assert variants.build_mismatch("cu126", torch.version, dict(torch.dependencies)) == (
        "the CUDA 12.8 build (torch 2.10.0, requiring nvidia-cublas-cu12, nvidia-cuda-cupti-cu12, "
        "nvidia-cuda-nvrtc-cu12, ...), not CUDA 12.6")
