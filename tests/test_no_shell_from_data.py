"""No data ever reaches a shell unquoted: a home path with `$(...)`, backticks, `"` or `$HOME`
activates as the literal path (store/activation.py), and a variable name that is not a name is
never printed by `shell-hook` (shells.render, activation.restored)."""

from __future__ import annotations

import json
import os
import subprocess

import pytest
from helpers_cli import fdlenv
from helpers_store import make_world

from fdlenv.names.home import Home

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


@pytest.mark.parametrize("odd", ['h$(touch "$MARK")x', "h`touch $MARK`x", 'h"quote', "h$HOME"])
def test_a_home_path_a_shell_would_expand_activates_as_the_literal_path(tmp_path, odd):
    (tmp_path / odd).mkdir()
    w = make_world(tmp_path / odd)
    home = w.home.root
    mark = tmp_path / "ran"
    env = {"MARK": str(mark)}
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(home), "--json",
                 env=env)
    assert res.returncode == 0, res.stderr
    path = json.loads(res.stdout)["path"]
    assert path.startswith(str(home))
    res = fdlenv("run", "--libtorch", "cpu", "--home", str(home), "--",
                 "sh", "-c", 'printf "%s\\n%s\\n%s" "$FDLENV_PREFIX" "$HOOK_MARK" "$PATH"', env=env)
    assert res.returncode == 0, res.stderr
    prefix, hook, path_var = res.stdout.split("\n", 2)
    assert prefix == path and hook == f"hooked:{path}"
    assert path_var.split(":")[0] == f"{path}/bin"
    hook_out = fdlenv("shell-hook", "--libtorch", "cpu", "--home", str(Home(home).root), env=env)
    assert hook_out.returncode == 0, hook_out.stderr
    shown = subprocess.run(["bash", "--noprofile", "--norc", "-c", hook_out.stdout + 'printf %s "$FDLENV_PREFIX"'],
                           capture_output=True, text=True, env={**os.environ, **env})
    assert shown.stdout == path
    assert not mark.exists(), "a command in the home path was run"


def test_a_name_that_is_not_a_name_is_never_printed_by_shell_hook(tmp_path):
    mark = tmp_path / "ran"
    state = json.dumps({"vars": {f"A;touch {mark};B": [None, "v"], "GOOD": ["was", "now"],
                                 "X": [1, "not a string"]}})
    env = {"_FDLENV_STATE": state, "GOOD": "now", "X": "not a string"}
    for shell in ("sh", "bash", "fish"):
        res = fdlenv("shell-hook", "--deactivate", "--shell", shell, env=env)
        assert res.returncode == 0, res.stderr
        assert "touch" not in res.stdout and "X" not in res.stdout.replace("_FDLENV_STATE", "")
        assert "GOOD" in res.stdout          # the valid entry is still undone
    out = fdlenv("shell-hook", "--deactivate", env=env).stdout
    subprocess.run(["sh", "-c", out], env={**os.environ, **env}, check=True)
    assert not mark.exists()
