"""An env's lease file: where it lives and how it is taken, for the replay and the slow path alike.

Why its own module: `fdlenv run`'s replay (`hot.replay`, which imports only os and sys)
and `store.leases` take the same lease, so both must find it in the same place. In
order: the home's `locks/use-<env dir>.lock`, made when the home can be written,
opened read-only when it exists (flock needs no write); else, for a home that
cannot be written and has no lease file yet (a baked image, a read-only mount),
the same name under this user's runtime directory for the home, which `env gc`
asks too (`lease_paths`). At import only os (fcntl when a lease is taken; errno and stat
only when the home's lease file cannot be opened).
"""

import os

from .roots import LOCKS


def lease_paths(root: str, name: str) -> tuple[str, str | None]:
    """Where env `name`'s lease lives: `<home>/locks/use-<name>.lock`, or, where the home cannot
    be written (a baked image, a read-only mount), the same name under this user's runtime
    directory for the home: `$TMPDIR or /tmp/fdlenv-leases-<uid>/<the home, escaped>/`
    (None where that name would be too long). `env gc` looks at both (store/leases.py)."""
    key = os.path.realpath(root).replace("%", "%25").replace("/", "%2F")
    base = os.path.join(os.environ.get("TMPDIR") or "/tmp", f"fdlenv-leases-{os.geteuid()}")
    spare = os.path.join(base, key, f"use-{name}.lock") if len(key) < 200 else None
    return os.path.join(root, LOCKS, f"use-{name}.lock"), spare


def leased_env(filename: str) -> str | None:
    """The env a lease file's name (`lease_paths`) is for; None for any other name."""
    return filename[4:-5] if filename.startswith("use-") and filename.endswith(".lock") else None


def _own_dir(path: str) -> bool:
    """`path` made (mode 0700) or found as this user's, writable by nobody else."""
    import stat

    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return False
    st = os.lstat(path)
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o022


def take_lease(root: str, name: str) -> int | None:
    """A shared hold on env `name`'s lease as an inheritable descriptor (close it to let go), or
    None when neither place can hold one. The home's lease file is opened read-only when it
    exists (flock needs no write), made when the home can be written, and only otherwise taken
    in the runtime directory. Blocks while `env gc` holds it (gc tests it without waiting)."""
    import fcntl

    home_path, spare = lease_paths(root, name)
    try:
        os.makedirs(os.path.dirname(home_path), exist_ok=True)
    except OSError:
        pass
    fd = -1
    for path, flags in ((home_path, os.O_RDWR | os.O_CREAT), (home_path, os.O_RDONLY), (spare, os.O_RDWR | os.O_CREAT)):
        if path is None or (path == spare and not (_own_dir(os.path.dirname(os.path.dirname(path)))
                                                   and _own_dir(os.path.dirname(path)))):
            continue
        try:
            fd = os.open(path, flags | os.O_CLOEXEC | os.O_NOFOLLOW, 0o644)
            break
        except OSError as e:
            import errno
            if e.errno not in (errno.EROFS, errno.EACCES, errno.EPERM, errno.ENOENT):
                return None
    if fd < 0:
        return None
    fcntl.flock(fd, fcntl.LOCK_SH)   # only ever held shared (gc tests it without waiting)
    os.set_inheritable(fd, True)
    return fd
