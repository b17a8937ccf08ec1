"""Cheap filesystem gates, checked before any vendor module is even imported.

A box with no GPU must cost almost nothing: these are a few stat calls, and
only an open gate loads `nvidia` (then pynvml) or `amd` (then amdsmi). No
process is ever spawned. The AMD gate also opens on an AMD display device on
PCI without KFD, so the survey can say why that card is not usable.
"""

from __future__ import annotations

import os

# Plain os.path: pathlib (with urllib.parse under it) would cost `detect` on a GPU-less box a
# sixth of its budget, for joining a few names. The roots may be str or Path.


def nvidia_driver(dev_root: str | os.PathLike[str], proc_root: str | os.PathLike[str]) -> bool:
    """The NVIDIA kernel driver is loaded (or its nodes were passed into this container)."""
    return (os.path.exists(os.path.join(dev_root, "nvidiactl"))
            or os.path.exists(os.path.join(proc_root, "driver", "nvidia")))


def kfd_nodes(sysfs_root: str | os.PathLike[str]) -> str:
    return os.path.join(sysfs_root, "class", "kfd", "kfd", "topology", "nodes")


def pci_amd_display(sysfs_root: str | os.PathLike[str]) -> bool:
    """An AMD display-class device on PCI (vendor 0x1002, class 0x03xxxx)."""
    base = os.path.join(sysfs_root, "bus", "pci", "devices")
    try:
        slots = os.listdir(base)
    except OSError:
        return False
    for slot in slots:
        try:
            with open(os.path.join(base, slot, "vendor")) as f:
                if f.read().strip() != "0x1002":
                    continue
            with open(os.path.join(base, slot, "class")) as f:
                if f.read().strip().startswith("0x03"):
                    return True
        except OSError:
            continue
    return False


def amd_present(sysfs_root: str | os.PathLike[str]) -> bool:
    return os.path.isdir(kfd_nodes(sysfs_root)) or pci_amd_display(sysfs_root)
