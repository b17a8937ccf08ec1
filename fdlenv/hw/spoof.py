"""`FLODL_TESTING_GPU_JSON` (SPOOF_VAR): a declared hardware set that replaces the probes.

Checked before any probe so tests, CI and image-baking hosts never need a GPU
(nor load NVML). Visibility masks still apply on top, exactly as on real
hardware. A blank value is ignored; a malformed one is a permanent failure
naming the variable and the accepted forms, never a silent fallback to the
real hardware.
"""

from __future__ import annotations

import json

from ..base.errors import Fail
from ..base.record import Record
from .coverage import parse_cc, parse_gfx
from .model import AMD, NVIDIA, SPOOF_VAR, VENDORS, Device

FORMS = ('a JSON list of {"vendor": "nvidia"|"amd", "arch": "8.6"|"sm_86"|"gfx90a", '
         '"vram_mb": N, "name": "...", "uuid": "GPU-..."} (vram_mb, name, uuid optional), '
         'or an object {"devices": [...], "driver_cuda": "12.8", "host_rocm": "7.1.0"}')

_ENVELOPE = {"devices", "driver_cuda", "host_rocm"}
_ENTRY = {"vendor", "arch", "vram_mb", "name", "uuid"}


class Spoof(Record):
    devices: tuple[Device, ...]
    driver_cuda: str | None
    host_rocm: str | None


def _bad(why: str) -> Fail:
    return Fail.permanent(f"{SPOOF_VAR}: {why}; accepted: {FORMS}")


def _is_version(text: str) -> bool:
    """`text` is `\\d+\\.\\d+[\\w.+-]*` whole, by `str` methods (see `coverage`)."""
    major, dot, rest = text.partition(".")
    return (bool(dot) and major.isdecimal() and rest[:1].isdecimal()
            and all(c.isalnum() or c in "_.+-" for c in rest))


def _version(value: object, key: str) -> str | None:
    if value is None:
        return None
    text = str(value) if isinstance(value, (str, float)) else ""
    if not _is_version(text):
        raise _bad(f"{key} must be a version like \"12.8\", got {value!r}")
    return text


def _device(entry: object, ordinals: dict[str, int], pos: int) -> Device:
    if not isinstance(entry, dict):
        raise _bad(f"device {pos} is not an object")
    unknown = set(entry) - _ENTRY
    if unknown:
        raise _bad(f"device {pos} has unknown keys {sorted(unknown)}")
    vendor = entry.get("vendor")
    if vendor not in VENDORS:
        raise _bad(f"device {pos} vendor must be \"nvidia\" or \"amd\", got {vendor!r}")
    raw = entry.get("arch")
    if not isinstance(raw, str):
        raise _bad(f"device {pos} needs an arch string")
    if vendor == NVIDIA:
        cc = parse_cc(raw)
        arch = f"{cc[0]}.{cc[1]}" if cc else None
    else:
        arch = parse_gfx(raw)
    if arch is None:
        raise _bad(f"device {pos} arch {raw!r} is not a {vendor} arch")
    vram = entry.get("vram_mb", 0)
    if not isinstance(vram, int) or isinstance(vram, bool) or vram < 0:
        raise _bad(f"device {pos} vram_mb must be a non-negative integer, got {vram!r}")
    name = entry.get("name", f"{'NVIDIA' if vendor == NVIDIA else 'AMD'} GPU {arch}")
    uuid = entry.get("uuid")
    if not isinstance(name, str) or not (uuid is None or isinstance(uuid, str)):
        raise _bad(f"device {pos} name and uuid must be strings")
    index = ordinals[vendor]
    ordinals[vendor] += 1
    return Device(vendor, index, name, arch, vram, uuid)


def parse(value: str) -> Spoof:
    """The declared set; survey calls this only for a non-blank value."""
    try:
        doc = json.loads(value)
    except ValueError as e:
        raise _bad(f"not JSON ({e})") from None
    envelope: dict[str, object] = {}
    if isinstance(doc, dict):
        unknown = set(doc) - _ENVELOPE
        if unknown:
            raise _bad(f"unknown keys {sorted(unknown)}")
        envelope, doc = doc, doc.get("devices", [])
    if not isinstance(doc, list):
        raise _bad("devices must be a list")
    ordinals = {NVIDIA: 0, AMD: 0}
    devices = tuple(_device(e, ordinals, i) for i, e in enumerate(doc))
    return Spoof(devices, _version(envelope.get("driver_cuda"), "driver_cuda"),
                 _version(envelope.get("host_rocm"), "host_rocm"))
