"""Failure as a type.

Every fatal condition is a `Fail` that knows whether retrying may help.
`fdlenv join --persist` and systemd's RestartPreventExitStatus=2 both key on
that distinction, so it travels as data, never as a substring of a message.
Exit codes: 0 ok, 1 transient (retrying may help), 2 permanent (it cannot).

An `OSError` that reaches a boundary (the CLI, prepare, the store's install)
becomes a `Fail` through `os_failure`, one rule everywhere: a full disk or
quota (ENOSPC, EDQUOT) is transient and names the place and its free space;
what no retry fixes (permission, read-only filesystem, a path that is not
what it should be) is permanent; anything else (I/O errors, too many open
files, a vanished file) is transient.
"""

from __future__ import annotations

import errno
import os

EXIT_OK = 0
EXIT_TRANSIENT = 1
EXIT_PERMANENT = 2


class Fail(Exception):
    """A failure the CLI prints as one `error:` line and maps to an exit code."""

    def __init__(self, message: str, transient: bool = False, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.transient = transient
        # What the failing step had already found (prepare's notes): printed before the error.
        self.notes = tuple(notes)

    @classmethod
    def permanent(cls, message: str) -> "Fail":
        return cls(message, transient=False)

    @classmethod
    def retry(cls, message: str) -> "Fail":
        return cls(message, transient=True)

    def with_notes(self, notes) -> "Fail":
        """The same failure carrying `notes` (raise it `from` the original)."""
        return Fail(self.message, self.transient, tuple(notes))

    @property
    def exit_code(self) -> int:
        return EXIT_TRANSIENT if self.transient else EXIT_PERMANENT

    def __str__(self) -> str:
        return self.message


_FULL = (errno.ENOSPC, errno.EDQUOT)
_PERMANENT = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.ENAMETOOLONG,
              errno.ELOOP, errno.EINVAL)


def _free_mib(path: str) -> str:
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or "/")
        return f"{st.f_bavail * st.f_frsize // (1 << 20)} MiB free"
    except OSError:
        return "free space unknown"


def os_failure(e: OSError, where: str | None = None) -> Fail:
    """The one classification of an OSError; `where` names the place (the home) for a full disk."""
    place = where or e.filename or "the working directory"
    if e.errno in _FULL:
        return Fail.retry(f"no space left on the device holding {place} ({_free_mib(str(place))}); "
                          "nothing half-written was kept; free space there and retry")
    text = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
    if e.errno in _PERMANENT:
        return Fail.permanent(text)
    return Fail.retry(text)
