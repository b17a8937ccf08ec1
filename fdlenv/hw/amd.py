"""AMD devices from the kernel's KFD topology in sysfs, amdsmi as an enricher.

sysfs first because it is cheap, needs no ROCm userspace and spawns nothing;
survey imports this module only when `gates.amd_present` says there is
something to look at.
A node is an AMD GPU iff vendor_id 4098 (0x1002) and simd_count > 0 (the CPU
node has simd 0; NVIDIA's open module registers KFD nodes as 4318). Nodes are
taken in numeric order, which is HIP's device order.

The usability gate runs in the reference's order, each failure a
hardware_unusable finding instead of devices: PCI hint when KFD shows no GPU,
/dev/kfd present, a ROCm runtime (env roots before the default root so a
stale /opt/rocm cannot shadow), /dev/kfd read+write for this identity.

amdsmi only renames devices (its market name beats "AMD GPU gfx90a"). Its
import raises KeyError and prints to stdout when libamd_smi.so is absent,
hence `except Exception` and a redirected stdout: `--json` stays one object.
"""

from __future__ import annotations

import contextlib
import io
import os
import re
from collections.abc import Mapping
from pathlib import Path

from ..base.record import Record
from .gates import kfd_nodes, pci_amd_display
from .model import AMD, HARDWARE_UNUSABLE, UNPARSABLE, Device, Finding

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    # amdsmi has no stubs: the module, or a test's stand-in for it, is taken as it comes.
    Smi = Any

AMD_VENDOR_ID = 4098
MIB = 1024 * 1024
RUNTIME_LIBS = ("libhsa-runtime64.so", "libhsa-runtime64.so.1")
ROCM_ENV = ("ROCM_PATH", "HIP_PATH", "HSA_PATH")

_VERSION = re.compile(r"\d+\.\d+(?:\.\d+)?")


class AmdProbe(Record):
    """What the probe found. A `Record` (a tuple at run time), as is `Identity`:
    dataclasses would cost detect more to import than its whole probe."""

    devices: tuple[Device, ...] = ()
    findings: tuple[Finding, ...] = ()
    host_rocm: str | None = None


class Identity(Record):
    """Who asks for /dev/kfd: effective uid, gid and supplementary groups (a frozenset)."""

    uid: int
    gid: int
    groups: frozenset[int]

    @classmethod
    def current(cls) -> Identity:
        return cls(os.geteuid(), os.getegid(), frozenset(os.getgroups()))


