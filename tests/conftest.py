"""What every test gets: its own HOME and no FLODL_HOME, and under CI=true no silent skips.

- HOME: a fresh directory per test, so nothing a test runs (fdlenv's default
  home `~/.flodl`, ssh's `~/.ssh`, pip's user config, rustup) reads or writes
  the developer's own; FLODL_HOME and FDL_ENV are unset. The rust toolchain
  stays reachable: RUSTUP_HOME and CARGO_HOME point at the real ones when they
  exist (rustup would otherwise look for, or install, a toolchain in the new HOME).
- CI=true: a test that skips because something it needs is missing (sshd,
  rsync, git, a tmpfs mount, ...) fails instead, so CI cannot lose a test
  silently. Tests that are optional by design carry `@pytest.mark.optional`
  (the 3.9 GB real-wheel walk-through, opt-in with FDLENV_REAL_WHEELS=1).
- The fast loop: `python -m pytest -n auto -q -m "not slow"` leaves out the
  end-to-end tests, each marked `slow` where it is defined; collection fails on a test that
  does what only an end-to-end test does (`END_TO_END_CALLS`) without the mark.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from sshd import sshd_server  # noqa: F401 - the private sshd fixture, for every test module

_REAL_HOME = Path.home()


@pytest.fixture(autouse=True)
def _own_home(request, tmp_path_factory, monkeypatch):
    """A HOME per test, removed when the test passed (as pyproject's tmp_path_retention_policy
    "failed" removes its tmp_path): the homes hold realised envs, and left behind they made
    pytest's exit-time rotation of old base temp dirs (an atexit rm, after the summary) take
    minutes on a full run; removed here, that cost is spread over the run, on every worker."""
    import shutil

    for var, default in (("RUSTUP_HOME", _REAL_HOME / ".rustup"), ("CARGO_HOME", _REAL_HOME / ".cargo")):
        if var not in os.environ and default.is_dir():
            monkeypatch.setenv(var, str(default))
    home = tmp_path_factory.mktemp("user-home")
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("FLODL_HOME", raising=False)
    monkeypatch.delenv("FDL_ENV", raising=False)
    yield home
    if not getattr(request.node, "_fdlenv_failed", False):
        shutil.rmtree(home, ignore_errors=True)


def pytest_unconfigure(config):
    """hypothesis (imported by the fuzz and codec tests) leaves a gc callback behind; a
    KeyboardInterrupt that xdist's shutdown delivers while a collection runs at exit was
    printed as a traceback from it on a green run. Nothing needs it once the tests are done."""
    import gc
    import sys

    if "hypothesis" in sys.modules:
        gc.callbacks[:] = [cb for cb in gc.callbacks if not getattr(cb, "__module__", "").startswith("hypothesis")]


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config):
    """The run's temp trees go in a fresh dir of its own (`--basetemp` unless one is given; xdist
    hands each worker a dir inside it), removed when the run passed, before the summary, kept
    when it failed. pytest's own numbered dirs under /tmp/pytest-of-<user> are rotated by an
    atexit rm of the older runs' dirs (this machine's other runs' too), after the summary:
    seconds to minutes of silence once realised envs are in them."""
    config.addinivalue_line("markers", "optional: may skip even under CI=true (opt-in by design)")
    if config.option.basetemp is None and not hasattr(config, "workerinput"):
        import tempfile

        config.option.basetemp = tempfile.mkdtemp(prefix="fdlenv-pytest-")
        config.stash[_OWN_BASETEMP] = config.option.basetemp


_OWN_BASETEMP = pytest.StashKey[str]()


def pytest_sessionfinish(session, exitstatus):
    own = session.config.stash.get(_OWN_BASETEMP, None)
    if own is not None and exitstatus == 0:
        import shutil

        shutil.rmtree(own, ignore_errors=True)


# What only an end-to-end test does: a regular install of fdlenv's own wheel, the join harness
# (a controller and agent around a real `fdlenv join`). A test that does one of them, or a
# fixture of its own module that it uses, must carry `slow` where it is defined (its module's
# `pytestmark = pytest.mark.slow`, or `@pytest.mark.slow`); unmarked, collection fails, so the
# fast loop (`-m "not slow"`) cannot drift into end-to-end runs.
END_TO_END_CALLS = ("install_wheel(", "fdlenv_wheel(", "join_harness", "JoinHarness")


def _end_to_end_call(item) -> str | None:
    import inspect

    funcs = [getattr(item, "function", None)]
    fixtures = getattr(getattr(item, "_fixtureinfo", None), "name2fixturedefs", {})
    funcs += [d.func for defs in fixtures.values() for d in defs   # its module's own fixtures (the shared
              if getattr(d.func, "__module__", None) == item.module.__name__]   # sshd is fast by itself)
    for fn in funcs:
        try:
            src = inspect.getsource(fn)
        except (OSError, TypeError):
            continue
        hit = next((c for c in END_TO_END_CALLS if c in src), None)
        if hit:
            return f"{fn.__name__} calls {hit.rstrip('(')}"
    return None


def pytest_collection_modifyitems(config, items):
    unmarked = [f"{item.nodeid}: {why}" for item in items if item.get_closest_marker("slow") is None
                and (why := _end_to_end_call(item))]
    if unmarked:
        raise pytest.UsageError("end-to-end tests not marked slow (mark them where they are defined):\n  "
                                + "\n  ".join(unmarked))


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    outcome = yield
    rep = outcome.get_result()
    if rep.failed:
        item._fdlenv_failed = True   # its HOME is kept for a look (`_own_home`)
    if rep.skipped and os.environ.get("CI", "").lower() == "true" and item.get_closest_marker("optional") is None:
        reason = rep.longrepr[2] if isinstance(rep.longrepr, tuple) else str(rep.longrepr)
        rep.outcome = "failed"
        rep.longrepr = f"skipped under CI=true, which must run every test: {reason}"
