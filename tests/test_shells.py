"""Activation a shell user can live with: shell-hook in real bash, zsh, fish and dash, and `run`.

Each shell test runs the real shell with no profile and a small exported
environment, evaluates what `fdlenv shell-hook` prints, and dumps the
environment (`env -0`) at the points that matter. zsh and fish come from
Debian (README's test line installs them); without them these tests fail
under CI rather than skip.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_cli import fdlenv
from helpers_store import make_world, realise_json

from fdlenv.base.flocks import exclusive
from fdlenv.store.leases import store_lock

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

SHELLS = ("bash", "zsh", "fish", "dash")
HOOK = f"{sys.executable} -m fdlenv shell-hook"


def _shell(name: str) -> str:
    path = shutil.which(name)
    if path is None:
        pytest.skip(f"{name} is not installed (apt-get install {name})")
    return path


def _flag(name: str) -> str:
    return {"bash": "bash", "zsh": "zsh", "fish": "fish", "dash": "sh"}[name]


def _script(name: str, steps: list[str], dump: Path) -> str:
    """`steps`: "hook ARGS" (evaluate the hook) or "dump" (append `env -0` to dump.N)."""
    out, n = [], 0
    for step in steps:
        if step == "dump":
            out.append(f"env -0 > {dump}.{n}")
            n += 1
        else:
            args = f"--shell {_flag(name)} {step}"
            out.append(f"{HOOK} {args} | source" if name == "fish" else f'eval "$({HOOK} {args})"')
    return "\n".join(out) + "\n"


def _run_shell(name: str, script: str, env: dict, tmp: Path) -> subprocess.CompletedProcess:
    path = _shell(name)
    argv = {"bash": [path, "--noprofile", "--norc"], "zsh": [path, "-f"],
            "fish": [path, "--no-config"], "dash": [path]}[name]
    f = tmp / f"script.{name}"
    f.write_text(script)
    return subprocess.run([*argv, str(f)], env=env, capture_output=True, text=True, timeout=120)


def _dumps(dump: Path) -> list[dict]:
    out, n = [], 0
    while Path(f"{dump}.{n}").exists():
        raw = Path(f"{dump}.{n}").read_bytes().split(b"\0")
        out.append(dict(item.decode().split("=", 1) for item in raw if b"=" in item))
        n += 1
    return out


@pytest.fixture(scope="module")
def two(tmp_path_factory):
    """A home with cpu and cu126 realised from a real lock."""
    tmp = tmp_path_factory.mktemp("two")
    w = make_world(tmp, variants=("cpu", "cu126"))
    envs = {v: realise_json(w, v) for v in ("cpu", "cu126")}
    return w, envs


def _base_env(w, **extra) -> dict:
    return {"PATH": f"/opt/tool/bin:{os.path.dirname(sys.executable)}:/usr/bin:/bin",
            "LD_LIBRARY_PATH": "/opt/tool/lib", "HOME": os.environ["HOME"], "LANG": "C.UTF-8",
            "FLODL_HOME": str(w.home.root), "VIRTUAL_ENV": "/opt/venv", **extra}


def _comparable(env: dict) -> dict:
    # What the shell itself rewrites between two commands, whatever fdlenv does.
    return {k: v for k, v in env.items() if k not in ("_", "SHLVL", "PWD", "OLDPWD")}


@pytest.mark.parametrize("name", SHELLS)
def test_switching_cpu_to_cu126_leaves_only_cu126_and_deactivate_restores_the_shell_exactly(name, two, tmp_path):
    w, envs = two
    lock = f"--lock {w.lock}"
    script = _script(name, ["dump", f"--libtorch cpu {lock}", "dump", f"--libtorch cu126 {lock}", "dump",
                            "--deactivate", "dump"], tmp_path / "d")
    res = _run_shell(name, script, _base_env(w), tmp_path)
    assert res.returncode == 0, res.stderr
    before, on_cpu, on_cu126, after = _dumps(tmp_path / "d")
    cpu, cu126 = envs["cpu"]["path"], envs["cu126"]["path"]
    assert on_cpu["PATH"].split(":")[0] == f"{cpu}/bin" and on_cpu["LIBTORCH_PATH"].startswith(cpu)
    for var in ("PATH", "LD_LIBRARY_PATH"):
        assert cpu not in on_cu126[var], f"{var} still holds the cpu env: {on_cu126[var]}"
        assert cu126 in on_cu126[var].split(":")[0]
    assert on_cu126["LD_LIBRARY_PATH"].split(":") == [f"{envs['cu126']['libtorch_root']}/lib", "/opt/tool/lib"]
    assert on_cu126["FDLENV_PREFIX"] == cu126 and on_cu126["HOOK_MARK"] == f"hooked:{cu126}"
    assert _comparable(after) == _comparable(before)


@pytest.mark.parametrize("name", SHELLS)
def test_the_prompt_and_shell_owned_variables_are_never_touched(name, two, tmp_path):
    w, _ = two
    env = _base_env(w, PS1="my-prompt$ ", PROMPT_COMMAND="echo pc", PS2="more> ")
    script = _script(name, ["dump", f"--libtorch cpu --lock {w.lock}", "dump"], tmp_path / "d")
    if name != "fish":
        script += 'printf "%s" "$PS1" > ' + str(tmp_path / "ps1") + "\n"
    res = _run_shell(name, script, env, tmp_path)
    assert res.returncode == 0, res.stderr
    before, after = _dumps(tmp_path / "d")
    for var in ("PS1", "PS2", "PROMPT_COMMAND", "SHLVL"):    # a non-interactive bash drops PS1 itself
        assert after.get(var) == before.get(var)
    assert after["PROMPT_COMMAND"] == "echo pc"
    if name != "fish":
        assert (tmp_path / "ps1").read_text() == ("" if name == "bash" else "my-prompt$ ")
    hook = fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(w.lock), env=env, check=True).stdout
    assert not re.search(r"(^|\s)(PS1|PS2|PROMPT_COMMAND|SHLVL)\b", hook, re.M), hook
    cached = "".join(p.read_text() for p in (w.home.cache / "activation").iterdir())
    assert not re.search(r'"(PS1|PS2|PROMPT_COMMAND|SHLVL|_)"', cached), cached


def test_shell_hook_json_carries_pixis_environment_variables_key(two):
    w, envs = two
    out = json.loads(fdlenv("shell-hook", "--libtorch", "cu126", "--lock", str(w.lock), "--json",
                            env=_base_env(w), check=True).stdout)
    ev = out["environment_variables"]
    assert ev["FDLENV_PREFIX"] == envs["cu126"]["path"] and ev["FDL_GPU_FEATURE"] == "cuda"
    assert out["variant"] == "cu126" and out["label"] == "precompiled/cu126"
    assert all(isinstance(v, str) for v in ev.values())


def test_deactivate_in_a_shell_never_activated_changes_nothing(two):
    w, _ = two
    res = fdlenv("shell-hook", "--deactivate", env=_base_env(w), check=True)
    assert res.stdout == ""


def test_run_and_shell_hook_need_no_lock_for_a_realised_variant(two, tmp_path):
    w, envs = two
    fdlenv("env", "use", "cpu", "--home", str(w.home.root), check=True)
    env = _base_env(w)
    # no lock anywhere near the cwd, no --lock: the active env, then the pointed one
    res = fdlenv("run", "sh", "-c", 'echo "$FDLENV_PREFIX"', env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    assert res.stdout.strip() == envs["cpu"]["path"]
    res = fdlenv("run", "--libtorch", "cu126", "printenv", "LIBTORCH_PATH", env=env, cwd=tmp_path)
    assert res.returncode == 0 and res.stdout.strip() == envs["cu126"]["libtorch_root"], res.stderr
    hook = fdlenv("shell-hook", "--libtorch", "cu126", env=env, cwd=tmp_path, check=True).stdout
    assert f"export FDLENV_PREFIX={envs['cu126']['path']}" in hook


def test_run_takes_the_command_without_a_double_dash_and_keeps_a_later_one(two, tmp_path):
    w, _ = two
    env = _base_env(w)
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), "echo", "a", "--libtorch", "--", "b", env=env)
    assert res.returncode == 0 and res.stdout == "a --libtorch -- b\n", res.stderr
    # fdl's global selectors are read only before CMD: from CMD on, every word is CMD's own
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), "sh", "-c", 'echo "$*|${FDL_ENV-unset}"', "x",
                 "--env", "farm", "@y", "-q", env=env)
    assert res.returncode == 0 and res.stdout == "--env farm @y -q|unset\n", res.stderr
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), env=env)
    assert res.returncode == 2 and "no command" in res.stderr and "CMD" in res.stderr


def test_run_exit_codes_are_a_shells(two, tmp_path):
    w, _ = two
    env = _base_env(w)
    base = ["run", "--libtorch", "cpu", "--lock", str(w.lock)]
    assert fdlenv(*base, "sh", "-c", "exit 7", env=env).returncode == 7
    missing = fdlenv(*base, "no-such-command-xyz", env=env)
    assert missing.returncode == 127 and "not found" in missing.stderr
    plain = tmp_path / "plain.txt"
    plain.write_text("not a program\n")
    refused = fdlenv(*base, str(plain), env=env)
    assert refused.returncode == 126 and "cannot execute" in refused.stderr


def test_ctrl_c_before_the_command_starts_exits_130(tmp_path):
    w = make_world(tmp_path)
    cmd = [sys.executable, "-m", "fdlenv", "run", "--libtorch", "cpu", "--lock", str(w.lock),
           "--home", str(w.home.root), "true"]
    with exclusive(store_lock(w.home.locks), "the test"):
        proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        assert "waiting for" in proc.stderr.readline()      # the barrier: it waits on the store
        proc.send_signal(signal.SIGINT)
        _out, err = proc.communicate(timeout=60)
    assert proc.returncode == 130, err
    assert "Traceback" not in err


def test_a_closed_stdout_is_quiet(two):
    w, _ = two
    r, wfd = os.pipe()
    os.close(r)                        # the reader is gone before anything is written
    try:
        res = subprocess.run([sys.executable, "-m", "fdlenv", "shell-hook", "--libtorch", "cpu",
                              "--lock", str(w.lock)], stdout=wfd, stderr=subprocess.PIPE, text=True,
                             env={**os.environ, **_base_env(w)})
    finally:
        os.close(wfd)
    assert res.stderr == "" and res.returncode == 141


def _absolute_pointer(home, env: dict) -> None:
    """The precompiled pointer as an older fdlenv left it: an absolute link."""
    pre = home / "libtorch" / "precompiled" / "cpu"
    os.unlink(pre)
    os.symlink(f"{home}/envs/{Path(env['path']).name}/libtorch", pre)


def test_a_moved_home_works_with_run_and_shell_hook_and_verify_reports_and_repairs_it(tmp_path):
    w = make_world(tmp_path, variants=("cpu",))
    old = realise_json(w)
    fdlenv("env", "use", "cpu", "--home", str(w.home.root), check=True)
    _absolute_pointer(w.home.root, old)
    fdlenv("run", "true", env={"FLODL_HOME": str(w.home.root)}, check=True)   # captures at the old path
    moved = tmp_path / "moved"
    os.rename(w.home.root, moved)
    env = {"FLODL_HOME": str(moved)}
    name = Path(old["path"]).name
    new_path = str(moved / "envs" / name)
    pointer = moved / "libtorch" / "precompiled" / "cpu"

    report = fdlenv("env", "verify", "--json", env=env)
    assert report.returncode == 2
    out = json.loads(report.stdout)
    assert out["envs"][0]["moved_from"] == old["path"] and out["envs"][0]["ok"]
    assert [x["link"] for x in out["links"]] == [str(pointer)]

    res = fdlenv("run", "sh", "-c", 'echo "$FDLENV_PREFIX|$LIBTORCH_PATH|$LD_LIBRARY_PATH"; hello', env=env, cwd=tmp_path)
    assert res.returncode == 0, res.stderr
    prefix, libtorch, ld = res.stdout.splitlines()[0].split("|")
    assert prefix == new_path and libtorch == f"{new_path}/libtorch" and ld.split(":")[0] == f"{new_path}/libtorch/lib"
    assert res.stdout.splitlines()[1] == "hello-from-env"
    hook = fdlenv("shell-hook", "--libtorch", "cpu", env=env, cwd=tmp_path, check=True).stdout
    assert str(w.home.root) + "/" not in hook and new_path in hook
    assert os.readlink(pointer) == f"../../envs/{name}/libtorch"   # using it fixed the pointer
    again = json.loads(fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--json",
                              env=env, check=True).stdout)            # the re-dial fast path
    assert again["path"] == new_path and again["libtorch_root"] == f"{new_path}/libtorch"
    assert fdlenv("env", "verify", env=env).returncode == 0

    _absolute_pointer(moved, old)
    again = tmp_path / "again"
    os.rename(moved, again)
    env = {"FLODL_HOME": str(again)}
    assert fdlenv("env", "verify", env=env).returncode == 2
    fixed = fdlenv("env", "verify", "--repair", env=env)
    assert fixed.returncode == 0, fixed.stderr
    assert os.readlink(again / "libtorch" / "precompiled" / "cpu") == f"../../envs/{name}/libtorch"
    assert fdlenv("env", "verify", env=env).returncode == 0


# Values a shell must read back byte for byte from shell-hook's output: a leading `=` (zsh's
# command lookup `=word`), `~` (tilde expansion, also after `:` and `=`), `-`, the empty string,
# and the shells' other specials.
ROUND_TRIP = ("=ls", "=nocmd", "=", "==x", "a=b", "=~", "~", "~root", "~/x", "a:~/x", "x=~/y", "-", "-e",
              "--", "-n", "", " ", "a b", "'", "''", '"', "\\", "\\n", "$HOME", "${HOME}", "`id`", "$(id)",
              "*", "?", "[a]", "{a,b}", "!", "!!", "#x", "%", "^x", "a;b", "a|b", "a&b", "<x>", "\t",
              "\n", "x\ny", "é", "=é", "~\n=")


@pytest.mark.parametrize("name", SHELLS)
def test_every_value_is_read_back_byte_exact_by_each_real_shell(name, tmp_path):
    """What `render` prints, evaluated by the real shell with no profile, then `env -0`: every
    value as given, and the script goes on past it (zsh's `=nocmd` used to abort the eval)."""
    from fdlenv.base.shells import render

    values = {f"FDLENV_RT_{i}": v for i, v in enumerate(ROUND_TRIP)}
    hook = tmp_path / "hook"
    hook.write_text(render(_flag(name), values))
    src = f"source {hook}" if name == "fish" else f". {hook}"
    res = _run_shell(name, f"{src}\nenv -0 > {tmp_path / 'd'}.0\necho went-on\n",
                     {"PATH": "/usr/bin:/bin", "HOME": str(tmp_path), "LANG": "C.UTF-8"}, tmp_path)
    assert res.returncode == 0 and res.stdout == "went-on\n", res.stderr
    got = _dumps(tmp_path / "d")[0]
    assert {k: got.get(k) for k in values} == values
# ------------------------------------------------------------------ a pixi or conda user's shell

@pytest.mark.parametrize("login, form", [("/usr/bin/fish", "set -gx LIBTORCH_PATH "),
                                         ("/bin/bash", "export LIBTORCH_PATH="),
                                         ("/bin/tcsh", "export LIBTORCH_PATH=")])
def test_without_shell_the_hook_speaks_the_login_shell_of_shell_as_pixi_does(two, login, form):
    w, _ = two
    for hot in ("1", "0"):   # the slow path, then the memo's replay (FDLENV_NO_HOTPATH unset)
        env = _base_env(w, SHELL=login, **({"FDLENV_NO_HOTPATH": "1"} if hot == "1" else {}))
        hook = fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(w.lock), env=env, check=True).stdout
        assert form in hook, (login, hook)
    fish = shutil.which("fish")
    if fish:   # what fish reads: `fdlenv shell-hook | source`, no --shell
        res = subprocess.run([fish, "--no-config", "-c", f"{HOOK} --libtorch cpu --lock {w.lock} | source; "
                              "echo $LIBTORCH_PATH"], env=_base_env(w, SHELL=fish), capture_output=True, text=True)
        assert res.returncode == 0 and res.stdout.strip().startswith(str(w.home.envs)), res.stderr


