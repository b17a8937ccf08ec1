"""What a command imports, read in a fresh interpreter (the declared-modules tests).

`imported(argv)` runs `fdlenv *argv` through `runpy` in a child started with `-S`: no `site`,
so no `.pth` file (this interpreter's editable finder, certifi's) imports pathlib, re or
anything else before fdlenv runs, and a module found in `sys.modules` afterwards was imported
by the command (or by `runpy` itself, which imports none of the modules these tests ban).
The checkout and this interpreter's `sys.path` (site-packages, a user site, what .pth files
add) are on the child's path as plain entries.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def imported(argv: list[str], env: dict[str, str] | None = None) -> tuple[int, str, set[str]]:
    """(exit code, stdout, modules imported by `fdlenv *argv` beyond the interpreter's start)."""
    code = textwrap.dedent(f"""
        import runpy, sys
        before = set(sys.modules)   # json is imported after: it imports re
        sys.argv = ["fdlenv", *{argv!r}]
        code = 0
        try:
            runpy.run_module("fdlenv", run_name="__main__")
        except SystemExit as e:
            code = e.code
        sys.stdout.flush()
        new = sorted(set(sys.modules) - before)
        import json
        print(json.dumps({{"code": code, "new": new}}), file=sys.stderr)
    """)
    # This interpreter's path as `site` and the .pth files left it, their import lines not run.
    paths = [str(ROOT), *dict.fromkeys(p for p in sys.path if p and os.path.isdir(p))]
    child = {**os.environ, **(env or {}), "PYTHONPATH": os.pathsep.join(paths)}
    res = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True, env=child)
    lines = res.stderr.strip().splitlines()
    assert res.returncode == 0 and lines, res.stderr
    out = json.loads(lines[-1])
    return out["code"], res.stdout, set(out["new"])


def of_fdlenv(mods: set[str]) -> set[str]:
    return {m for m in mods if m == "fdlenv" or m.startswith("fdlenv.")}
