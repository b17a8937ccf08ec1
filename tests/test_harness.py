"""The suite's own guarantees (tests/conftest.py): an isolated HOME, and no silent skip under CI=true."""

from __future__ import annotations

import pytest

import os
import subprocess
import sys
from pathlib import Path

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def test_every_test_runs_with_a_home_of_its_own_and_no_flodl_home(tmp_path_factory):
    home = Path(os.environ["HOME"])
    assert Path.home() == home and home.is_relative_to(tmp_path_factory.getbasetemp())
    assert "FLODL_HOME" not in os.environ and not any(home.iterdir())


def test_under_ci_true_a_skip_fails_unless_the_test_is_optional(tmp_path):
    for name in ("conftest.py", "sshd.py"):   # the suite's conftest and the fixture it imports
        (tmp_path / name).write_text((Path(__file__).parent / name).read_text())
    (tmp_path / "test_x.py").write_text(
        "import pytest\n"
        "def test_needs_a_tool():\n    pytest.skip('sshd is not installed')\n"
        "@pytest.mark.optional\n"
        "def test_opt_in():\n    pytest.skip('opt-in')\n")
    run = lambda ci: subprocess.run(  # noqa: E731
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "-p", "no:xdist", str(tmp_path)],
        capture_output=True, text=True, cwd=tmp_path, env={**os.environ, "CI": ci})
    quiet, ci = run("false"), run("true")
    assert quiet.returncode == 0 and "2 skipped" in quiet.stdout
    assert ci.returncode == 1 and "1 failed, 1 skipped" in ci.stdout and "sshd is not installed" in ci.stdout
