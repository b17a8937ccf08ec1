"""The agent spec: exact wire shape, presence rules, lowercase hex."""

from __future__ import annotations

import json

import pytest

from fdlenv.join.spec import ENV_AGENT_JSON, AgentSpec, decode, hex_encode


def test_hex_encode_is_lowercase_bytewise():
    assert hex_encode(b"\x00\xff\x10") == "00ff10"
    assert hex_encode(b"{}") == "7b7d"
    assert hex_encode(bytes(range(256))) == "".join(f"{i:02x}" for i in range(256))


def test_env_name_is_flodls():
    assert ENV_AGENT_JSON == "FLODL_INTERNAL_AGENT_JSON"


def test_agent_spec_shape_is_the_wire_contract_when_everything_is_known():
    sig = "ab" * 32
    spec = AgentSpec(host="box", controller_host="127.0.0.1", controller_port=40123,
                     libtorch="precompiled/cu128", salt_hex="00112233445566778899aabbccddeeff",
                     local_devices=(0, 2), data_path="/data", run_id="r-1", gpu_ram_share=0.5,
                     model_sig_hex=sig)
    enc = spec.encode()
    assert enc == enc.lower() and all(c in "0123456789abcdef" for c in enc)
    raw = bytes.fromhex(enc).decode()
    assert " " not in raw  # compact
    assert json.loads(raw) == {
        "host": "box", "controller_host": "127.0.0.1", "controller_port": 40123,
        "libtorch": "precompiled/cu128", "salt_hex": "00112233445566778899aabbccddeeff",
        "local_devices": [0, 2], "data_path": "/data", "run_id": "r-1", "gpu_ram_share": 0.5,
        "model_sig_hex": sig}
    assert list(json.loads(raw))[:4] == ["host", "controller_host", "controller_port",
                                         "libtorch"]


def test_unknown_fields_are_omitted_never_null():
    d = decode(AgentSpec(host="h", controller_host="c", controller_port=1).encode())
    assert d == {"host": "h", "controller_host": "c", "controller_port": 1, "libtorch": ""}
    assert "dataset_sig_hex" not in d and "null" not in json.dumps(d)


def test_an_empty_device_list_and_a_zero_share_are_known_values():
    d = decode(AgentSpec(host="h", controller_host="c", controller_port=1, local_devices=(),
                         gpu_ram_share=0.0).encode())
    assert d["local_devices"] == [] and d["gpu_ram_share"] == 0.0


def test_non_ascii_survives_the_round_trip():
    d = decode(AgentSpec(host="bôx-ü", controller_host="c", controller_port=1).encode())
    assert d["host"] == "bôx-ü"


def test_a_non_finite_share_is_refused():
    with pytest.raises(ValueError):
        AgentSpec(host="h", controller_host="c", controller_port=1,
                  gpu_ram_share=float("nan")).encode()
