"""Vendor visibility masks: the devices a child process will actually see.

NVIDIA reads `CUDA_VISIBLE_DEVICES`. AMD reads the FIRST SET variable among
`HIP_VISIBLE_DEVICES`, `ROCR_VISIBLE_DEVICES`, `CUDA_VISIBLE_DEVICES` (HIP
honours CUDA's name too); set-but-empty counts as set, so an empty HIP value
hides everything rather than falling through. Empty or `-1` hides the vendor.
Entries are per-vendor indices or UUIDs (`GPU-…`, any unique prefix); like the
runtimes, parsing stops at the first entry that names no device, so what we
report is what the trainer gets. Kept devices come in mask order and keep
their physical index. Every device a mask hides is said in a finding.
"""

from __future__ import annotations

from collections.abc import Mapping

from .model import AMD, MASK_APPLIED, NVIDIA, VENDORS, Device, Finding

MASK_VARS = {
    NVIDIA: ("CUDA_VISIBLE_DEVICES",),
    AMD: ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
}


def mask_var(vendor: str, environ: Mapping[str, str]) -> str | None:
    """The variable that governs `vendor`'s visibility, None when unmasked."""
    return next((v for v in MASK_VARS[vendor] if v in environ), None)


def _uuid_key(text: str) -> str:
    t = text.strip().lower()
    return t[4:] if t.startswith("gpu-") else t


def _select(entry: str, devices: list[Device]) -> list[Device]:
    if entry.isdigit():
        return [d for d in devices if d.index == int(entry)]
    key = _uuid_key(entry)
    return [d for d in devices if key and d.uuid and _uuid_key(d.uuid).startswith(key)]


def _visible(vendor: str, devices: list[Device], var: str, value: str) -> tuple[list[Device], list[Finding]]:
    if value.strip() in ("", "-1"):
        return [], [Finding(MASK_APPLIED, f"{var}={value!r} hides all {len(devices)} {vendor} device(s)")]
    kept: list[Device] = []
    notes: list[Finding] = []
    for entry in (e.strip() for e in value.split(",")):
        match = _select(entry, devices)
        if len(match) != 1:
            why = "is ambiguous" if match else "names no " + vendor + " device"
            notes.append(Finding(MASK_APPLIED, f"{var} entry {entry!r} {why}; the runtime ignores it and every entry after it"))
            break
        if match[0] not in kept:
            kept.append(match[0])
    hidden = [d.label for d in devices if d not in kept]
    if hidden:
        notes.append(Finding(MASK_APPLIED, f"{var}={value!r} hides {', '.join(hidden)}"))
    return kept, notes


def apply(devices: tuple[Device, ...], environ: Mapping[str, str]) -> tuple[tuple[Device, ...], tuple[Finding, ...]]:
    """The visible devices and the mask findings, vendor by vendor."""
    kept: list[Device] = []
    notes: list[Finding] = []
    for vendor in VENDORS:
        mine = [d for d in devices if d.vendor == vendor]
        var = mask_var(vendor, environ)
        if var is None or not mine:
            kept += mine
            continue
        visible, found = _visible(vendor, mine, var, environ[var])
        kept += visible
        notes += found
    return tuple(kept), tuple(notes)
