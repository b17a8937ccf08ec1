"""A cloud-config from `fdlenv recipe cloud-init`, booted as far as this machine allows.

Its steps run for real under a scratch root: `write_files` are written with their modes, every
`runcmd` step runs (the venv, `pip install` of the `--install` spec, rustup's guard; `runuser`
dropped, as the test already is one user; `usermod` and `systemctl` only recorded), and then the
unit's own `fdlenv` binary, in the unit's working directory and environment, realises the variant
from the shipped fdl.yml and the lock shipped beside it. What cannot run here is a real boot:
systemd, apt and a login user.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from helpers_install import fdlenv_wheel
from helpers_wheels import make_index, make_wheels, write_wheel_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

USER = "flodl"


def _unit_directives(text: str) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith(("#", "[")):
            k, _, v = line.partition("=")
            out.setdefault(k, []).append(v)
    return out


@pytest.mark.slow
def test_the_cloud_config_boots_into_an_fdlenv_that_realises_from_the_shipped_lock(tmp_path):
    index = make_index(tmp_path / "simple", make_wheels(tmp_path / "built"))
    project = tmp_path / "project"
    write_wheel_env(project / "envs", "cu128")
    lock_envs(project / "envs", project / "fleet.conda-lock.yml", mirrors={"pypi": index}, home=Home(tmp_path / "h"))
    yml = project / "worker.yml"
    yml.write_text(f"join:\n  controller: ctrl.example:1337\n  libtorch: cu128\n"
                   f"fdlenv:\n  lock: fleet.conda-lock.yml\n  mirrors:\n    pypi: {index}\n")
    wheel = fdlenv_wheel(tmp_path / "dist")
    root = tmp_path / "box"
    uhome = f"/home/{USER}"
    res = subprocess.run([sys.executable, "-m", "fdlenv", "recipe", "cloud-init", "--user", USER,
                          "--fdl-yml", str(yml), "--install", f"fdlenv @ {wheel.as_uri()}",
                          "--token-file", "/etc/fdlenv/token"], capture_output=True, text=True)
    assert res.returncode == 0, res.stderr
    doc = yaml.safe_load(res.stdout)

    def here(path: str) -> str:            # the box's paths, under the scratch root
        return str(root) + path if path.startswith("/") else path

    for f in doc["write_files"]:
        dest = Path(here(f["path"]))
        dest.parent.mkdir(parents=True, exist_ok=True)
        dest.write_text(f["content"])
        os.chmod(dest, int(f["permissions"], 8))
    assert (root / f"{uhome.lstrip('/')}/training/fleet.conda-lock.yml").read_text() == \
        (project / "fleet.conda-lock.yml").read_text()
    environ = {**os.environ, "HOME": here(uhome)}
    recorded = []
    for step in doc["runcmd"]:
        argv = [here(a) if a.startswith(uhome) or a.startswith("/home/") else a for a in step]
        if argv[:3] == ["runuser", "-u", USER]:
            argv = argv[4:]
        argv = [a.replace(f"HOME={uhome}", f"HOME={here(uhome)}") for a in argv]
        if argv[0] in ("systemctl",) or "usermod" in " ".join(argv):
            recorded.append(" ".join(argv))
            continue
        if argv[0] == "install":             # `install -d -o USER -g USER -m 0750 DIR`: no such user here
            argv = ["install", "-d", "-m", argv[-2], argv[-1]]
        done = subprocess.run(argv, capture_output=True, text=True, env=environ)
        assert done.returncode == 0, (argv, done.stderr[-2000:])
    assert recorded[-1] == "systemctl enable --now fdlenv-join.service"
    unit = _unit_directives(next(f["content"] for f in doc["write_files"] if f["path"].endswith(".service")))
    start = shlex.split(unit["ExecStart"][0])
    fdlenv_bin = here(start[0])
    assert Path(fdlenv_bin).is_file() and start[1:3] == ["join", "--persist"]
    for line in unit.get("Environment", []):
        k, _, v = shlex.split(line)[0].partition("=")
        if k != "PATH":
            environ[k] = here(v) if v.startswith("/") else v
    environ["FLODL_HOME"] = here(uhome) + "/.flodl"
    workdir = here(unit["WorkingDirectory"][0])
    got = subprocess.run([fdlenv_bin, "env", "realize", "--libtorch", "cu128", "--json"], cwd=workdir,
                         capture_output=True, text=True, env=environ)
    assert got.returncode == 0, got.stderr[-2000:]
    env = json.loads(got.stdout)
    assert env["variant"] == "cu128" and env["path"].startswith(here(uhome))
    assert Path(env["libtorch_root"], "lib", "libtorch.so").is_file()
