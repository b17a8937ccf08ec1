"""`--devices` (and `join.devices`) checked: each id once on every box, and each naming a GPU
found where the GPU gate runs (join always, `prepare --gpu-gate`); `all` and no offer unchanged.

The resolver and the check are table-tested on hand-built surveys; the command line runs as a
user runs it (a child process, GPUs spoofed through FLODL_TESTING_GPU_JSON).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from fdlenv.config.model import FdlenvBlock, JoinBlock, JoinFlags, Project
from fdlenv.base.errors import Fail
from fdlenv.hw.model import AMD, NVIDIA, Device, Survey
from fdlenv.app.joinsettings import resolve
from fdlenv.names.variants import Libtorch
from fdlenv.app.prepare import PrepareRequest, check_devices

H100 = Device(NVIDIA, 0, "NVIDIA H100 80GB HBM3", "9.0", 81559)
MI = (Device(AMD, 0, "MI300X", "gfx942", 196000), Device(AMD, 1, "MI300X", "gfx942", 196000))


def res(flags: JoinFlags, block: JoinBlock | None = None):
    project = (Project(path=Path("/p/fdl.yml"), root=Path("/p"), join=block, fdlenv=FdlenvBlock())
               if block is not None else None)
    return resolve(flags, project, hostname=lambda: "h", environ={})


def fail_of(fn, *args) -> Fail:
    with pytest.raises(Fail) as e:
        fn(*args)
    return e.value


# ------------------------------------------------------------------ each id once (no survey)

def test_a_device_named_twice_on_the_command_line_is_refused_naming_the_flag():
    f = fail_of(res, JoinFlags(bin="/b", devices="0,1,0"))
    assert f.exit_code == 2
    assert f.message == "--devices 0,1,0: device 0 named twice; accepted: all, or distinct indices (e.g. 0,1)"


def test_a_device_named_twice_in_the_join_block_is_refused_naming_the_field():
    f = fail_of(res, JoinFlags(bin="/b"), JoinBlock(devices=(0, 0)))
    assert f.exit_code == 2 and f.message.startswith("join.devices [0, 0]: device 0 named twice")


def test_distinct_ids_and_all_resolve_as_before():
    assert res(JoinFlags(bin="/b", devices="1,0")).devices == (1, 0)
    assert res(JoinFlags(bin="/b", devices="all"), JoinBlock(devices=(0, 0))).devices is None   # the flag wins
    s = res(JoinFlags(bin="/b"), JoinBlock(devices=(2, 3)))
    assert (s.devices, s.devices_field) == ((2, 3), "join.devices")


# ------------------------------------------------------------------ ids against the GPUs found

def req(devices, libtorch=None, field="--devices"):
    return PrepareRequest(libtorch=None if libtorch is None else Libtorch(libtorch), devices=devices, devices_field=field)


def test_an_id_beyond_the_gpus_found_is_refused_naming_them():
    f = fail_of(check_devices, req((7,)), Survey((H100,)))
    assert f.exit_code == 2
    assert f.message == ("--devices 7: this box has 1 GPU (nvidia 0: NVIDIA H100 80GB HBM3); "
                         "accepted: all, or distinct indices 0..0")


def test_the_join_block_is_named_as_it_was_written():
    f = fail_of(check_devices, req((0, 2), field="join.devices"), Survey(MI))
    assert f.message.startswith("join.devices [0, 2]: this box has 2 GPUs (amd 0: MI300X, amd 1: MI300X)")
    assert f.message.endswith("distinct indices 0..1")


def test_the_ids_count_the_ordinals_of_the_vendor_the_variant_uses():
    mixed = Survey((H100, *MI))
    check_devices(req((1,), "rocm7.1"), mixed)                       # amd 1 exists
    f = fail_of(check_devices, req((1,), "cu128"), mixed)            # nvidia 1 does not
    assert "this box has 1 nvidia GPU (nvidia 0: NVIDIA H100 80GB HBM3)" in f.message
    assert "1 nvidia GPU" in fail_of(check_devices, req((1,), "auto"), mixed).message   # NVIDIA wins
    check_devices(req((1,), None), mixed)                            # carried libtorch: any vendor's


@pytest.mark.parametrize("devices", [None, (), (0,), (1, 0)])
def test_all_no_offer_and_ids_found_pass(devices):
    check_devices(req(devices, "rocm7.0"), Survey(MI))


# ------------------------------------------------------------------ the command line

def fdlenv(tmp_path, gpus, *args, cwd=None):
    env = {**os.environ, "FLODL_TESTING_GPU_JSON": json.dumps(gpus), "FLODL_HOME": str(tmp_path / "home"),
           "HOME": str(tmp_path)}
    return subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True,
                          cwd=cwd or tmp_path, env=env, timeout=120)


ONE_H100 = [{"vendor": "nvidia", "arch": "9.0", "vram_mb": 81559, "name": "NVIDIA H100 80GB HBM3"}]
DIAL = ("join", "127.0.0.1:9", "--bin", "/bin/true", "--no-sig-probe")


def errors(res) -> list[str]:
    return [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]


def test_join_devices_7_on_a_one_gpu_box_exits_2_naming_the_gpu_before_any_dial(tmp_path):
    r = fdlenv(tmp_path, ONE_H100, *DIAL, "--devices", "7", "--persist")
    assert r.returncode == 2
    assert errors(r) == ["error: --devices 7: this box has 1 GPU (nvidia 0: NVIDIA H100 80GB HBM3); "
                         "accepted: all, or distinct indices 0..0"]


def test_join_devices_0_0_exits_2_on_any_box(tmp_path):
    r = fdlenv(tmp_path, [], *DIAL, "--devices", "0,0")
    assert r.returncode == 2 and errors(r) == [
        "error: --devices 0,0: device 0 named twice; accepted: all, or distinct indices (e.g. 0,1)"]


def test_a_join_block_listing_a_device_twice_exits_2_naming_the_block(tmp_path):
    (tmp_path / "fdl.yml").write_text("join:\n  devices: [0, 0]\n")
    r = fdlenv(tmp_path, ONE_H100, *DIAL)
    assert r.returncode == 2 and errors(r) == [
        "error: join.devices [0, 0]: device 0 named twice; accepted: all, or distinct indices (e.g. 0,1)"]


def test_prepare_gpu_gate_checks_the_block_ids_against_the_gpus(tmp_path):
    (tmp_path / "fdl.yml").write_text("join:\n  devices: [1]\n")
    r = fdlenv(tmp_path, ONE_H100, "prepare", "--gpu-gate", "--json")
    assert r.returncode == 2 and errors(r)[0].startswith("error: join.devices [1]: this box has 1 GPU")
    assert json.loads(r.stdout)["exit"] == 2
    assert fdlenv(tmp_path, ONE_H100, "prepare", "--gpu-gate", "--devices", "all").returncode == 0


def test_on_a_box_with_no_gpu_the_gpu_gate_refuses_devices_0_first(tmp_path):
    r = fdlenv(tmp_path, [], *DIAL, "--devices", "0")
    assert r.returncode == 2 and len(errors(r)) == 1 and "no GPUs detected" in errors(r)[0]


def test_a_baking_host_without_the_gpu_gate_does_not_check_ids_against_gpus(tmp_path):
    assert fdlenv(tmp_path, [], "prepare", "--devices", "3").returncode == 0


def test_join_devices_0_and_all_on_the_one_gpu_box_run_the_agent(tmp_path):
    for offer in ("0", "all"):
        r = fdlenv(tmp_path, ONE_H100, *DIAL, "--devices", offer)
        assert (r.returncode, errors(r)) == (0, []), r.stderr          # one-shot: the agent's (/bin/true) code


# ------------------------------------------------------------------ ids as the runtime counts them (after the masks)

TWO_GPUS = [{"vendor": "nvidia", "arch": "8.6", "vram_mb": 24576, "name": "RTX 3090"},
            {"vendor": "nvidia", "arch": "8.9", "vram_mb": 24564, "name": "RTX 4090"}]
TWO_AMD = [{"vendor": "amd", "arch": "gfx90a", "vram_mb": 65520, "name": "MI210"},
           {"vendor": "amd", "arch": "gfx1100", "vram_mb": 24560, "name": "RX 7900 XTX"}]
STANDIN = str(Path(__file__).resolve().parent / "join_standin.py")


def masked_join(tmp_path, gpus, offer, **masks):
    """`fdlenv join --devices OFFER` under the masks, the stand-in agent recording its spec."""
    env = {k: v for k, v in os.environ.items() if not k.endswith("_VISIBLE_DEVICES")}
    env.update({"FLODL_TESTING_GPU_JSON": json.dumps(gpus), "FLODL_HOME": str(tmp_path / "home"),
                "HOME": str(tmp_path), **masks})
    return subprocess.run([sys.executable, "-m", "fdlenv", "join", "127.0.0.1:9", "--bin", sys.executable,
                           "--no-sig-probe", "--devices", offer, "--", STANDIN, str(tmp_path / "out"), "0"],
                          capture_output=True, text=True, cwd=tmp_path, env=env, timeout=120)


def shipped_devices(tmp_path) -> list[int]:
    agent = json.loads((tmp_path / "out" / "agent0.json").read_text())
    return json.loads(bytes.fromhex(agent["env"]["FLODL_INTERNAL_AGENT_JSON"]))["local_devices"]


def test_under_cuda_visible_devices_1_device_0_is_the_visible_card_and_the_agent_gets_ordinal_0(tmp_path):
    r = masked_join(tmp_path, TWO_GPUS, "0", CUDA_VISIBLE_DEVICES="1")
    assert (r.returncode, errors(r)) == (0, []), r.stderr
    assert shipped_devices(tmp_path) == [0]      # cuda:0 of a runtime that sees only the RTX 4090


def test_under_cuda_visible_devices_1_the_physical_id_1_is_refused_naming_the_visible_card(tmp_path):
    r = masked_join(tmp_path, TWO_GPUS, "1", CUDA_VISIBLE_DEVICES="1")
    assert r.returncode == 2 and not (tmp_path / "out").exists()
    assert errors(r) == ["error: --devices 1: this box has 1 GPU visible after the visibility masks "
                         "(nvidia 0: RTX 4090, physical 1); accepted: all, or distinct indices 0..0"]


def test_a_reordering_mask_numbers_the_cards_in_its_order(tmp_path):
    r = masked_join(tmp_path, TWO_GPUS, "1,0", CUDA_VISIBLE_DEVICES="1,0")
    assert r.returncode == 0, r.stderr
    assert shipped_devices(tmp_path) == [1, 0]


def test_amd_counts_hip_over_what_rocr_left(tmp_path):
    """ROCR_VISIBLE_DEVICES=1 leaves the RX 7900 alone, as ordinal 0; HIP's 0 is then that card."""
    ok = masked_join(tmp_path, TWO_AMD, "0", ROCR_VISIBLE_DEVICES="1", HIP_VISIBLE_DEVICES="0")
    assert ok.returncode == 0, ok.stderr
    assert shipped_devices(tmp_path) == [0]
    bad = masked_join(tmp_path, TWO_AMD, "1", ROCR_VISIBLE_DEVICES="1")
    assert bad.returncode == 2 and errors(bad)[0].endswith("(amd 0: RX 7900 XTX, physical 1); accepted: all, or "
                                                           "distinct indices 0..0")


@pytest.mark.parametrize("offer", ["", "0,,1", "0,", ",1", " "])
def test_an_empty_piece_is_refused_as_flodl_refuses_it(tmp_path, offer):
    r = fdlenv(tmp_path, TWO_GPUS, *DIAL, "--devices", offer)
    assert r.returncode == 2
    assert errors(r) == [f"error: invalid --devices {offer!r}: expected e.g. `0,1` or `all`"]
