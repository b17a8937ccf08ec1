"""This machine's conda platform, and the oldest host a lock's linux builds assume.

A name, read once by whoever needs it: the settings (which platform a command
serves), the store (which platform an env is keyed to), `fdlenv lock` (which
platform to solve for) and `fdlenv pack` (what a packed libtorch depends on).
"""

from __future__ import annotations

import os
import sys

# PyTorch 2.10's linux artifacts are manylinux_2_28 builds: glibc 2.28 is the
# oldest host they run on, so it is the one declared.
GLIBC_BASELINE = "2.28"
LINUX_BASELINE = "4.18"   # the kernel of the same (RHEL 8) baseline


def this_platform() -> str:
    """conda's subdir for this machine (linux-64, linux-aarch64, osx-arm64, ...)."""
    machine = os.uname().machine.lower()
    os_name = {"linux": "linux", "darwin": "osx", "win32": "win"}.get(sys.platform, sys.platform)
    arch = {"x86_64": "64", "amd64": "64", "aarch64": "aarch64", "arm64": "arm64",
            "ppc64le": "ppc64le"}.get(machine, machine)
    if os_name == "osx" and arch == "aarch64":
        arch = "arm64"
    return f"{os_name}-{arch}"
