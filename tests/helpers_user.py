"""Run a check as an unprivileged user, also when the suite runs as root (as CI does).

Permission checks (a directory that cannot be listed, a stage that cannot be
written) only mean something for a user the kernel refuses; root passes every
mode bit. As root, `unprivileged(fn, ...)` forks, drops to `nobody` (uid and
gid 65534, no supplementary groups) and runs `fn` there; the outcome comes
back through a pipe. `world_dir()` is a directory that user can reach.
"""

from __future__ import annotations

import os
import pickle
import tempfile
from pathlib import Path

from fdlenv.base.errors import Fail

NOBODY = 65534


def world_dir() -> Path:
    """A fresh directory every user may traverse (tmp_path's parents are root's alone)."""
    d = Path(tempfile.mkdtemp(prefix="fdlenv-unpriv-"))
    d.chmod(0o755)
    return d


def unprivileged(fn, *args, **kw):
    """`fn(*args, **kw)` as an unprivileged user; a Fail it raises is raised here with its class."""
    if os.geteuid() != 0:
        return fn(*args, **kw)
    r, w = os.pipe()
    pid = os.fork()
    if pid == 0:   # the child: drop privileges, run, report, leave without the parent's teardown
        try:
            os.close(r)
            os.setgroups([])
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            try:
                out = ("ok", fn(*args, **kw))
            except Fail as f:
                out = ("fail", f.message, f.transient)
            except BaseException as e:  # noqa: BLE001 - reported to the parent
                out = ("error", repr(e))
            os.write(w, pickle.dumps(out))
        finally:
            os._exit(0)
    os.close(w)
    with os.fdopen(r, "rb") as f:
        data = f.read()
    os.waitpid(pid, 0)
    out = pickle.loads(data)
    if out[0] == "fail":
        raise Fail(out[1], out[2])
    if out[0] == "error":
        raise AssertionError(f"as an unprivileged user: {out[1]}")
    return out[1]