def properties(path: Path) -> dict[str, int]:
    """KFD `key value` lines; keys are whole words, non-integer values skipped."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        parts = line.split()
        if len(parts) == 2 and parts[1].lstrip("-").isdigit():
            out[parts[0]] = int(parts[1])
    return out


def gfx_name(version: int) -> str:
    """gfx_target_version -> target; the stepping is a hex digit (90010 -> gfx90a)."""
    major, minor, step = version // 10000, version // 100 % 100, version % 100
    return f"gfx{major}{minor}{step:x}"


def _vram_mb(node: Path) -> int:
    sizes = [properties(p).get("size_in_bytes", 0) for p in sorted(node.glob("mem_banks/*/properties"))]
    return max(sizes, default=0) // MIB


def _gpu_nodes(sysfs_root: Path) -> tuple[list[tuple[int, Device]], list[Finding]]:
    """(KFD node id, device) for each AMD GPU node, and findings for bad ones."""
    nodes_dir = Path(kfd_nodes(sysfs_root))
    try:
        names = sorted((n for n in os.listdir(nodes_dir) if n.isdigit()), key=int)
    except OSError:
        return [], []
    found: list[tuple[int, Device]] = []
    notes: list[Finding] = []
    for name in names:
        node = nodes_dir / name
        try:
            props = properties(node / "properties")
        except OSError:
            continue  # a node that vanished mid-read (hot unplug) is no device
        if props.get("vendor_id") != AMD_VENDOR_ID or props.get("simd_count", 0) <= 0:
            continue
        target = props.get("gfx_target_version", 0)
        if target <= 0:
            notes.append(Finding(UNPARSABLE, f"KFD node {name}: AMD GPU without a gfx_target_version; skipped"))
            continue
        gfx = gfx_name(target)
        unique = props.get("unique_id", 0)
        uuid = f"GPU-{unique:016x}" if unique > 0 else None
        found.append((int(name), Device(AMD, len(found), f"AMD GPU {gfx}", gfx, _vram_mb(node), uuid)))
    return found, notes


def rocm_runtime(environ: Mapping[str, str], rocm_root: Path) -> Path | None:
    """The first ROCm root holding the HSA runtime; env roots before the default."""
    roots = [Path(environ[v]) for v in ROCM_ENV if environ.get(v)] + [rocm_root]
    for root in roots:
        if any((root / lib / so).exists() for lib in ("lib", "lib64") for so in RUNTIME_LIBS):
            return root
    return None


def rocm_version(root: Path) -> str | None:
    """`<root>/.info/version` ("7.1.0-38" -> "7.1.0"), None when absent or odd."""
    try:
        m = _VERSION.match((root / ".info" / "version").read_text().strip())
    except OSError:
        return None
    return m.group(0) if m else None


def rw_allowed(mode: int, owner: int, group: int, who: Identity) -> bool:
    """Kernel permission order: root bypass, then owner, group, other bits."""
    if who.uid == 0:
        return True
    if owner == who.uid:
        bits = mode >> 6
    elif group == who.gid or group in who.groups:
        bits = mode >> 3
    else:
        bits = mode
    return bits & 0o6 == 0o6


def _unusable(message: str, host_rocm: str | None = None) -> AmdProbe:
    return AmdProbe(findings=(Finding(HARDWARE_UNUSABLE, message),), host_rocm=host_rocm)


def probe(sysfs_root: Path, dev_root: Path, rocm_root: Path, environ: Mapping[str, str],
          who: Identity | None = None, smi: Smi | None = None) -> AmdProbe:
    """AMD's usable devices; `who` and `smi` (an amdsmi-like module) are injectable for tests."""
    runtime = rocm_runtime(environ, rocm_root)
    host_rocm = rocm_version(runtime) if runtime else None
    nodes, notes = _gpu_nodes(sysfs_root)
    if not nodes:
        if not notes and pci_amd_display(sysfs_root):
            return _unusable("an AMD display device is on PCI but KFD shows no GPU: load the amdgpu driver, "
                             "or in a container pass --device=/dev/kfd --device=/dev/dri", host_rocm)
        return AmdProbe(findings=tuple(notes), host_rocm=host_rocm)
    kfd = dev_root / "kfd"
    try:
        st = kfd.stat()
    except OSError:
        return _unusable(f"KFD lists {len(nodes)} AMD GPU(s) but {kfd} is missing "
                         "(in a container pass --device=/dev/kfd --device=/dev/dri)", host_rocm)
    if runtime is None:
        return _unusable(f"{len(nodes)} AMD GPU(s) present but no ROCm runtime (libhsa-runtime64.so under lib "
                         f"or lib64 of ${', $'.join(ROCM_ENV)} or {rocm_root}): install ROCm 7.x")
    if not rw_allowed(st.st_mode, st.st_uid, st.st_gid, who or Identity.current()):
        return _unusable(f"{kfd} is not readable and writable by this user: add the user to the render and "
                         "video groups", host_rocm)
    return AmdProbe(tuple(_enrich(nodes, smi)), tuple(notes), host_rocm)


def _enrich(nodes: list[tuple[int, Device]], smi: Smi | None) -> list[Device]:
    """Market names from amdsmi, matched by KFD node id; any trouble keeps sysfs names."""
    names: dict[int, str] = {}
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            if smi is None:
                import amdsmi
                smi = amdsmi
            smi.amdsmi_init()
            try:
                for h in smi.amdsmi_get_processor_handles():
                    node = smi.amdsmi_get_gpu_kfd_info(h)["node_id"]
                    market = smi.amdsmi_get_gpu_asic_info(h)["market_name"]
                    if isinstance(node, int) and market and market != "N/A":
                        names[node] = market
            finally:
                smi.amdsmi_shut_down()
    except Exception:  # noqa: BLE001 - amdsmi's import raises KeyError; any failure only costs the nicer name
        return [d for _, d in nodes]
    return [d._replace(name=names.get(node, d.name)) for node, d in nodes]
