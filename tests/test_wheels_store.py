"""Realising wheel variants: index lookup, verification, one cache entry per wheel, hard links.

Locks come from `fdlenv lock` against a real PEP 503 index of real wheels
(tests/helpers_wheels.py); realising goes through the CLI in a child process,
as a user runs it. The resume test serves the index over HTTP on 127.0.0.1
with Range support, and a part file left as an interrupted run leaves it.
"""

from __future__ import annotations

import functools
import http.server
import json
import os
import threading
from pathlib import Path

import pytest
from helpers_cli import fdlenv
from helpers_wheels import CLOSURE, Pipe, make_index, make_wheels, sha256, write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.lock.paths import split_path

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def locked_world(tmp_path, wheels):
    """An index of `wheels`, a cu128 env file naming torch, and its lock: (home, lock, index URL, envs)."""
    url = make_index(tmp_path / "simple", wheels)
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128")
    lock = tmp_path / "conda-lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, lock, mirrors={"pypi": url}, home=home)
    return home, lock, url, envs


@pytest.fixture
def world(tmp_path):
    return locked_world(tmp_path, make_wheels(tmp_path / "built"))


def realise(home, lock, url, variant="cu128", *extra):
    return fdlenv("env", "realize", "--libtorch", variant, "--lock", str(lock), "--home", str(home.root),
                  "--mirror", f"pypi={url}", "--json", *extra)


def test_a_wheel_env_is_libtorch_in_one_site_packages_with_flodl_facts(world):
    home, lock, url, _ = world
    res = realise(home, lock, url)
    assert res.returncode == 0, res.stderr
    env = json.loads(res.stdout)
    site = Path(env["path"]) / "lib/python3.12/site-packages"
    root = Path(env["libtorch_root"])
    assert root == site / "torch"
    assert (root / "lib/libtorch.so").read_text() == "libtorch cu128"
    assert (site / "nvidia/fake/lib/libfake.so.12").is_file() and (site / "nvidia/dep/lib/libdep.so.2").is_file()
    assert not (site / "sympy_fake").exists() and not (site / "triton_fake").exists()
    arch = dict(line.split("=", 1) for line in (root / ".arch").read_text().splitlines())
    assert arch["variant"] == "cu128" and arch["cuda"] == "12.8" and arch["torch"] == "2.10.0"
    assert "9.0" in arch["archs"].split()
    assert (root / "build-version").read_text().strip() == "2.10.0+cu128"
    # one cache entry per wheel, hard-linked: the env's file is the cache's inode
    entries = sorted(p.name for p in home.pkgs.glob("whl-*"))
    assert len(entries) == len(CLOSURE)
    assert (root / "lib/libtorch.so").stat().st_nlink >= 2
    assert not list(home.archives.glob("*.whl"))      # the entry is the content
    # activation carries flodl's variables
    run = fdlenv("run", "--libtorch", "cu128", "--lock", str(lock), "--home", str(home.root), "--",
                 "sh", "-c", 'echo "$LIBTORCH_PATH|$FDL_GPU_FEATURE"')
    assert run.returncode == 0, run.stderr
    assert run.stdout.strip() == f"{root}|cuda"
    assert os.path.realpath(home.libtorch / "precompiled" / "cu128") == str(root)


def test_a_second_env_with_the_same_wheels_only_links(world, tmp_path):
    home, lock, url, envs = world
    assert realise(home, lock, url).returncode == 0
    write_wheel_env(envs, "cu126")                   # same index, same wheels, another (CUDA) variant
    lock_envs(envs, lock, variants=["cu126"], mirrors={"pypi": url}, home=home)
    assert not split_path(lock, "cu126").exists()    # the same wheels share the file (category main)
    gone = tmp_path / "simple-away"
    os.rename(tmp_path / "simple", gone)             # nothing may be fetched now
    res = realise(home, lock, url, "cu126")
    assert res.returncode == 0, res.stderr
    cu126 = Path(json.loads(res.stdout)["libtorch_root"])
    cu128 = next(home.envs.glob("cu128-*")) / "lib/python3.12/site-packages/torch"
    assert cu126 != cu128 and (cu126 / "lib/libtorch.so").stat().st_ino == (cu128 / "lib/libtorch.so").stat().st_ino


