"""The hot commands answered from a memo (fdlenv/hot/replay.py, fdlenv/hot/memo.py): the same
answer as the slow path, and never an answer the files no longer give.

Whether a call was replayed is read from `python -X importtime`: a replay never imports
`fdlenv.app` (the settings and the resolver). A memo is written by the first call that finds its files settled, so a
helper calls again (a bounded number of times, each a process start, longer than a file
system's clock tick) until one is replayed."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys

import pytest
from helpers_store import bump_variant, make_world, realise_json

from fdlenv.hot import memo as hot_memo, replay

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

SLOW = {"FDLENV_NO_HOTPATH": "1"}


def call(*args: str, env: dict | None = None, cwd=None) -> tuple[subprocess.CompletedProcess, bool]:
    """(the result, whether the memo answered it)."""
    res = subprocess.run([sys.executable, "-X", "importtime", "-m", "fdlenv", *args], capture_output=True,
                         text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    imports = [ln for ln in res.stderr.splitlines() if ln.startswith("import time:")]
    res.stderr = "\n".join(ln for ln in res.stderr.splitlines() if not ln.startswith("import time:"))
    return res, not any(ln.rstrip().endswith(" fdlenv.app") for ln in imports)


def replayed(*args: str, **kw) -> subprocess.CompletedProcess:
    for _ in range(4):
        res, hot = call(*args, **kw)
        assert res.returncode == 0, res.stderr
        if hot:
            return res
    raise AssertionError(f"fdlenv {' '.join(args)}: never answered from its memo")


def environ_of(out: str) -> dict[str, str]:
    return dict(item.split("=", 1) for item in out.split("\0") if "=" in item)


def store_args(w, *, lock: bool = True) -> list[str]:
    return ["--libtorch", "cpu", *(["--lock", str(w.lock)] if lock else []), "--home", str(w.home.root)]


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    realise_json(w)
    return w


SHAPES = [["shell-hook"], ["shell-hook", "--shell", "fish"], ["shell-hook", "--json"], ["run"],
          ["env", "realize"], ["env", "realize", "--json"]]
# A re-dial without --lock from a far lock: tests/test_hotpath_nolock.py (this world has none holding cpu).
CASES = [(shape, lock) for shape in SHAPES for lock in (True, False) if lock or shape[0] != "env"]


@pytest.mark.parametrize(("shape", "lock"), CASES,
                         ids=[" ".join(shape) + (" --lock" if lock else "") for shape, lock in CASES])
def test_a_replayed_answer_is_the_slow_paths_answer(world, shape, lock):
    argv = [*shape, *store_args(world, lock=lock), *(["env", "-0"] if shape == ["run"] else [])]
    hot = replayed(*argv)
    slow, was_hot = call(*argv, env=SLOW)
    assert not was_hot and slow.returncode == 0 and hot.stderr == slow.stderr == ""
    if shape == ["run"]:
        assert environ_of(hot.stdout) == {k: v for k, v in environ_of(slow.stdout).items() if k not in SLOW}
        assert environ_of(hot.stdout)["FDLENV_PREFIX"].startswith(str(world.home.envs))
    elif "--json" in shape and shape[0] == "env":
        h, s = json.loads(hot.stdout), json.loads(slow.stdout)
        assert h.pop("seconds") >= 0 and s.pop("seconds") >= 0 and h == s
    else:
        assert hot.stdout == slow.stdout and hot.stdout


def test_a_relocked_variant_is_run_in_its_new_env_not_the_memos(world):
    argv = ["run", *store_args(world), "env", "-0"]
    old = environ_of(replayed(*argv).stdout)["FDLENV_PREFIX"]
    bump_variant(world)
    res, hot = call(*argv)
    assert res.returncode == 0 and not hot, res.stderr
    new = environ_of(res.stdout)["FDLENV_PREFIX"]
    assert new != old and os.path.isdir(new)


def _removed_env(w) -> None:
    for d in w.home.envs.iterdir():
        shutil.rmtree(d)


def _second_lock_pointed(w) -> None:
    bump_variant(w)     # a new build, realised from the new lock: precompiled/cpu now names it
    realise_json(w)


def _project_home(w) -> None:
    (w.root / "fdl.yml").write_text(f"fdlenv:\n  home: {w.root / 'other-home'}\n")


CHANGES = {"the env removed": _removed_env, "the pointer moved to another env": _second_lock_pointed,
           "a project's fdl.yml in the cwd": _project_home}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
@pytest.mark.parametrize("lock", [True, False], ids=["lock given", "no lock"])
def test_after_a_change_the_answer_is_the_slow_paths_again(world, change, lock):
    argv = ["run", *store_args(world, lock=lock), "env", "-0"]
    replayed(*argv, cwd=world.root)
    CHANGES[change](world)
    res, hot = call(*argv, cwd=world.root)
    slow, _ = call(*argv, env=SLOW, cwd=world.root)
    assert not hot
    assert res.returncode == slow.returncode, res.stderr   # the first may realise again: its stderr says so
    assert environ_of(res.stdout).get("FDLENV_PREFIX") == environ_of(slow.stdout).get("FDLENV_PREFIX")
    if res.returncode == 0:
        assert environ_of(res.stdout)["FDLENV_PREFIX"].startswith(str(world.home.envs))


def test_no_memo_is_written_when_a_dependency_moved_while_the_slow_path_ran(world, monkeypatch):
    from fdlenv.app.settings import resolve
    from fdlenv.front.table import ask_of
    from fdlenv.store.active import of_env
    from fdlenv.store.pointers import pointed_env

    given = {"libtorch": "cpu", "lock": str(world.lock), "home": str(world.home.root), "mirror": None,
             "frozen": False, "shell": "sh"}
    st = resolve(given["home"], None, given["lock"], project=None)
    plan = hot_memo.start(ask_of("shell-hook", given, None), "cpu", st)
    assert plan is not None and str(world.lock) in plan.deps
    world.lock.write_text(world.lock.read_text() + "\n")     # the lock moved under the resolver
    hot_memo.record(plan, st.home, of_env(pointed_env(st.home, "cpu")))
    assert not os.path.exists(plan.path)


def test_a_torn_memo_is_no_memo(world):
    argv = ["shell-hook", *store_args(world)]
    replayed(*argv)
    (memo,) = (world.home.cache / "hot").glob("shell-hook-*")
    text = memo.read_text()
    key = text.split("\0")[0]
    assert replay.read_memo(str(memo), key) is not None
    for cut in [i for i, c in enumerate(text) if c == "\0"]:
        memo.write_text(text[:cut])
        assert replay.read_memo(str(memo), key) is None, cut
    memo.write_text(text.replace("\0end", "\0ending"))
    assert replay.read_memo(str(memo), key) is None


def test_a_regular_installs_command_replays_without_re_json_or_pathlib(world, tmp_path):
    from helpers_install import fdlenv_wheel, install_wheel, plain_venv

    py = plain_venv(tmp_path / "venv")
    install_wheel(py, fdlenv_wheel(tmp_path / "dist"))
    script = py.parent / "fdlenv"
    assert script.read_text().splitlines()[0] == f"#!{py}"
    argv = [str(script), "shell-hook", *store_args(world)]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}
    for _ in range(4):
        res = subprocess.run([str(py), "-X", "importtime", *argv], capture_output=True, text=True, env=env)
        assert res.returncode == 0, res.stderr
        mods = {ln.rsplit("|", 1)[-1].strip() for ln in res.stderr.splitlines() if ln.startswith("import time:")}
        if "fdlenv.app" not in mods:
            break
    assert "fdlenv.app" not in mods and "fdlenv.hot.replay" in mods
    assert not mods & {"re", "json", "pathlib", "argparse", "typing"}, mods & {"re", "json", "pathlib", "argparse", "typing"}


def _replant(memo, *, env_to: str | None = None, no_deps: bool = False) -> None:
    """Rewrite a real memo as a planter would: its env moved to `env_to` (every mention, each
    dependency signed anew, so only where it points differs), or with no dependency at all."""
    parts = memo.read_text().split("\0")
    n = int(parts[1])
    deps = dict(zip(parts[2:2 + 2 * n:2], parts[3:3 + 2 * n:2], strict=True))
    rest = parts[2 + 2 * n:]
    m = int(rest[0])
    answer = dict(zip(rest[1:1 + 2 * m:2], rest[2:2 + 2 * m:2], strict=True))
    recipe = rest[1 + 2 * m:-1]
    triples = [recipe[i:i + 3] for i in range(0, len(recipe), 3)]
    env_from = answer["path"]

    def moved(text: str) -> str:
        return text.replace(env_from, env_to) if env_to else text

    deps = {} if no_deps else {moved(p): replay.sig(moved(p)) for p in deps}
    memo.write_text(replay.memo_text(parts[0], deps, {k: moved(v) for k, v in answer.items()},
                                      [v for kind, v, _ in triples if kind == "u"],
                                      [(v, moved(x)) for kind, v, x in triples if kind == "s"]))
    os.chmod(memo, 0o644)


def _world_writable(w, memo) -> None:
    os.chmod(memo, 0o666)


def _owned_by_nobody(w, memo) -> None:
    import pwd

    os.chown(memo, pwd.getpwnam("nobody").pw_uid, -1)


def _env_outside_the_home(w, memo) -> None:
    (env,) = w.home.envs.iterdir()
    outside = w.root / "outside" / env.name
    shutil.copytree(env, outside, symlinks=True)
    _replant(memo, env_to=str(outside))


def _no_dependency(w, memo) -> None:
    _replant(memo, no_deps=True)


PLANTED = {"world-writable": _world_writable, "owned by another user": _owned_by_nobody,
           "naming an env outside the home": _env_outside_the_home, "with no dependency": _no_dependency}


@pytest.mark.parametrize("plant", PLANTED, ids=list(PLANTED))
def test_a_planted_memo_is_not_replayed_and_the_slow_path_answers(world, plant):
    if plant == "owned by another user" and os.geteuid() != 0:
        pytest.skip("chown to another user needs root (the suite runs as root)")
    argv = ["shell-hook", "--json", *store_args(world)]
    replayed(*argv)
    (memo,) = (world.home.cache / "hot").glob("shell-hook-*")
    control = memo.read_text()
    PLANTED[plant](world, memo)
    res, hot = call(*argv)
    slow, _ = call(*argv, env=SLOW)
    print(plant, "->", "replayed" if hot else "the slow path", json.loads(res.stdout)["path"])
    assert res.returncode == 0 and not hot, res.stderr
    assert json.loads(res.stdout) == json.loads(slow.stdout)
    assert json.loads(res.stdout)["path"].startswith(str(world.home.envs))
    assert control                               # the memo was the slow path's own before it was planted


def test_a_memo_written_under_a_group_writable_umask_is_still_replayed(world):
    """Memos are written 0644 whatever the umask (002 is common): the replay's trust rule must not
    turn the hot path off for such a user."""
    old = os.umask(0o002)
    try:
        replayed("shell-hook", *store_args(world))
    finally:
        os.umask(old)
    (memo,) = (world.home.cache / "hot").glob("shell-hook-*")
    assert memo.stat().st_mode & 0o777 == 0o644
