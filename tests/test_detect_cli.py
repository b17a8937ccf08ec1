"""`fdlenv detect`: the --json object, the human table, exit codes, and the no-GPU cost."""

import argparse
import json
import subprocess
import sys

import pytest

from fdlenv.front.commands import detect
from fdlenv.base.errors import Fail
from fdlenv.hw.model import SPOOF_VAR as VAR

BOX = {"devices": [{"vendor": "nvidia", "arch": "sm_120", "vram_mb": 32607, "name": "RTX 5090"},
                   {"vendor": "amd", "arch": "gfx1100", "vram_mb": 24560, "name": "RX 7900 XTX"}],
       "driver_cuda": "12.8", "host_rocm": "7.1.0"}


def parser():
    p = argparse.ArgumentParser(prog="fdlenv")
    detect.add_parser(p.add_subparsers(dest="command"))
    return p


def run(argv, monkeypatch, spoof):
    monkeypatch.setenv(VAR, json.dumps(spoof))
    for var in ("CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES"):
        monkeypatch.delenv(var, raising=False)
    args = parser().parse_args(argv)
    return args.func(args)


def test_json_is_exactly_one_object_of_the_contract_shape(monkeypatch, capsys):
    assert run(["detect", "--json"], monkeypatch, BOX) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and err == ""
    doc = json.loads(out)
    assert list(doc) == ["schema", "devices", "findings", "driver", "auto"] and doc["schema"] == 1
    assert doc["devices"][0] == {"vendor": "nvidia", "index": 0, "name": "RTX 5090", "arch": "12.0", "vram_mb": 32607}
    assert doc["devices"][1]["index"] == 0 and doc["devices"][1]["arch"] == "gfx1100"
    assert doc["driver"] == {"nvidia": None, "cuda": "12.8", "rocm": "7.1.0"}
    assert doc["auto"]["variant"] == "cu128" and "rocm7.1" in doc["auto"]["reason"]


def test_json_reports_masks_as_findings(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "-1")
    monkeypatch.setenv(VAR, json.dumps(BOX))
    args = parser().parse_args(["detect", "--json"])
    assert args.func(args) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["devices"] == []  # HIP falls back to CUDA_VISIBLE_DEVICES: both vendors hidden
    assert [(f["kind"], "hides all 1" in f["message"]) for f in doc["findings"]] == [("mask_applied", True)] * 2
    assert doc["auto"]["variant"] == "cpu"


def test_no_variant_is_null_with_the_fix_and_still_exit_0(monkeypatch, capsys):
    assert run(["detect", "--json"], monkeypatch, {**BOX, "devices": BOX["devices"][:1], "driver_cuda": "12.6"}) == 0
    auto = json.loads(capsys.readouterr().out)["auto"]
    assert auto["variant"] is None and "update the NVIDIA driver" in auto["reason"]


def test_the_human_table_is_the_result_on_stdout(monkeypatch, capsys):
    assert run(["detect"], monkeypatch, BOX) == 0
    out, err = capsys.readouterr()
    assert err == ""
    rows = out.splitlines()
    assert any("nvidia" in r and "12.0" in r and "32607 MiB" in r and "RTX 5090" in r for r in rows)
    assert any(r.startswith("auto: cu128: ") for r in rows)
    assert any("CUDA 12.8" in r and "ROCm 7.1.0" in r for r in rows)


def test_the_human_table_says_none_and_the_findings(monkeypatch, capsys):
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    monkeypatch.setenv(VAR, json.dumps(BOX["devices"][:1]))
    args = parser().parse_args(["detect"])
    args.func(args)
    out = capsys.readouterr().out
    assert "(none)" in out and "finding [mask_applied]" in out and "auto: cpu" in out


def test_a_malformed_spoof_fails_permanently(monkeypatch):
    monkeypatch.setenv(VAR, "[{")
    args = parser().parse_args(["detect", "--json"])
    with pytest.raises(Fail) as e:
        args.func(args)
    assert e.value.exit_code == 2 and VAR in e.value.message


def test_help_shows_examples():
    text = parser()._subparsers._group_actions[0].choices["detect"].format_help()
    assert "fdlenv detect --json" in text and "CUDA_VISIBLE_DEVICES=1 fdlenv detect" in text


def test_a_box_without_gpus_is_fast_and_loads_nothing(tmp_path):
    """Gates are plain stat calls: no vendor module, no pynvml/amdsmi, no subprocess, well under 50 ms."""
    code = f"""
import sys, time
from fdlenv.hw.survey import survey
from fdlenv.hw.routing import route
root = {str(tmp_path)!r}
best = 1.0
for _ in range(5):
    t = time.perf_counter()
    s = survey(root + "/sys", root + "/opt/rocm", {{}}, dev_root=root + "/dev", proc_root=root + "/proc")
    r = route(s)
    best = min(best, time.perf_counter() - t)
loaded = sorted(m for m in ("pynvml", "amdsmi", "subprocess", "fdlenv.hw.nvidia", "fdlenv.hw.amd",
                             "fdlenv.hw.spoof") if m in sys.modules)
print(json.dumps([len(s.devices), r.variant, loaded, best]))
"""
    r = subprocess.run([sys.executable, "-c", "import json" + code], capture_output=True, text=True, timeout=60)
    assert r.returncode == 0, r.stderr
    devices, variant, loaded, best = json.loads(r.stdout)
    assert (devices, variant, loaded) == (0, "cpu", [])
    assert best < 0.05
