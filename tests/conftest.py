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
  end-to-end tests marked `slow` (a regular install, real processes racing).
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


# Modules that drive fdlenv end to end (real installs into a home, servers, killed processes,
# regular installs): every test in them is `slow`, so the fast loop (`-m "not slow"`) runs the
# unit-level tests only. A test elsewhere marks itself `@pytest.mark.slow`.
END_TO_END = frozenset({
    "test_bake_then_auto", "test_beside_flodl", "test_build_keys", "test_cloud_init_boot", "test_cuda_env",
    "test_deadlines", "test_env_confinement", "test_flaky_index", "test_fuzz_inputs", "test_hardening", "test_harness",
    "test_hostile_mirror", "test_hotpath", "test_join_jump", "test_kill_maintenance", "test_lock_on_demand",
    "test_lock_shipped", "test_mirror_export", "test_mirror_lag", "test_no_shell_from_data", "test_output",
    "test_prepare_cli", "test_private_index", "test_readonly_home", "test_shells", "test_source_fetch", "test_stated_sizes", "test_store_faults", "test_store_gc", "test_variant_is_what_it_says",
    "test_store_http", "test_store_leases", "test_store_maintain", "test_store_realise", "test_variant_trees",
    "test_walkthrough", "test_what_the_box_has", "test_wheels_store", "test_heal", "test_broken_records",
})


def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.module is not None and item.module.__name__ in END_TO_END:
            item.add_marker(pytest.mark.slow)


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
