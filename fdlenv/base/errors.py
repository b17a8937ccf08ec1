"""Failure as a type.

Every fatal condition is a `Fail` that knows whether retrying may help.
`fdlenv join --persist` and systemd's RestartPreventExitStatus=2 both key on
that distinction, so it travels as data, never as a substring of a message.
Exit codes: 0 ok, 1 transient (retrying may help), 2 permanent (it cannot), 130 stopped
(SIGINT or SIGTERM: nothing failed, the work was ended).

An `OSError` that reaches a boundary (the CLI, prepare, the store's install)
becomes a `Fail` through `os_failure`, one rule everywhere: a full disk or
quota (ENOSPC, EDQUOT) is transient and names the place and its free space
(the file, else the recorded home: a failed write names no file), and whether
the blocks or the inodes ran out (statvfs's f_favail);
what no retry fixes (permission, read-only filesystem, a path that is not
what it should be) is permanent; anything else (I/O errors, too many open
files, a vanished file) is transient. A permission or read-only failure on a
path inside the home names its way out: the home, where it came from (`--home`,
`$FLODL_HOME`, fdl.yml's `fdlenv: home:`, the default), its owner, and how to
choose another; `settings.resolve` records the home it settled (`record_home`)
before any command touches it.

Any other exception that escapes a command, or a step of join or prepare,
becomes a `Fail` through `classify`, by its cause: text that is not UTF-8 or
not YAML is permanent, since the same bytes fail the same way on the next
attempt; a child process that timed out or failed is transient; anything else
(a ValueError included: input fdlenv reads is checked where it is read and
refused with a `Fail` naming the field) is a bug in fdlenv, told as one line
naming the exception and the line of fdlenv it came from, exit 1 so a
persisting box tries again after an upgrade or a change around it. The
traceback is printed only with `--debug` or `FDLENV_DEBUG=1`.
"""

from __future__ import annotations

import errno
import os
import sys

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable

EXIT_OK = 0
EXIT_TRANSIENT = 1
EXIT_PERMANENT = 2
EXIT_INTERRUPTED = 130   # 128 + SIGINT: a stop (SIGINT, SIGTERM), neither a failure nor permanent


class Fail(Exception):
    """A failure the CLI prints as one `error:` line and maps to an exit code."""

    def __init__(self, message: str, transient: bool = False, notes: tuple[str, ...] = ()):
        super().__init__(message)
        self.message = message
        self.transient = transient
        # What the failing step had already found (prepare's notes): printed before the error.
        self.notes = tuple(notes)

    @classmethod
    def permanent(cls, message: str) -> Fail:
        return cls(message, transient=False)

    @classmethod
    def retry(cls, message: str) -> Fail:
        return cls(message, transient=True)

    def with_notes(self, notes: Iterable[str]) -> Fail:
        """The same failure carrying `notes` (raise it `from` the original)."""
        return Fail(self.message, self.transient, tuple(notes))

    @property
    def exit_code(self) -> int:
        return EXIT_TRANSIENT if self.transient else EXIT_PERMANENT

    def __str__(self) -> str:
        return self.message


_FULL = (errno.ENOSPC, errno.EDQUOT)
_PERMANENT = (errno.EACCES, errno.EPERM, errno.EROFS, errno.ENOTDIR, errno.EISDIR, errno.EEXIST, errno.ENAMETOOLONG,
              errno.ELOOP, errno.EINVAL)


def _full(path: str) -> tuple[str, str]:
    """(what ran out, what is left) on the device holding `path`. ENOSPC means no block or no
    inode; statvfs tells which: no inode left (f_favail 0 of a nonzero f_files), else no
    block left, else (a reading taken after the run's cleanup freed some of both) the one
    with the smaller share left. A filesystem with no inode count (f_files 0) can only be
    out of blocks."""
    while path and not os.path.exists(path):
        path = os.path.dirname(path)
    try:
        st = os.statvfs(path or "/")
    except OSError:
        return "no space left", "free space unknown"
    free = f"{st.f_bavail * st.f_frsize // (1 << 20)} MiB free"
    inodes = st.f_files > 0 and (
        st.f_favail == 0 or (st.f_bavail > 0 and st.f_blocks > 0
                             and st.f_favail / st.f_files < st.f_bavail / st.f_blocks))
    if inodes:
        return ("no free inodes left (too many files: the inodes ran out, not the bytes)",
                f"{st.f_favail} of {st.f_files} inodes free, {free}")
    return "no space left", free


def note_full(e: BaseException, path: str) -> None:
    """Read what ran out (blocks or inodes) now, while what failed is still on the disk: the
    cleanup between here and `os_failure` frees what the run made, so a reading taken after
    it can only compare what share of each is left. The first
    reading of an exception stays; anything but ENOSPC/EDQUOT is left alone."""
    if isinstance(e, OSError) and e.errno in _FULL and not hasattr(e, "fdlenv_full"):
        e.fdlenv_full = _full(path)   # type: ignore[attr-defined]


_DENIED = (errno.EACCES, errno.EPERM, errno.EROFS)
_HOME: tuple[str, str] | None = None   # (the home's absolute path, where it came from)


