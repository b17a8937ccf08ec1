"""Installs as users get them, without the network: a venv with no pip, and fdlenv's own wheel.

`plain_venv` makes a venv with `--without-pip` whose site-packages sees this test run's
installed packages through a `.pth` pointing at a folder of links, less pip, conda-lock and
fdlenv itself: what `uv tool install fdlenv` (no `lock` extra, no pip) leaves on a machine.
`fdlenv_wheel` builds fdlenv's wheel from the checkout (pip's build isolation fetches
setuptools, the one network use) and `install_wheel` puts it into such a venv with this
run's pip (`pip --python`), entry point script included.
"""

from __future__ import annotations

import subprocess
import sys
import sysconfig
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
# Top-level names a plain install does not have (distribution folders match by prefix too).
LEFT_OUT = ("pip", "conda_lock", "fdlenv", "__editable__", "_distutils_hack", "__pycache__")


def _left_out(name: str, leave_out: tuple[str, ...]) -> bool:
    stem = name.split("-")[0].split(".")[0]
    return name.endswith(".pth") or stem in leave_out or name.startswith(("__editable__", "fdlenv"))


def plain_venv(root: Path, leave_out: tuple[str, ...] = LEFT_OUT) -> Path:
    """The venv's python: no pip importable, this run's other packages visible."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root)], check=True, capture_output=True)
    farm = root / "borrowed"
    farm.mkdir()
    seen = set()
    for key in ("purelib", "platlib"):
        site = Path(sysconfig.get_paths()[key])
        if site in seen or not site.is_dir():
            continue
        seen.add(site)
        for entry in site.iterdir():
            if not _left_out(entry.name, leave_out) and not (farm / entry.name).exists():
                (farm / entry.name).symlink_to(entry)
    py = root / "bin" / "python"
    venv_site = Path(subprocess.run([py, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                                    capture_output=True, text=True, check=True).stdout.strip())
    (venv_site / "borrowed.pth").write_text(f"{farm}\n")
    return py


def fdlenv_wheel(out: Path) -> Path:
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(out), str(ROOT)],
                   check=True, capture_output=True)
    (wheel,) = out.glob("fdlenv-*.whl")
    return wheel


def install_wheel(py: Path, wheel: Path) -> None:
    """A regular (non-editable) install into `py`'s venv, by this run's pip from outside it."""
    subprocess.run([sys.executable, "-m", "pip", "--python", str(py), "install", "-q", "--no-deps", "--no-index",
                    str(wheel)], check=True, capture_output=True)


def clean_environ(**extra: str) -> dict[str, str]:
    """os.environ less what points an installer or Python elsewhere, plus `extra`."""
    import os

    env = {k: v for k, v in os.environ.items()
           if not k.startswith(("PIP_", "UV_", "PYTHON")) and k not in ("VIRTUAL_ENV", "XDG_CONFIG_HOME")}
    env.update(extra)
    return env