def test_a_wheel_the_index_serves_with_other_bytes_is_refused_and_nothing_is_kept(world, tmp_path):
    home, lock, url, _ = world
    served = next((tmp_path / "simple" / "files").glob("torch-*.whl"))
    good = served.read_bytes()
    evil = make_wheels(tmp_path / "evil", label="EVIL")[0]
    served.write_bytes(evil.read_bytes())
    # the page still states the good sha256: the index contradicts the lock? no: edit the page too
    page = tmp_path / "simple" / "torch" / "index.html"
    page.write_text(page.read_text().replace(sha256(tmp_path / "built" / served.name), sha256(evil)))
    res = realise(home, lock, url)
    assert res.returncode == 2 and res.stderr.count("error:") == 1
    assert "sha256" in res.stderr and "torch" in res.stderr
    assert not list(home.envs.glob("*")) if home.envs.is_dir() else True
    assert not list(home.pkgs.glob("*torch*")) and not list(home.pkgs.glob(f"whl-{sha256(evil)}"))
    served.write_bytes(good)
    page.write_text(page.read_text().replace(sha256(evil), sha256(served)))
    res = realise(home, lock, url)
    assert res.returncode == 0, res.stderr


def test_a_wheel_with_a_member_escaping_its_root_is_refused(tmp_path):
    import zipfile

    wheels = make_wheels(tmp_path / "built")
    bad = wheels[1]   # nvidia-fake-cu12
    with zipfile.ZipFile(bad, "a") as z:
        z.writestr("../../escaped.txt", "gotcha")
    home, lock, url, _ = locked_world(tmp_path, wheels)
    res = realise(home, lock, url)
    assert res.returncode == 2 and "escapes" in res.stderr
    assert not list(tmp_path.rglob("escaped.txt"))
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))


def test_a_frozen_realise_of_a_variant_no_lock_holds_names_it_and_the_command_that_locks_it(world):
    home, lock, url, _ = world
    res = realise(home, lock, url, "cu126", "--frozen")
    assert res.returncode == 2 and res.stderr.count("error:") == 1, res.stderr
    assert "--frozen" in res.stderr and "cu126" in res.stderr and "fdlenv lock --libtorch cu126" in res.stderr
    assert not (home.root / "lockfiles").exists() and not home.envs.exists()


class _RangeHandler(http.server.SimpleHTTPRequestHandler):
    """Static files with `Range: bytes=N-` support; records the ranges it was asked for."""

    ranges: list = []

    def log_message(self, *a):
        pass

    def send_head(self):
        rng = self.headers.get("Range")
        path = self.translate_path(self.path)
        if not rng or not os.path.isfile(path):
            return super().send_head()
        type(self).ranges.append((os.path.basename(path), rng))
        start = int(rng.split("=")[1].rstrip("-"))
        f = open(path, "rb")
        size = os.fstat(f.fileno()).st_size
        f.seek(start)
        self.send_response(206)
        self.send_header("Content-Type", "application/octet-stream")
        self.send_header("Content-Range", f"bytes {start}-{size - 1}/{size}")
        self.send_header("Content-Length", str(size - start))
        self.end_headers()
        return f


@pytest.fixture
def http_index(world, tmp_path):
    handler = functools.partial(_RangeHandler, directory=str(tmp_path / "simple"))
    _RangeHandler.ranges = []
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{srv.server_address[1]}"
    srv.shutdown()