def record_home(path: str, origin: str) -> None:
    """The home this process settled and where it came from (`settings.resolve` calls it)."""
    global _HOME
    _HOME = (os.path.abspath(path), origin)


def _user(uid: int) -> str:
    import pwd
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:
        return f"uid {uid}"


def home_way_out(e: OSError) -> str | None:
    """For a permission or read-only failure on a path inside the recorded home: which home,
    from where, whose, and how to choose another. None for any other path."""
    if _HOME is None or not e.filename or e.errno not in _DENIED:
        return None
    root, origin = _HOME
    path = os.path.abspath(os.fsdecode(e.filename))
    if path != root and not path.startswith(root.rstrip(os.sep) + os.sep):
        return None
    probe = root
    while probe and not os.path.exists(probe) and os.path.dirname(probe) != probe:
        probe = os.path.dirname(probe)
    try:
        owner = _user(os.stat(probe).st_uid)
    except OSError:
        owner = "an unknown user"
    what = ("is on a read-only filesystem" if e.errno == errno.EROFS
            else f"is not writable by this user ({_user(os.geteuid())})")
    where = root if probe == root else f"{root} (its nearest existing directory {probe})"
    return (f"the home {where}, from {origin}, is owned by {owner} and {what}; choose another "
            "with --home DIR or FLODL_HOME=DIR, or run as its owner")


def os_failure(e: OSError, where: str | None = None) -> Fail:
    """The one classification of an OSError; `where` names the place for a full disk, else the
    file the error names, else the home this process settled (a write's ENOSPC names no file)."""
    place = where or e.filename or (_HOME[0] if _HOME is not None else "the working directory")
    if e.errno in _FULL:
        what, left = getattr(e, "fdlenv_full", None) or _full(str(place))
        return Fail.retry(f"{what} on the device holding {place} ({left}); "
                          "nothing half-written was kept; free "
                          + ("inodes (delete files) there, or choose a home on a filesystem with more, and retry"
                             if what.startswith("no free inodes") else "space there and retry"))
    text = f"{e.strerror or e}" + (f": {e.filename}" if e.filename else "")
    if e.errno in _PERMANENT:
        way_out = home_way_out(e)
        return Fail.permanent(f"{text}; {way_out}" if way_out else text)
    return Fail.retry(text)


def _argv0(cmd: object) -> str:
    return str(cmd[0] if isinstance(cmd, (list, tuple)) and cmd else cmd)


def classify(e: BaseException, where: str) -> Fail:
    """Any exception as the `Fail` its cause calls for, its message led by `where` (the step).
    A `Fail` passes unchanged. subprocess and yaml are looked up, never imported: an
    exception of theirs exists only when they are loaded."""
    if isinstance(e, Fail):
        return e
    if isinstance(e, OSError):
        f = os_failure(e)
        return Fail(f"{where}: {f.message}", f.transient)
    sp = sys.modules.get("subprocess")
    if sp is not None and isinstance(e, sp.TimeoutExpired):
        return Fail.retry(f"{where}: {_argv0(e.cmd)} did not finish within {e.timeout:g} s")
    if sp is not None and isinstance(e, sp.CalledProcessError):
        return Fail.retry(f"{where}: {_argv0(e.cmd)} failed (exit {e.returncode})")
    if isinstance(e, UnicodeDecodeError):
        return Fail.permanent(f"{where}: a file it reads is not UTF-8 text ({e.reason} at byte {e.start})")
    yaml = sys.modules.get("yaml")
    if yaml is not None and isinstance(e, yaml.YAMLError):
        detail = " ".join(str(e).split())[:300]
        return Fail.permanent(f"{where}: unreadable content ({type(e).__name__}: {detail})")
    if isinstance(e, MemoryError):
        return Fail.retry(f"{where}: out of memory")
    return bug(e, where)


DEBUG_VAR = "FDLENV_DEBUG"


def debugging() -> bool:
    """`--debug` (the CLI sets the variable) or FDLENV_DEBUG=1: tracebacks are printed."""
    return os.environ.get(DEBUG_VAR, "").strip() not in ("", "0")


def bug(e: BaseException, where: str) -> Fail:
    """An exception fdlenv did not expect, as one line: what, and the line of fdlenv it came
    from. Transient (exit 1): a persisting box retries; the traceback only when debugging."""
    at = ""
    tb = e.__traceback__
    while tb is not None:
        path = tb.tb_frame.f_code.co_filename
        if os.sep + "fdlenv" + os.sep in path:
            at = f" at fdlenv/{path.rsplit(os.sep + 'fdlenv' + os.sep, 1)[1]}:{tb.tb_lineno}"
        tb = tb.tb_next
    if debugging():
        import traceback
        traceback.print_exception(type(e), e, e.__traceback__, file=sys.stderr)
    detail = " ".join(str(e).split())[:300]
    hint = "" if debugging() else f"; {DEBUG_VAR}=1 or --debug prints the traceback"
    return Fail.retry(f"{where}: a bug in fdlenv ({type(e).__name__}{': ' + detail if detail else ''}"
                      f"{at}); please report it{hint}")
