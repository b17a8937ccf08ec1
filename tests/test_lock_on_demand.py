"""Every variant out of the box: locked on demand from an index laid out like PyTorch's.

The index is a real HTTP server on 127.0.0.1 (`helpers_pytorch_index`): files
beside the project pages, absolute percent-encoded hrefs, sha256 fragments,
PEP 658 metadata. fdlenv runs as a child process "from a regular install with
no extra": conda-lock and pip cannot be imported in it. Each test has a fresh
home and an empty working directory.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_pytorch_index import serve
from sshd import free_port

from fdlenv.names.home import Home
from fdlenv.lock.paths import shipped_lock
from fdlenv.app.lockview import LockView

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")
# A plain install: the `lock` extra's modules are absent (importing them fails).
NO_EXTRA = ("import runpy, sys; sys.modules['conda_lock'] = None; sys.modules['pip'] = None; "
            "sys.argv = ['fdlenv'] + sys.argv[1:]; runpy.run_module('fdlenv', run_name='__main__')")


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


@pytest.fixture
def box(tmp_path):
    (tmp_path / "empty").mkdir()
    return tmp_path


def plain(box: Path, *args: str, env: dict | None = None, cwd: Path | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", NO_EXTRA, *args], capture_output=True, text=True,
                          cwd=cwd or box / "empty", env={**os.environ, **(env or {})})


def realize(box, index, variant, *extra, home="h"):
    return plain(box, "env", "realize", "--libtorch", variant, "--mirror", f"pytorch={index.url}",
                 "--mirror", f"pypi={index.simple}", "--home", str(box / home), "--json", *extra)


def site(env_path: str) -> Path:
    return Path(env_path) / "lib" / "python3.12" / "site-packages"


def test_prepare_rocm71_on_a_fresh_home_locks_on_demand_from_a_plain_install_and_realises(box, index):
    res = plain(box, "prepare", "--libtorch", "rocm7.1", "--mirror", f"pytorch={index.url}",
                "--home", str(box / "h"), "--json")
    assert res.returncode == 0, res.stderr
    out = json.loads(res.stdout)
    assert out["variant"] == "rocm7.1" and out["libtorch"] == "precompiled/rocm71"
    lib = Path(out["env"]["libtorch_root"]) / "lib"
    assert (lib / "libamdhip64.so").read_text() == "hip rocm7.1"     # the HIP runtime inside torch/lib
    kept = {r["name"] for r in json.loads((Path(out["env"]["path"]) / ".fdlenv/manifest.json").read_text())["records"]}
    assert kept == {"torch"}                                          # pytorch-triton-rocm, sympy: walked, not kept
    lock = box / "h" / "lockfiles" / "rocm7.1.conda-lock.yml"
    assert any(str(lock) in n for n in out["notes"]) and "beside fdl.yml" in " ".join(out["notes"])
    text = lock.read_text()
    assert "torch-2.10.0+rocm7.1-cp312-cp312-manylinux_2_28_x86_64.whl" in text and "%2B" not in text
    from conda_lock.lockfile import parse_conda_lock_file   # the oracle reads what fdlenv wrote
    parsed = parse_conda_lock_file(lock)
    assert [(p.name, p.version, p.categories) for p in parsed.package] == [("torch", "2.10.0+rocm7.1", {"rocm7.1"})]


def test_the_second_call_makes_no_index_request_and_the_env_serves_any_directory(box, index):
    first = realize(box, index, "rocm7.1")
    assert first.returncode == 0, first.stderr
    before = len(index.requests)
    again = realize(box, index, "rocm7.1")
    assert again.returncode == 0 and json.loads(again.stdout)["created"] is False
    elsewhere = box / "elsewhere"
    elsewhere.mkdir()
    shutil.rmtree(box / "h" / "lockfiles")     # no lock in sight: the realised env alone serves
    run = plain(box, "run", "--libtorch", "rocm7.1", "--home", str(box / "h"), "sh", "-c",
                'cat "$LIBTORCH_PATH/lib/libamdhip64.so"; echo " $FDL_GPU_FEATURE"', cwd=elsewhere)
    assert run.returncode == 0 and run.stdout == "hip rocm7.1 rocm\n", run.stderr
    hook = plain(box, "shell-hook", "--libtorch", "rocm7.1", "--home", str(box / "h"), "--json", cwd=elsewhere)
    assert hook.returncode == 0, hook.stderr
    use = plain(box, "env", "use", "rocm7.1", "--home", str(box / "h"), cwd=elsewhere)
    assert use.returncode == 0, use.stderr
    prep = plain(box, "prepare", "--libtorch", "rocm7.1", "--home", str(box / "h"), "--frozen", cwd=elsewhere)
    assert prep.returncode == 0, prep.stderr
    assert len(index.requests) == before


def test_cpu_and_cu126_realise_with_their_runtime_wheels_and_without_python_packages(box, index):
    cpu = realize(box, index, "cpu")
    assert cpu.returncode == 0, cpu.stderr
    assert (site(json.loads(cpu.stdout)["path"]) / "torch/lib/libtorch.so").read_text() == "libtorch cpu"
    cu = realize(box, index, "cu126")
    assert cu.returncode == 0, cu.stderr
    sp = site(json.loads(cu.stdout)["path"])
    assert (sp / "nvidia/cuda_runtime/lib/libcudart.so.12").is_file() and (sp / "nvidia/cudnn/lib/libcudnn.so.9").is_file()
    assert (sp / "nvidia/cublas/lib/libcublas.so.12").is_file()        # cudnn's own requirement, kept
    assert not (sp / "triton").exists() and not (sp / "sympy").exists()
    lock = (box / "h" / "lockfiles" / "cu126.conda-lock.yml").read_text()
    assert "nvidia-cudnn-cu12:" in lock and "nvidia-cublas-cu12: ''" in lock   # the kept edge is recorded
    # the header wheels come from the default index (pip-sources), and make a whole CUDA_HOME
    assert "pip+index://pypi/nvidia-cuda-nvcc-cu12/" in lock and "pip+index://pytorch/cu126/torch/" in lock
    home = Path(json.loads(cu.stdout)["path"]) / "cuda"
    assert (home / "include/crt/host_defines.h").is_file() and (home / "include/nv/target").is_file()
    assert (home / "lib64/libcudart.so").resolve().name == "libcudart.so.12"


def test_pep_691_json_pages_lock_the_same_file_as_html_pages(box, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt-json"), json_pages=True) as idx:
        res = realize(box, idx, "cpu")
        assert res.returncode == 0, res.stderr
        assert any(r.endswith("/cpu/torch/") for r in idx.requests)
    assert "torch-2.10.0+cpu-cp312-cp312-manylinux_2_28_x86_64.whl" in (box / "h/lockfiles/cpu.conda-lock.yml").read_text()


def test_an_index_without_pep_658_metadata_is_read_with_range_requests_not_whole_wheels(box, tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt-nometa"), metadata=False) as idx:
        res = realize(box, idx, "rocm7.0")
        assert res.returncode == 0, res.stderr
        assert not any(r.endswith(".metadata") for r in idx.requests)
        assert {name for name, _ in idx.ranges} >= {"torch-2.10.0+rocm7.0-cp312-cp312-manylinux_2_28_x86_64.whl"}
        # the wheel itself was downloaded once, whole, by the realise (not by the resolver; the lock's
        # HEAD for its size reads no body)
        whole = [r for m, r in idx.calls if m == "GET" and r.endswith("manylinux_2_28_x86_64.whl") and "rocm7.0" in r]
        assert len(whole) == len([n for n, _ in idx.ranges if "rocm7.0" in n]) + 1


def test_join_auto_on_an_amd_box_with_unknown_host_rocm_runs_the_agent_in_rocm70(box, index):
    gpu = json.dumps([{"vendor": "amd", "arch": "gfx942", "vram_mb": 196000, "name": "MI300X"}])
    res = plain(box, "join", "127.0.0.1:9", "--bin", sys.executable, "--no-sig-probe", "--libtorch", "auto",
                "--mirror", f"pytorch={index.url}", "--home", str(box / "h"), "--", STANDIN, str(box / "out"), "0",
                env={"FLODL_TESTING_GPU_JSON": gpu})
    assert res.returncode == 0, res.stderr
    assert "auto: rocm7.0:" in res.stderr                       # auto's reason, as `detect` gives it
    agent = json.loads((box / "out" / "agent0.json").read_text())["env"]
    assert agent["FDL_GPU_FEATURE"] == "rocm"
    assert (Path(agent["LIBTORCH_PATH"]) / "lib/libamdhip64.so").read_text() == "hip rocm7.0"
    rank = json.loads((box / "out" / "rank0.json").read_text())
    assert rank["LIBTORCH_PATH"] == agent["LIBTORCH_PATH"]


def test_the_lock_written_on_demand_shipped_beside_fdl_yml_realises_the_same_env_frozen(box, index):
    first = realize(box, index, "rocm7.1")
    assert first.returncode == 0, first.stderr
    project = box / "project"
    project.mkdir()
    (project / "fdl.yml").write_text("fdlenv:\n  mirrors:\n    pytorch: " + index.url + "\n")
    shutil.copy(box / "h/lockfiles/rocm7.1.conda-lock.yml", project / "rocm7.1.conda-lock.yml")
    other = plain(box, "env", "realize", "--libtorch", "rocm7.1", "--frozen", "--home", str(box / "fresh"),
                  "--json", cwd=project)
    assert other.returncode == 0, other.stderr
    assert json.loads(other.stdout)["key"] == json.loads(first.stdout)["key"]
    assert not (box / "fresh" / "lockfiles").exists()


def test_frozen_refuses_to_lock_by_flag_by_environment_and_by_fdl_yml(box, index):
    for extra, env in ((("--frozen",), None), ((), {"FDLENV_FROZEN": "1"})):
        res = plain(box, "env", "realize", "--libtorch", "rocm7.0", "--mirror", f"pytorch={index.url}",
                    "--home", str(box / "h"), *extra, env=env)
        assert res.returncode == 2 and res.stderr.count("error:") == 1, res.stderr
        assert "rocm7.0" in res.stderr and "fdlenv lock --libtorch rocm7.0" in res.stderr
    (box / "empty" / "fdl.yml").write_text("fdlenv:\n  frozen: true\n")
    res = plain(box, "prepare", "--libtorch", "rocm7.0", "--mirror", f"pytorch={index.url}", "--home", str(box / "h"))
    assert res.returncode == 2 and "--frozen" in res.stderr
    assert not (box / "h" / "lockfiles").exists()


def test_with_no_mirror_pytorchs_own_index_is_asked_and_unreachable_is_transient_naming_it(box):
    proxy = f"http://127.0.0.1:{free_port()}"   # this box reaches nothing: a proxy that refuses
    res = plain(box, "env", "realize", "--libtorch", "cu126", "--home", str(box / "h"),
                env={"https_proxy": proxy, "HTTPS_PROXY": proxy, "no_proxy": "", "NO_PROXY": ""})
    assert res.returncode == 1 and res.stderr.count("error:") == 1, res.stderr
    assert "https://download.pytorch.org/whl/cu126/torch/" in res.stderr
    assert not (box / "h" / "lockfiles").exists() and not (box / "h" / "envs").exists()


def test_a_project_lock_naming_only_rocm71_does_not_hide_the_shipped_cu128(box, index):
    realize(box, index, "rocm7.1")
    project = box / "p"
    project.mkdir()
    shutil.copy(box / "h/lockfiles/rocm7.1.conda-lock.yml", project / "conda-lock.yml")
    view = LockView(Home(box / "h2"), None, project)
    assert view.holder("rocm7.1", "linux-64") == project / "conda-lock.yml"
    assert view.holder("cu128", "linux-64") == shipped_lock()
    assert view.holder("cpu", "linux-aarch64") == shipped_lock()
    assert view.holder("cpu", "linux-64") is None


def test_lock_for_linux_aarch64_from_x86_64_evaluates_markers_for_the_target(box, index):
    envs = box / "envs"
    envs.mkdir()
    (envs / "cpu.yml").write_text("platforms: [linux-aarch64]\npip-index: pytorch/cpu\n"
                                    "dependencies:\n  - pip:\n      - torch ==2.10.0\n")
    out = box / "l.yml"
    res = plain(box, "lock", "--envs", str(envs), "--out", str(out), "--mirror", f"pytorch={index.url}",
                "--home", str(box / "h"))
    assert res.returncode == 0, res.stderr
    text = out.read_text()
    assert "manylinux_2_28_aarch64.whl" in text and "x86_64" not in text and "nvidia" not in text


def test_a_variant_pytorch_does_not_build_for_the_platform_is_one_error_naming_what_is(box, index, monkeypatch):
    from fdlenv.base.errors import Fail
    from fdlenv.lock import ondemand

    with pytest.raises(Fail) as e:
        ondemand.lock_variant(Home(box / "h"), "rocm7.1", "linux-aarch64", {"pytorch": index.url}, print)
    assert e.value.exit_code == 2 and "linux-aarch64" in str(e.value) and "cpu" in str(e.value)


def test_flodl_names_the_cpu_build_on_aarch64_cpu_aarch64(monkeypatch):
    import os as _os

    from fdlenv.names import variants

    real = _os.uname()
    monkeypatch.setattr(_os, "uname", lambda: type(real)((real.sysname, real.nodename, real.release,
                                                          real.version, "aarch64")))
    assert variants.get("cpu").flodl_label == "precompiled/cpu-aarch64"
    assert variants.get("cu128").flodl_label == "precompiled/cu128"


def test_a_hostile_index_is_bounded_and_cannot_point_at_local_files(tmp_path, monkeypatch):
    import http.server
    import threading

    from fdlenv.index import simpleapi
    from fdlenv.base.errors import Fail

    secret = tmp_path / "secret.whl"
    secret.write_text("not for an index to hand out")
    pages = {"/simple/big/": b"<a href='x'>" + b"x" * 5000 + b"</a>",
             "/simple/sly/": f'<a href="file://{secret}#sha256={"0" * 64}">sly-1.0-py3-none-any.whl</a>'.encode()}

    class Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *a):
            pass

        def do_GET(self):
            body = pages.get(self.path, b"")
            self.send_response(200 if self.path in pages else 404)
            self.send_header("Content-Type", "text/html")
            self.end_headers()
            self.wfile.write(body)

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    base = f"http://127.0.0.1:{server.server_address[1]}/simple"
    try:
        monkeypatch.setattr(simpleapi, "PAGE_LIMIT", 1000)
        with pytest.raises(Fail) as e:
            simpleapi.project_files(base, "big")
        assert e.value.exit_code == 2 and "over" in str(e.value)
        assert simpleapi.project_files(base, "sly") == []          # a file:// href from a remote index
        with pytest.raises(Fail) as e:
            simpleapi.find_file(base, "sly", "sly-1.0-py3-none-any.whl")
        assert e.value.exit_code == 2
    finally:
        server.shutdown()
        server.server_close()


def test_a_malformed_requirement_in_an_indexs_metadata_is_one_error_naming_the_project():
    from fdlenv.base.errors import Fail
    from fdlenv.lock.closure import Meta, requirements_of, target_environment

    meta = Meta(b"Metadata-Version: 2.1\nName: torch\nVersion: 2.10.0\nRequires-Dist: nvidia-x ==[1\n", "t")
    with pytest.raises(Fail) as e:
        list(requirements_of(meta, frozenset(), target_environment("linux-64")))
    assert e.value.exit_code == 2 and "torch 2.10.0" in str(e.value) and "nvidia-x" in str(e.value)
