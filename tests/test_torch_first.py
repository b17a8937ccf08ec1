"""Torch first, whatever the index states: the largest downloads start first (store/fetchorder.py).

The index is the loopback one laid out like PyTorch's (HTML pages that state no
sizes, or PEP 691 JSON pages that do), over real HTTP, with real wheels: torch
the largest, five native runtime wheels whose lock order (by name) is not their
size order. The lock is written by `fdlenv lock` against it. The server holds
every whole-wheel GET until as many as the realise runs side by side have come,
so the set that starts first is read from its request log, never from timing.
"""

from __future__ import annotations

import random

import pytest
from helpers_conda import make_wheel
from helpers_pytorch_index import Index, lay_out
from helpers_cli import fdlenv
from helpers_wheels import write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs
from fdlenv.lock.file import SIZES_KEY, load_lock, read_variant
from fdlenv.store.wheelfetch import DOWNLOADS

NATIVE = "py3-none-manylinux_2_27_x86_64"
# Payload bytes per project; lock order is by name (a..e, then torch), size order is not.
PAYLOAD = {"nvidia-a-cu12": 4_000, "nvidia-b-cu12": 8_000, "nvidia-c-cu12": 300_000,
           "nvidia-d-cu12": 200_000, "nvidia-e-cu12": 250_000, "torch": 600_000}


def _wheels(tmp) -> list:
    rand = random.Random(38)    # incompressible, so a wheel's size follows its payload
    out = []
    for name, n in PAYLOAD.items():
        if name == "torch":
            out.append(make_wheel(tmp, "torch", "2.10.0", {
                "lib/libtorch.so": rand.randbytes(n), "lib/libc10.so": "c10", "include/torch/torch.h": "// t",
                "share/cmake/Torch/TorchConfig.cmake": "# cmake", "__init__.py": ""},
                tag="cp312-cp312-manylinux_2_28_x86_64", requires=tuple(p for p in PAYLOAD if p != "torch")))
        else:
            lib = name.split("-")[1]
            out.append(make_wheel(tmp, name, "1.0", {"__init__.py": "", f"{lib}/lib/lib{lib}.so": rand.randbytes(n)},
                                  tag=NATIVE, top="nvidia"))
    return out


@pytest.fixture
def index(tmp_path):
    root = tmp_path / "index"
    lay_out(root, {"cu128": _wheels(tmp_path / "built")})
    idx = Index(root)
    yield idx
    idx.close()


def _lock(tmp_path, index) -> tuple:
    envs = tmp_path / "envs"
    write_wheel_env(envs, "cu128", index="pytorch/cu128")
    lock = tmp_path / "lock.yml"
    home = Home(tmp_path / "home")
    lock_envs(envs, lock, mirrors={"pytorch": index.url}, home=home)
    return lock, home


def _realise(tmp_path, index, lock):
    index.calls.clear()
    index.hold = DOWNLOADS
    res = fdlenv("env", "realize", "--libtorch", "cu128", "--lock", str(lock), "--home", str(tmp_path / "home"),
                 "--mirror", f"pytorch={index.url}", "--json")
    assert res.returncode == 0, res.stderr
    return res


def _started_first(index) -> set[str]:
    """The projects of the first DOWNLOADS whole-wheel GETs (the ones the barrier held together)."""
    gets = [p for m, p in index.calls if m == "GET" and p.endswith(".whl")]
    assert len(gets) == len(PAYLOAD)
    return {p.rsplit("/", 1)[1].split("-")[0].replace("_", "-") for p in gets[:DOWNLOADS]}


def _sizes_on_disk(index) -> dict[str, int]:
    return {p.name.split("-")[0].replace("_", "-"): p.stat().st_size
            for p in (index.root / "whl" / "cu128").glob("*.whl")}


def _largest(index, n: int) -> set[str]:
    on_disk = _sizes_on_disk(index)
    return set(sorted(on_disk, key=on_disk.get, reverse=True)[:n])


def test_with_pages_stating_no_sizes_and_a_lock_recording_none_a_head_orders_the_largest_first(tmp_path, index):
    index.head = False                      # locked where no HEAD was answered: the lock records no size
    lock, _ = _lock(tmp_path, index)
    assert SIZES_KEY not in (load_lock(lock)["metadata"].get("custom_metadata") or {})
    assert [r.name for r in read_variant(lock, "cu128", "linux-64")][-1] == "torch"   # lock order: torch last
    index.head = True
    _realise(tmp_path, index, lock)
    assert _started_first(index) == _largest(index, DOWNLOADS)
    heads = {p.rsplit("/", 1)[1].split("-")[0].replace("_", "-") for m, p in index.calls if m == "HEAD"}
    assert heads == set(PAYLOAD) - {"torch"}   # torch is the known-largest: not asked


def test_with_no_size_anywhere_torch_still_downloads_first_and_the_rest_keep_lock_order(tmp_path, index):
    index.head = False
    lock, _ = _lock(tmp_path, index)
    _realise(tmp_path, index, lock)
    assert _started_first(index) == {"torch", "nvidia-a-cu12", "nvidia-b-cu12", "nvidia-c-cu12"}


def test_a_lock_records_each_wheels_size_and_a_realise_from_it_sends_no_head(tmp_path, index):
    from conda_lock.lockfile import parse_conda_lock_file

    lock, _ = _lock(tmp_path, index)        # the pages state no size: `fdlenv lock` asked each file
    on_disk = _sizes_on_disk(index)
    assert {r.name: r.size for r in read_variant(lock, "cu128", "linux-64")} == on_disk
    parsed = parse_conda_lock_file(lock)    # conda-lock's own parser reads the field
    assert SIZES_KEY in (parsed.metadata.custom_metadata or {})
    assert len(parsed.package) == len(PAYLOAD)
    _realise(tmp_path, index, lock)
    assert [c for c in index.calls if c[0] == "HEAD"] == []
    assert _started_first(index) == _largest(index, DOWNLOADS)


def test_json_pages_stating_sizes_order_an_old_lock_with_no_head(tmp_path, index):
    index.head = False
    lock, _ = _lock(tmp_path, index)
    assert SIZES_KEY not in (load_lock(lock)["metadata"].get("custom_metadata") or {})
    index.head, index.json_pages = True, True   # the same index, now answering PEP 691 JSON with PEP 700 sizes
    _realise(tmp_path, index, lock)
    assert [c for c in index.calls if c[0] == "HEAD"] == []
    assert _started_first(index) == _largest(index, DOWNLOADS)


def test_a_malformed_sizes_field_is_one_error_line_naming_it(tmp_path, index):
    lock, _ = _lock(tmp_path, index)
    text = lock.read_text()
    start = text.index(SIZES_KEY + ":")
    lock.write_text(text[:start] + f"{SIZES_KEY}: torch=big\n" + text[text.index("package:"):])
    res = fdlenv("env", "realize", "--libtorch", "cu128", "--lock", str(lock), "--home", str(tmp_path / "home"),
                 "--mirror", f"pytorch={index.url}")
    errors = [line for line in res.stderr.splitlines() if line.startswith("error:")]
    assert res.returncode == 2 and len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
    assert f"metadata.custom_metadata.{SIZES_KEY}" in errors[0] and "<sha256>=<bytes>" in errors[0]
