"""What fdlenv asks of an installer: ranges that leave room for other tools' pins, exact pins only
where fdlenv uses a package's internals, heavy parts as extras that fail with one line when
missing, and CI's exact versions in constraints.txt.

The real fresh-venv install (`pip install . pyyaml==6.0.2 gitpython==3.1.45`) needs the network;
these tests check the same promise offline, on pyproject.toml's own specifiers.
"""

from __future__ import annotations

import re
import subprocess
import sys

from helpers_install import ROOT, clean_environ
from packaging.requirements import Requirement
from packaging.utils import canonicalize_name
from packaging.version import Version

try:
    import tomllib
except ImportError:   # Python 3.10
    from pip._vendor import tomli as tomllib

PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]
EXACT = {"py-rattler", "conda-lock", "uv"}


def requirements(*extras: str) -> dict[str, Requirement]:
    out = {}
    for line in PROJECT["dependencies"] + [r for e in extras for r in PROJECT["optional-dependencies"][e]]:
        req = Requirement(line)
        if canonicalize_name(req.name) != "fdlenv":
            out[canonicalize_name(req.name)] = req
    return out


def test_pyproject_admits_the_versions_other_tools_commonly_pin():
    reqs = requirements()
    assert reqs["pyyaml"].specifier.contains("6.0.2") and reqs["gitpython"].specifier.contains("3.1.45")
    assert reqs["pyyaml"].specifier.contains("6.0.3") and not reqs["pyyaml"].specifier.contains("5.4.1")


def test_only_py_rattler_conda_lock_and_uv_are_pinned_exactly_each_with_its_reason():
    reqs = requirements("lock", "amd", "test")
    pinned = {n for n, r in reqs.items() if any(s.operator in ("==", "===") for s in r.specifier)}
    assert pinned == EXACT
    text = (ROOT / "pyproject.toml").read_text()
    for name in EXACT:
        before = text[:text.index(f'"{name}==')].rstrip().splitlines()
        comment = []
        while before and before[-1].strip().startswith("#"):
            comment.insert(0, before.pop().strip())
        assert comment and comment[0].startswith("# Exact:"), f"{name}: no comment saying why it is exact"


def test_conda_lock_and_amdsmi_are_extras_and_the_test_extra_pulls_in_lock():
    core = requirements()
    assert "conda-lock" not in core and "amdsmi" not in core and "pip" not in core
    assert "conda-lock" in requirements("lock") and "amdsmi" in requirements("amd")
    assert "fdlenv[lock]" in PROJECT["optional-dependencies"]["test"]


def test_constraints_pin_every_dependency_within_pyprojects_ranges():
    pins = {}
    for line in (ROOT / "constraints.txt").read_text().splitlines():
        if line.strip() and not line.startswith("#"):
            name, _, version = line.partition("==")
            assert re.fullmatch(r"[A-Za-z0-9._-]+", name) and version, f"not an exact pin: {line!r}"
            pins[canonicalize_name(name)] = version
    assert "fdlenv" not in pins and "pip" not in pins
    for name, req in requirements("lock", "test").items():
        if name == "pip" or (req.marker and not req.marker.evaluate()):
            continue
        assert name in pins, f"constraints.txt does not pin {name}, which CI installs"
        assert req.specifier.contains(Version(pins[name]), prereleases=True), (name, pins[name], str(req))


def test_fdlenv_lock_check_without_the_lock_extra_names_it_in_one_line(tmp_path):
    """conda-lock not importable, as in a plain install: exit 2, one `error:` line (writing a lock
    needs no extra: tests/test_lock_on_demand.py locks with neither conda-lock nor pip)."""
    for blocked, args in (("conda_lock", ["lock", "--check", "--out", str(ROOT / "conda-lock.yml")]),):
        code = f"import sys; sys.modules[{blocked!r}] = None; from fdlenv.front.cli import main; sys.exit(main())"
        res = subprocess.run([sys.executable, "-c", code, *args, "--home", str(tmp_path / "home")], cwd=tmp_path,
                             capture_output=True, text=True, env=clean_environ())
        assert res.returncode == 2, res.stderr
        errors = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
        assert len(errors) == 1 and "Traceback" not in res.stderr, res.stderr
        assert "pip install 'fdlenv[lock]'" in errors[0] and blocked.replace("_", "-") in errors[0]
        assert not (tmp_path / "l.yml").exists()
