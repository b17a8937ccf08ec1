"""The agent bootstrap spec: what the agent learns about its dial.

flodl's agent reads `FLODL_INTERNAL_AGENT_JSON`: compact JSON, UTF-8, then
lowercase hex two digits per byte (as flodl's `fdl join` does). It rides the environment,
never argv, because it may carry the pre-shared token and argv is readable by
every user through `ps`. Field names are flodl's `AgentSpec`; optional fields
are omitted when unknown, never sent as null; `dataset_sig_hex` is never sent.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from typing import TypedDict

ENV_AGENT_JSON = "FLODL_INTERNAL_AGENT_JSON"


class _AgentJsonAlways(TypedDict):
    host: str
    controller_host: str
    controller_port: int
    libtorch: str


class AgentJson(_AgentJsonAlways, total=False):
    """`AgentSpec.to_dict`: the fields always sent, then the optional ones, each omitted when unknown."""
    salt_hex: str
    local_devices: list[int]
    data_path: str
    run_id: str
    gpu_ram_share: float
    model_sig_hex: str


@dataclass(frozen=True)
class AgentSpec:
    host: str
    controller_host: str            # the *dial* address: 127.0.0.1 under a tunnel
    controller_port: int            # the local forward port under a tunnel
    libtorch: str = ""              # flodl's variant id, e.g. precompiled/cu128; "" if none
    salt_hex: str | None = None     # the token
    local_devices: tuple[int, ...] | None = None
    data_path: str | None = None
    run_id: str | None = None
    gpu_ram_share: float | None = None
    model_sig_hex: str | None = None

    def to_dict(self) -> AgentJson:
        d: AgentJson = {"host": self.host, "controller_host": self.controller_host,
                   "controller_port": int(self.controller_port), "libtorch": self.libtorch}
        if self.salt_hex is not None:
            d["salt_hex"] = self.salt_hex
        if self.local_devices is not None:
            d["local_devices"] = [int(x) for x in self.local_devices]
        if self.data_path is not None:
            d["data_path"] = str(self.data_path)
        if self.run_id is not None:
            d["run_id"] = self.run_id
        if self.gpu_ram_share is not None:
            if not math.isfinite(self.gpu_ram_share):
                raise ValueError("gpu_ram_share must be finite")
            d["gpu_ram_share"] = float(self.gpu_ram_share)
        if self.model_sig_hex is not None:
            d["model_sig_hex"] = self.model_sig_hex
        return d

    def to_json(self) -> str:
        return json.dumps(self.to_dict(), separators=(",", ":"), ensure_ascii=False,
                          allow_nan=False)

    def encode(self) -> str:
        """The value of FLODL_INTERNAL_AGENT_JSON."""
        return hex_encode(self.to_json().encode("utf-8"))


def hex_encode(data: bytes) -> str:
    """Lowercase, two digits per byte: b'\\x00\\xff\\x10' -> '00ff10'."""
    return data.hex()


def decode(value: str) -> dict[str, object]:
    """Inverse of `AgentSpec.encode` (for tests and debugging): the JSON object, unchecked."""
    obj: dict[str, object] = json.loads(bytes.fromhex(value).decode("utf-8"))
    return obj
