"""Deployment recipes around `fdlenv join` (flodl ships the same for `fdl join`).

A golden image bakes the `join:` block into fdl.yml and boots into a bare
`fdlenv join --persist` under systemd; a cloud image gets there from user-data.
- `systemd`: the unit, hardened, restarting forever but not on exit 2;
- `cloudinit`: a #cloud-config that installs fdlenv and that unit;
- `plan`: what both read from their flags, the `--` tail and fdl.yml.
No recipe ever writes the session token into a unit or onto a command line: a
root-only file reaches the service as a systemd credential (`config.token`).
"""

from __future__ import annotations

from .systemd import systemd_quote, systemd_unit

__all__ = ["systemd_quote", "systemd_unit"]