def test_no_conda_variable_is_set_unless_asked_and_a_conda_users_own_stay(two, tmp_path):
    from fdlenv.store.activation import CONDA_VARS

    w, envs = two
    cpu = envs["cpu"]["path"]
    mine = {"CONDA_PREFIX": "/opt/conda/envs/mine", "CONDA_SHLVL": "2", "CONDA_DEFAULT_ENV": "mine"}
    for extra in ({}, mine):
        env = _base_env(w, **extra)
        hook = fdlenv("shell-hook", "--shell", "bash", "--libtorch", "cpu", "--lock", str(w.lock), env=env,
                      check=True).stdout
        assert "CONDA_" not in hook and f"export FDLENV_PREFIX={cpu}" in hook, hook
        ran = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), "env", env=env, check=True).stdout
        seen = dict(ln.split("=", 1) for ln in ran.splitlines() if ln.split("=")[0] in CONDA_VARS)
        assert seen == extra
    asked = _base_env(w, FDLENV_CONDA_VARS="1")
    hook = fdlenv("shell-hook", "--shell", "bash", "--libtorch", "cpu", "--lock", str(w.lock), env=asked,
                  check=True).stdout
    assert f"export CONDA_PREFIX={cpu}" in hook and "export CONDA_SHLVL=1" in hook


