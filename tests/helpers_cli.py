"""The suite's one driver of fdlenv's command line: `python -m fdlenv` in a child process, as a
user runs it, and what it said.

`fdlenv(*args, home=..., env=..., check=...)` runs the CLI with this process's environment (the
test's own HOME, from conftest) plus `env`; `home` is the FLODL_HOME it works in, and its parent
the working directory unless `cwd` says otherwise, so nothing lands in the checkout. The result
is the CompletedProcess (returncode, stdout, stderr); `check=True` fails the test with the CLI's
stderr on a non-zero exit. `error_lines` and `assert_one_error` read the contract for bad input:
one `error:` line, and the exit code that says transient (1) or permanent (2).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path


def fdlenv(*args: str, home: Path | str | None = None, env: dict | None = None, check: bool = False,
           cwd: Path | str | None = None, **kw) -> subprocess.CompletedProcess:
    """Run `python -m fdlenv *args` in a child process and return what it did."""
    environ = {**os.environ}
    if home is not None:
        environ["FLODL_HOME"] = str(home)
        cwd = Path(home).parent if cwd is None else cwd
    environ.update(env or {})
    res = subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True,
                         env=environ, cwd=cwd, **kw)
    if check and res.returncode != 0:
        raise AssertionError(f"fdlenv {' '.join(args)} -> {res.returncode}\n{res.stderr}")
    return res


def error_lines(res: subprocess.CompletedProcess) -> list[str]:
    return [line for line in res.stderr.splitlines() if line.startswith("error:")]


def assert_one_error(res: subprocess.CompletedProcess, *needles: str, rc: int = 2) -> str:
    """Exactly one `error:` line, holding every needle, exit `rc`, no traceback; returns the line."""
    errors = error_lines(res)
    assert res.returncode == rc and len(errors) == 1, res.stderr
    assert "Traceback" not in res.stderr, res.stderr
    for needle in needles:
        assert needle in errors[0], (needle, errors[0])
    return errors[0]
