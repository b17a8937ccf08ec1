"""Paths made from data stay in the directory they belong to; fdlenv's own files in an env are
never written through a link.

Why: a lock entry, an index page, a wheel's members, a package's file list and a memo are
data from others, and a path made from one (`..%2F..%2Fx`, `pytorch/../x`, `/etc/x`, a NUL,
a symlink planted on the way) must not land outside its root. One rule, applied where the
path is made, before anything is created:
1. `problem(name)`: why `name` is no path under a root (unquoted first when the data is
   URL-quoted): empty, a NUL, absolute, a `..` part (none is needed by any data fdlenv
   reads), a backslash for zip members (a Windows separator); None when it is one.
2. `inside(root, name, field)`: `root/name`, normalised (`//` and `.` folded), or a
   permanent Fail naming the field and the path; no part under `root` that exists may be
   a symlink (a link planted in an export would carry the write out).
3. `hot.replay.within(path, root)`: the replay's predicate, kept there (one module fewer on
   every replayed command): `path`, resolved, lies under `root`, resolved.
4. `open_dir(root, parts)` and `write_own(root, rel, data)`: directories opened one part at
   a time with O_NOFOLLOW (made when missing), and a file of fdlenv's own written there
   with O_EXCL|O_NOFOLLOW after its name is unlinked: what stood there, a link included,
   is replaced, never written through.
Imports only os; Fail is imported where one is raised.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterable
    from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC


class Refused(OSError):
    """A directory on the way is a symlink or a file (raised by `open_dir`)."""


def problem(name: str, *, quoted: bool = False, backslash: bool = False) -> str | None:
    """Why `name` cannot be a path under a root, or None (see the module docstring)."""
    if quoted:
        import urllib.parse

        name = urllib.parse.unquote(name)
    if "\0" in name:
        return "holds a NUL"
    if name.startswith("/"):
        return "is absolute"
    if backslash and "\\" in name:
        return "holds a backslash"
    parts = [p for p in name.split("/") if p not in ("", ".")]
    if ".." in parts:
        return "climbs out with '..'"
    if not parts:
        return "is empty"
    return None


def inside(root: str | os.PathLike[str], name: str, field: str, *, quoted: bool = False,
           backslash: bool = False) -> "Path":
    """`root / name` (a Path), normalised, refused with a permanent Fail naming `field` when it
    would leave `root` or run through a symlink under it."""
    from pathlib import Path

    raw = name
    if quoted:
        import urllib.parse

        name = urllib.parse.unquote(name)
    why = problem(name, backslash=backslash)
    if why is None:
        out = Path(root)
        for part in (p for p in name.split("/") if p not in ("", ".")):
            out = out / part
            if os.path.islink(out):
                why = f"runs through the symlink {out}"
                break
        else:
            return out
    from .errors import Fail

    raise Fail.permanent(f"{field}: the path {raw!r} {why}; refusing to write outside {root} "
                         "(accepted: a relative path without '..', a NUL or a leading '/')")


def open_dir(root: int | str | os.PathLike[str], parts: "Iterable[str]", make: bool = True) -> int:
    """A descriptor of `root/parts...`, each part opened with O_NOFOLLOW under the one before
    (made when missing, with `make`); `Refused` when one is a symlink or a file. `root`: a
    path, or a directory descriptor (left open)."""
    fd = os.dup(root) if isinstance(root, int) else os.open(root, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in parts:
            if make:
                try:
                    os.mkdir(part, dir_fd=fd)
                except FileExistsError:
                    pass
            try:
                nfd = os.open(part, _DIR, dir_fd=fd)
            except OSError as e:
                import errno

                if e.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise Refused(e.errno, f"{part} is a symlink or a file, not a directory") from None
                raise
            os.close(fd)
            fd = nfd
    except BaseException:
        os.close(fd)
        raise
    return fd


def write_own(root: int | str | os.PathLike[str], rel: str, data: bytes, *, keep: bool = False,
              fsync: bool = True) -> bool:
    """fdlenv's own file `root/rel`: written through directory descriptors (`open_dir`), its
    name unlinked first (a link there is replaced, never followed), created O_EXCL|O_NOFOLLOW.
    `keep`: leave whatever stands there (a link too) and return False. True when written."""
    *dirs, name = rel.split("/")
    dfd = open_dir(root, dirs)
    try:
        if not keep:
            try:
                os.unlink(name, dir_fd=dfd)
            except FileNotFoundError:
                pass
        try:
            fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666,
                         dir_fd=dfd)
        except FileExistsError:
            if keep:
                return False
            raise
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view):]
            if fsync:
                os.fsync(fd)
        finally:
            os.close(fd)
        if fsync:
            os.fsync(dfd)
        return True
    finally:
        os.close(dfd)
