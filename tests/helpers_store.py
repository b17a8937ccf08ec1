"""Test helpers for the store: a home with a real local channel and a real lock.

`make_world` builds small conda packages (a libtorch-<variant> per variant,
an activate.d hook with a prefix placeholder and a symlink, a noarch
package), a pure-Python wheel, writes envs/<variant>.yml and locks them with
`fdlenv.lock.lock_envs` (a real rattler solve written by conda-lock's own
models). Nothing in a lock is written by hand.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

from helpers_cli import fdlenv
from helpers_conda import PLACEHOLDER, Pkg, make_channel, make_wheel, write_env

from fdlenv.names.home import Home
from fdlenv.lock import lock_envs


@dataclass
class World:
    home: Home
    lock: Path
    envs: Path
    root: Path


def variant_pkg(variant: str, payload: bytes | None = None, build_number: int = 0, nfiles: int = 0) -> Pkg:
    name = f"libtorch-{variant.replace('.', '')}"
    files = {"libtorch/lib/libtorch.so": payload or f"{variant}-lib".encode(),
             "libtorch/include/torch/torch.h": f"// {variant}\n",
             "libtorch/build-version": "2.10.0+test\n"}
    files.update({f"libtorch/share/many/{i // 100}/f{i}.txt": f"{variant} {i}\n" for i in range(nfiles)})
    return Pkg(name, "2.10.0", build=f"h{build_number}", build_number=build_number,
               depends=["hooks", "common-data"], files=files)


def base_pkgs() -> list[Pkg]:
    return [
        Pkg("hooks", "1.0", activate={"hooks.sh": 'export HOOK_MARK="hooked:$CONDA_PREFIX"\n'},
            prefix_files={"share/hooks/where.txt": f"prefix={PLACEHOLDER}\n"},
            symlinks={"share/hooks/link.txt": "where.txt"},
            files={"bin/hello": "#!/bin/sh\necho hello-from-env\n"}, executables={"bin/hello"}),
        Pkg("common-data", "1.0", noarch="generic", files={"share/common/data.txt": "shared\n"}),
    ]


def make_world(tmp: Path, variants=("cpu",), *, wheel: bool = False, nfiles: int = 0,
               extra: list[Pkg] | None = None) -> World:
    home = Home(tmp / "home")
    make_channel(home.channel, base_pkgs() + [variant_pkg(v, nfiles=nfiles) for v in variants] + (extra or []))
    envs = tmp / "envs"
    for v in variants:
        deps: list = [f"libtorch-{v.replace('.', '')} 2.10.0", "hooks", "common-data"]
        if wheel:
            deps.append({"pip": [str(make_wheel(tmp / "wheels", "tinywheel", "1.0"))]})
        write_env(envs, v, ["flodl"], deps)
    lock = tmp / "conda-lock.yml"
    lock_envs(envs, lock, home=home)
    return World(home, lock, envs, tmp)


def bump_variant(world: World, variant: str = "cpu", payload: bytes = b"cpu-v2") -> None:
    """A new build of the variant's package in the channel, and the lock re-solved onto it."""
    make_channel(world.home.channel, [variant_pkg(variant, payload=payload, build_number=1)])
    lock_envs(world.envs, world.lock, home=world.home)


def realise_json(world: World, variant: str = "cpu", *extra: str) -> dict:
    res = fdlenv("env", "realize", "--libtorch", variant, "--lock", str(world.lock),
                 "--home", str(world.home.root), "--json", *extra, check=True)
    return json.loads(res.stdout)


def visible_envs(home: Home) -> list[Path]:
    return sorted(home.envs.iterdir()) if home.envs.is_dir() else []
