"""The re-dial `env realize` without `--lock` is answered from its memo, as the others are
(fdlenv/hot/memo.py signs the far locks it may reach), and never after a change that moves it.

The variant's lock is the home's on-demand lock (`lockfiles/<variant>.conda-lock.yml`, where
`lock.ondemand` writes one): the far lock a box without a project re-dials from. Whether a
call was replayed is read as tests/test_hotpath.py reads it (no `fdlenv.store` imported)."""

from __future__ import annotations

import json
import shutil

import pytest
from helpers_store import bump_variant, make_world, realise_json
from test_hotpath import SLOW, call, replayed

from fdlenv.lock.paths import home_lock, split_path
from fdlenv.store import pointers


def _home_lock(w):
    return split_path(home_lock(w.home), "cpu")


def _far_locked(w) -> None:
    """The world's lock as the home's on-demand lock for cpu (copied: the lock is fdlenv's own)."""
    _home_lock(w).parent.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(w.lock, _home_lock(w))


@pytest.fixture
def world(tmp_path):
    w = make_world(tmp_path)
    realise_json(w)
    _far_locked(w)
    return w


def argv_of(w, *extra: str) -> list[str]:
    return ["env", "realize", "cpu", "--home", str(w.home.root), *extra]


@pytest.mark.parametrize("extra", [[], ["--json"]], ids=["plain", "--json"])
def test_a_re_dial_without_a_lock_is_answered_from_its_memo_as_the_slow_path_answers(world, extra):
    hot = replayed(*argv_of(world, *extra))
    slow, was_hot = call(*argv_of(world, *extra), env=SLOW)
    assert not was_hot and slow.returncode == 0 and hot.stderr == slow.stderr == ""
    if extra:
        h, s = json.loads(hot.stdout), json.loads(slow.stdout)
        assert h.pop("seconds") >= 0 and s.pop("seconds") >= 0 and h == s
        assert h["path"].startswith(str(world.home.envs)) and h["created"] is False
    else:
        assert hot.stdout == slow.stdout and hot.stdout.startswith("cpu: ")


def _re_solved(w) -> None:
    bump_variant(w)         # a new build: the home's lock now names another env
    _far_locked(w)


def _lock_removed(w) -> None:
    _home_lock(w).unlink()   # no lock in view holds cpu: the env realised before, with a note


def _root_removed(w) -> None:
    pointers.root_link(w.home, _home_lock(w), "cpu").unlink()   # the replay would leave it unrooted


def _env_removed(w) -> None:
    for d in w.home.envs.iterdir():
        shutil.rmtree(d)


CHANGES = {"the home's lock re-solved": _re_solved, "the home's lock removed": _lock_removed,
           "its root removed": _root_removed, "the env removed": _env_removed}


@pytest.mark.parametrize("change", CHANGES, ids=list(CHANGES))
def test_after_a_change_the_re_dial_without_a_lock_is_the_slow_paths_answer(world, change):
    argv = argv_of(world, "--json")
    before = json.loads(replayed(*argv).stdout)["path"]
    root = pointers.root_link(world.home, _home_lock(world), "cpu")
    assert root.is_symlink()
    CHANGES[change](world)
    res, hot = call(*argv)
    assert res.returncode == 0 and not hot, res.stderr
    slow, _ = call(*argv, env=SLOW)
    after = json.loads(res.stdout)["path"]
    assert after == json.loads(slow.stdout)["path"] and after.startswith(str(world.home.envs))
    assert (after != before) == (change == "the home's lock re-solved")
    if change != "the home's lock removed":
        assert root.is_symlink()          # the slow path rooted the env again
        assert json.loads(replayed(*argv).stdout)["path"] == after
    else:
        assert "as realised before" in res.stderr