def test_an_interrupted_download_resumes_from_its_part(world, tmp_path, http_index):
    home, lock, _, _ = world
    torch = next((tmp_path / "simple" / "files").glob("torch-*.whl"))
    data = torch.read_bytes()
    home.ensure(home.archives)
    part = home.archives / f".{sha256(torch)}.part"
    part.write_bytes(data[: len(data) // 2])         # what a killed download leaves
    res = realise(home, lock, http_index)
    assert res.returncode == 0, res.stderr
    assert (torch.name, f"bytes={len(data) // 2}-") in _RangeHandler.ranges
    assert not part.exists()


def test_a_part_holding_wrong_bytes_fails_once_then_heals(world, tmp_path, http_index):
    home, lock, _, _ = world
    torch = next((tmp_path / "simple" / "files").glob("torch-*.whl"))
    home.ensure(home.archives)
    part = home.archives / f".{sha256(torch)}.part"
    part.write_bytes(b"garbage" * 10)
    res = realise(home, lock, http_index)
    assert res.returncode == 2 and "does not match the lock" in res.stderr
    assert not (home.envs.is_dir() and list(home.envs.iterdir()))
    res = realise(home, lock, http_index)
    assert res.returncode == 0, res.stderr


def test_verify_checks_wheel_files_against_their_record_and_repair_restores_them(world):
    home, lock, url, _ = world
    env = json.loads(realise(home, lock, url).stdout)
    ok = fdlenv("env", "verify", "cu128", "--home", str(home.root), "--full")
    assert ok.returncode == 0, ok.stdout + ok.stderr
    lib = Path(env["libtorch_root"]) / "lib/libc10.so"
    lib.unlink()
    lib.write_text("tampered")                      # a new inode: the cache stays good
    bad = fdlenv("env", "verify", "cu128", "--home", str(home.root), "--full")
    assert bad.returncode != 0 and "libc10.so" in bad.stdout + bad.stderr
    fixed = fdlenv("env", "verify", "cu128", "--home", str(home.root),
                   "--full", "--repair", "--mirror", f"pypi={url}")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert lib.read_text() == "c10"


def test_verify_full_does_not_pass_a_file_in_a_wheels_package_that_its_record_does_not_list(world):
    """A member RECORD does not list is refused at extraction; one planted in the env later (or
    kept from an extraction before that check) is a problem of the wheel under `verify --full`,
    and a repair removes it."""
    home, lock, url, _ = world
    env = json.loads(realise(home, lock, url).stdout)
    (site,) = Path(env["path"]).glob("lib/python3.*/site-packages")
    planted = site / "torch" / "evil.py"
    planted.write_text("import os\n")
    (site / "torch" / "__pycache__").mkdir(exist_ok=True)
    (site / "torch" / "__pycache__" / "x.cpython-312.pyc").write_bytes(b"\0")   # Python's own, not a problem
    res = fdlenv("env", "verify", "cu128", "--home", str(home.root), "--full", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    problems = json.loads(res.stdout)["envs"][0]["problems"]
    assert [(p["path"], p["what"], p["package"]) for p in problems] == [("torch/evil.py", "not in its wheel's RECORD", "torch")]
    fixed = fdlenv("env", "verify", "cu128", "--home", str(home.root), "--full", "--repair", "--mirror", f"pypi={url}")
    assert fixed.returncode == 0, fixed.stdout + fixed.stderr
    assert not planted.exists()


def test_verify_full_reports_every_flipped_file_whichever_core_hashes_it_largest_first(world):
    home, lock, url, _ = world
    env = json.loads(realise(home, lock, url).stdout)
    site = Path(env["libtorch_root"]).parent
    recorded = {row.split(",")[0] for record in site.glob("*.dist-info/RECORD")
                for row in record.read_text().splitlines() if ",sha256=" in row}
    files = sorted((site / r for r in recorded if ".dist-info" not in r and (site / r).stat().st_size > 0),
                   key=lambda p: (p.stat().st_size, str(p)))
    flipped = [files[0], files[len(files) // 2], files[-1]]   # on both lanes, whatever their sizes
    for f in flipped:
        data = bytearray(f.read_bytes())
        data[-1] ^= 0xFF
        with open(f, "r+b") as out:                  # in place, same size: only the hash tells
            out.write(data)
    res = fdlenv("env", "verify", "cu128", "--home", str(home.root), "--full", "--json")
    assert res.returncode == 2, res.stdout + res.stderr
    problems = json.loads(res.stdout)["envs"][0]["problems"]
    assert {p["what"] for p in problems} == {"content differs"}, problems
    shown = [p["path"] for p in problems]
    want = [str(f.relative_to(site)) for f in flipped]
    assert sorted(shown) == sorted(want)
    sizes = [(site / p).stat().st_size for p in shown]
    assert sizes == sorted(sizes, reverse=True)      # told largest first, as they were dealt


def test_auto_on_a_spoofed_nvidia_box_with_a_cuda_12_8_driver_realises_cu128(world):
    home, lock, url, _ = world
    gpu = json.dumps({"devices": [{"vendor": "nvidia", "arch": "9.0", "vram_mb": 81000, "name": "H100"}],
                      "driver_cuda": "12.8"})
    res = fdlenv("env", "realize", "--libtorch", "auto", "--lock", str(lock), "--home", str(home.root),
                 "--mirror", f"pypi={url}", "--json", env={"FLODL_TESTING_GPU_JSON": gpu})
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["variant"] == "cu128"


def test_over_http_a_wheel_is_extracted_as_it_streams_and_bad_bytes_publish_nothing(world, tmp_path, http_index):
    home, lock, _, _ = world
    served = next((tmp_path / "simple" / "files").glob("torch-*.whl"))
    good = served.read_bytes()
    evil = make_wheels(tmp_path / "evil", label="EVIL")[0].read_bytes()
    served.write_bytes(evil)          # the page's sha256 fragment still names the good bytes
    page = tmp_path / "simple" / "torch" / "index.html"
    page.write_text(page.read_text().split("#sha256=")[0] + '">x</a>\n')   # an index that states no hash
    res = realise(home, lock, http_index)
    assert res.returncode == 2 and "does not match the lock" in res.stderr
    assert not list(home.pkgs.glob(".whl-*")) and not (home.envs.is_dir() and list(home.envs.iterdir()))
    assert not list(home.archives.glob("*"))       # a stream keeps no part
    served.write_bytes(good)
    res = realise(home, lock, http_index)
    assert res.returncode == 0, res.stderr
    assert _RangeHandler.ranges == []              # streamed whole, never resumed
    assert (Path(json.loads(res.stdout)["libtorch_root"]) / "lib/libtorch.so").read_text() == "libtorch cu128"


def test_a_zip_the_stream_cannot_read_falls_back_to_a_whole_download(tmp_path):
    """Stored members whose sizes come after the data (a zip written to a pipe) cannot be
    streamed; the wheel is then fetched whole and extracted with zipfile."""
    import zipfile

    wheels = make_wheels(tmp_path / "built")
    torch = wheels[0]
    with zipfile.ZipFile(torch) as src:
        items = [(i, src.read(i)) for i in src.infolist()]
    pipe = Pipe()
    with zipfile.ZipFile(pipe, "w", zipfile.ZIP_STORED) as z:
        for info, data in items:
            z.writestr(zipfile.ZipInfo(info.filename, date_time=info.date_time), data)
    torch.write_bytes(bytes(pipe.data))
    home, lock, _, _ = locked_world(tmp_path, wheels)
    handler = functools.partial(_RangeHandler, directory=str(tmp_path / "simple"))
    srv = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=srv.serve_forever, daemon=True).start()
    try:
        res = realise(home, lock, f"http://127.0.0.1:{srv.server_address[1]}")
    finally:
        srv.shutdown()
    assert res.returncode == 0, res.stderr
    assert "fetching it whole" in res.stderr
    root = Path(json.loads(res.stdout)["libtorch_root"])
    assert (root / "lib/libtorch.so").read_text() == "libtorch cu128"
    assert not list(home.archives.glob("*.whl"))
