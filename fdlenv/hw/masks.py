"""Vendor visibility masks: the devices a child process will actually see, numbered as it will.

NVIDIA reads `CUDA_VISIBLE_DEVICES`. AMD applies two layers, as ROCm does: ROCr's
`ROCR_VISIBLE_DEVICES` picks from the driver's devices, then HIP's
`HIP_VISIBLE_DEVICES` (or `CUDA_VISIBLE_DEVICES`, which HIP honours when its own
is unset) picks from what ROCr left, by the ordinals ROCr gave them. Set-but-empty
counts as set: an empty value (or `-1`) hides the vendor. Entries are indices or
UUIDs (`GPU-...`, any unique prefix); like the runtimes, parsing stops at the first
entry that names no device, so what we report is what the trainer gets.

Kept devices come in mask order and are renumbered 0, 1, ... in that order, as the
runtime numbers them (`cuda:0` is the first entry of the mask): a device's `index` is
what `--devices` and the agent's `local_devices` count, and `physical` keeps the
driver's own index (nvidia-smi's, rocm-smi's) for a person reading `detect`. Every
device a mask hides is said in a finding, by the index it had before that mask.
"""

from __future__ import annotations

from collections.abc import Mapping

from .model import AMD, MASK_APPLIED, NVIDIA, VENDORS, Device, Finding

MASK_VARS = {
    NVIDIA: ("CUDA_VISIBLE_DEVICES",),
    AMD: ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES"),
}


def mask_var(vendor: str, environ: Mapping[str, str]) -> str | None:
    """The variable that governs `vendor`'s visibility last (the one a person sets to choose
    among what is left), None when unmasked."""
    return next((v for v in MASK_VARS[vendor] if v in environ), None)


def layers(vendor: str, environ: Mapping[str, str]) -> tuple[str, ...]:
    """The masks `vendor`'s runtime applies, in order: NVIDIA's one; AMD's ROCr layer, then
    HIP's (HIP_VISIBLE_DEVICES, else CUDA_VISIBLE_DEVICES)."""
    if vendor == NVIDIA:
        return tuple(v for v in MASK_VARS[NVIDIA] if v in environ)
    rocr = ("ROCR_VISIBLE_DEVICES",) if "ROCR_VISIBLE_DEVICES" in environ else ()
    hip = next((v for v in ("HIP_VISIBLE_DEVICES", "CUDA_VISIBLE_DEVICES") if v in environ), None)
    return rocr + ((hip,) if hip else ())


def _uuid_key(text: str) -> str:
    t = text.strip().lower()
    return t[4:] if t.startswith("gpu-") else t


def _select(entry: str, devices: list[Device]) -> list[Device]:
    if entry.isdigit():
        return [d for d in devices if d.index == int(entry)]
    key = _uuid_key(entry)
    return [d for d in devices if key and d.uuid and _uuid_key(d.uuid).startswith(key)]


def _visible(vendor: str, devices: list[Device], var: str, value: str) -> tuple[list[Device], list[Finding]]:
    """What one mask keeps of `devices` (numbered by the layer below it), renumbered."""
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
    renumbered = [d._replace(index=i, physical=d.index if d.physical is None else d.physical)
                  for i, d in enumerate(kept)]
    if hidden:
        moved = any(d.index != k.index for d, k in zip(renumbered, kept, strict=True))
        notes.append(Finding(MASK_APPLIED, f"{var}={value!r} hides {', '.join(hidden)}"
                             + ("; the devices left are numbered from 0 in its order" if moved else "")))
    return renumbered, notes


def apply(devices: tuple[Device, ...], environ: Mapping[str, str]) -> tuple[tuple[Device, ...], tuple[Finding, ...]]:
    """The visible devices, numbered as the runtime numbers them, and the mask findings,
    vendor by vendor."""
    kept: list[Device] = []
    notes: list[Finding] = []
    for vendor in VENDORS:
        mine = [d for d in devices if d.vendor == vendor]
        for var in layers(vendor, environ) if mine else ():
            mine, found = _visible(vendor, mine, var, environ[var])
            notes += found
            if not mine:
                break
        kept += mine
    return tuple(kept), tuple(notes)