def test_path_gains_only_directories_that_exist(tmp_path):
    from helpers_conda import Pkg, make_channel, write_env

    from fdlenv.lock import lock_envs
    from fdlenv.names.home import Home

    home = Home(tmp_path / "home")   # an env with no bin/ (as a wheel env): nothing to put on PATH
    make_channel(home.channel, [Pkg("libtorch-cpu", "2.10.0", files={"libtorch/lib/libtorch.so": b"x",
                                                                     "libtorch/build-version": "2.10.0\n"})])
    write_env(tmp_path / "envs", "cpu", ["flodl"], ["libtorch-cpu 2.10.0"])
    lock_envs(tmp_path / "envs", tmp_path / "conda-lock.yml", home=home)
    env = {"PATH": "/usr/bin:/bin:/usr/bin", "FLODL_HOME": str(home.root), "SHELL": "/bin/bash"}
    path = fdlenv("run", "--libtorch", "cpu", "--lock", str(tmp_path / "conda-lock.yml"), "printenv", "PATH",
                  env=env, check=True).stdout.strip()
    assert path == "/usr/bin:/bin:/usr/bin"   # not even de-duplicated: nothing was added
    hook = fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(tmp_path / "conda-lock.yml"), env=env,
                  check=True).stdout
    assert not re.search(r"^export PATH=", hook, re.M), hook
