"""Installs as users get them, without the network: a venv with no pip, and fdlenv's own wheel.

`plain_venv` makes a venv with `--without-pip` whose site-packages sees this test run's
installed packages through a `.pth` pointing at a folder of links, less pip, conda-lock and
fdlenv itself: what `uv tool install fdlenv` (no `lock` extra, no pip) leaves on a machine.
`fdlenv_wheel` builds fdlenv's wheel from the checkout (pip's build isolation fetches
setuptools, the one network use) and `install_wheel` puts it into such a venv with this
run's pip (`pip --python`), entry point script included.
"""

from __future__ import annotations

import os
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


def _source_digest() -> str:
    """What fdlenv's wheel is built from: the package's files, its command script,
    pyproject.toml and the README."""
    import hashlib

    h = hashlib.sha256()
    for p in sorted([*(ROOT / "fdlenv").rglob("*"), ROOT / "scripts" / "fdlenv", ROOT / "pyproject.toml",
                     ROOT / "README.md"]):
        if p.is_file() and "__pycache__" not in p.parts:
            h.update(str(p.relative_to(ROOT)).encode() + b"\0" + p.read_bytes() + b"\0")
    return h.hexdigest()[:16]


def fdlenv_wheel(out: Path) -> Path:
    """fdlenv's wheel from this checkout, copied into `out`. Built once per source state and
    shared by every test and xdist worker that asks (a build costs seconds: pip fetches
    setuptools into an isolated build env), under a file lock in the system temp dir."""
    import fcntl
    import shutil
    import tempfile

    cache = Path(tempfile.gettempdir()) / f"fdlenv-test-wheel-{_source_digest()}"
    cache.mkdir(exist_ok=True)
    with open(cache / ".lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        built = list(cache.glob("fdlenv-*.whl"))
        if not built:
            tmp = Path(tempfile.mkdtemp(dir=cache))
            subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "-w", str(tmp), str(ROOT)],
                           check=True, capture_output=True)
            (wheel,) = tmp.glob("fdlenv-*.whl")
            os.rename(wheel, cache / wheel.name)
            shutil.rmtree(tmp)
            built = [cache / wheel.name]
    out.mkdir(parents=True, exist_ok=True)
    return Path(shutil.copy2(built[0], out / built[0].name))


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
