"""The install worker: rattler.install of conda packages in a child process.

`WorkerProcess` starts the child before the parent has read the lock (a fork
of the CLI, or `python -m fdlenv.store.install_worker FD` where threads make
forking unsafe); the child imports rattler while the parent works, then reads
one request as JSON from the pipe. It lives in its own process because
py-rattler 0.28 crashes at interpreter exit in up to 1 run in 10 after its
async calls succeeded; the parent therefore judges success by the marker file
this worker writes last, never by the exit code, and the worker always leaves
through os._exit. The child also keeps rattler's tokio threads out of the
caller, and dies with its parent.

Order: refuse packages whose paths escape the prefix or run through another
package's symlink (each archive's layout read once per sha256, remembered in
`cache/verified/<sha256>.paths` after the parent has verified the bytes),
then install into the staging prefix as if it lived at the final env path
(`alternative_target_prefix`), so prefix placeholders and script shebangs
name the published location; then refuse any symlink a package made that
resolves outside the env. Nothing is written through a symlink before it is
checked: no path of the lock runs through one.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import traceback
from pathlib import Path

from ..base import confine
from ..base.deadlines import until_exited
from ..base.record import Record

TYPE_CHECKING = False
if TYPE_CHECKING:
    from rattler import RepoDataRecord

    # An archive's layout as `_check_paths` reads it: {"links", "files", "dirs"} -> sorted paths
    Layout = dict[str, list[str]]


class CondaItem(Record):
    """One verified conda archive to install (what rattler's RepoDataRecord needs)."""

    name: str
    version: str
    build: str
    subdir: str
    filename: str
    channel: str
    archive: str              # the local file, already verified or hashed beside the install
    sha256: str
    md5: str | None
    dependencies: dict[str, str]   # name -> constraint, as the lock records them


class Request(Record):
    """What the parent asks of the worker; sent once, as JSON, over the pipe."""

    conda: tuple[CondaItem, ...]
    staging: str              # the prefix to install into
    final: str                # where it will be published (prefix placeholders name it)
    cache: str                # rattler's package cache (home.pkgs)
    memo: str                 # cache/verified: `<sha256>.paths` for archives already path-checked
    marker: str               # written last, on success: the parent's only proof
    error: str                # written instead on failure: {"kind": escape|enospc|error, "message"}

    def to_wire(self) -> bytes:
        return json.dumps(dict(self._asdict(), conda=[it._asdict() for it in self.conda])).encode()

    @classmethod
    def from_wire(cls, data: bytes) -> Request:
        d = json.loads(data)
        return cls(**dict(d, conda=tuple(CondaItem(**it) for it in d["conda"])))


def _conda_records(items: tuple[CondaItem, ...]) -> list[RepoDataRecord]:
    from rattler import BuildString, PackageRecord, RepoDataRecord

    out = []
    for it in items:
        depends = [f"{n} {c}".strip() for n, c in sorted(it.dependencies.items())]
        pr = PackageRecord(
            name=it.name, version=it.version, build=BuildString(it.build),
            build_number=0, subdir=it.subdir, depends=depends,
            sha256=bytes.fromhex(it.sha256), md5=bytes.fromhex(it.md5) if it.md5 else None,
        )
        out.append(RepoDataRecord(pr, it.filename, Path(it.archive).as_uri(), it.channel))
    return out


class PathEscape(Exception):
    """A package names a path outside the prefix; refused before anything is linked."""


def _fork_ok() -> bool:
    """Fork only a process that is single-threaded at the OS level: native threads (an
    earlier rattler call's tokio runtime, say) are invisible to `threading` and would be
    missing in the child while their state says they run."""
    try:
        return len(os.listdir("/proc/self/task")) == 1
    except OSError:
        return False


class WorkerProcess:
    """The parent's handle: started early, so the child imports rattler while the parent
    reads the lock and locates archives; then one request on a pipe; the marker decides.

    When the caller says it owns this process (`fork=True`: the fdlenv CLI run as the
    program, `args.owns_process`) and no other thread runs
    (counted by the kernel, not by `threading`), the child is a fork: it starts with the
    interpreter already up, which saves a whole Python start-up on every realise.
    Anywhere else (a library caller, a test runner with its own pipes, join's tunnel
    threads, rattler's runtime from an earlier call) a fork could inherit a held lock, a
    foreign channel or a runtime without its threads, so the child is a fresh interpreter.
    """

    def __init__(self, fork: bool = False):
        read_fd, w = os.pipe()
        self._w: int | None = w
        self._proc: subprocess.Popen[bytes] | None = None
        if fork and _fork_ok():
            sys.stdout.flush()
            sys.stderr.flush()
            self.pid = os.fork()
            if self.pid == 0:
                os.close(self._w)
                _serve(read_fd)  # never returns
        else:
            self._proc = subprocess.Popen([sys.executable, "-m", "fdlenv.store.install_worker", str(read_fd)],
                                          pass_fds=(read_fd,), stdin=subprocess.DEVNULL)
            self.pid = self._proc.pid
        os.close(read_fd)
        self._status: int | None = None

    def _wait(self) -> int:
        if self._status is None:
            until_exited(self.pid)   # in slices: a stop signal landing on another thread still stops us
            try:
                status = self._proc.wait() if self._proc else \
                    os.waitstatus_to_exitcode(os.waitpid(self.pid, 0)[1])
            except ChildProcessError:    # reaped already (a Ctrl-C between the wait and its result)
                status = -1
            self._status = status
            return status
        return self._status

    def _close_pipe(self) -> None:
        if self._w is not None:
            os.close(self._w)
            self._w = None

    def abandon(self) -> None:
        """Stop a worker that got no request (or is still running after a failure)."""
        if self._status is None:
            with contextlib.suppress(ProcessLookupError):
                os.kill(self.pid, signal.SIGKILL)
        self._close_pipe()
        self._wait()

    def run(self, req: Request) -> int:
        data, w = req.to_wire(), self._w
        assert w is not None, "a worker runs one request"
        while data:
            data = data[os.write(w, data):]
        self._close_pipe()
        return self._wait()  # woken by the exit (a pidfd): a polled wait would add up to 50 ms


def _die_with_parent() -> None:
    """A worker must not outlive a parent killed by -9: it would write into staging that the
    next run clears. Linux only (prctl PR_SET_PDEATHSIG); elsewhere this is a no-op."""
    parent = os.getppid()
    with contextlib.suppress(OSError, AttributeError):
        import ctypes

        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGKILL)  # PR_SET_PDEATHSIG
    if os.getppid() != parent:
        os._exit(1)


def _layout(memo: Path) -> Layout | None:
    """What an earlier check remembered of an archive: its symlinks, its other paths and the dirs
    they pass through (an empty or older memo file: None, so it is read again)."""
    try:
        d = json.loads(memo.read_text())
        return d if isinstance(d, dict) and {"links", "files", "dirs"} <= d.keys() else None
    except (OSError, ValueError):
        return None


async def _check_paths(items: tuple[CondaItem, ...], memo: Path) -> tuple[dict[str, Layout], dict[str, Layout]]:
    """Refuse what could write outside the prefix, before anything is linked: a path that
    escapes, and a path that runs through a symlink or lands on another package's symlink
    (rattler would write through it).
    Returns (every archive's layout, those read here): the parent remembers the second once the
    archive's bytes are verified, so a tampered archive never vouches for the real one."""
    layouts: dict[str, Layout] = {}
    checked: dict[str, Layout] = {}
    links: dict[str, str] = {}
    dirs: dict[str, str] = {}
    files: dict[str, str] = {}
    for it in items:
        layout = _layout(memo / f"{it.sha256}.paths")
        if layout is None:
            from rattler.package_streaming import PackageArchive

            archive = await PackageArchive.from_path(it.archive)
            mine: list[str] = []
            plain: list[str] = []
            through: set[str] = set()
            for entry in (await archive.paths_json()).paths:
                rel = str(entry.relative_path)
                if confine.problem(rel) is not None:
                    raise PathEscape(f"package {it.name} ({it.filename}) has a path that escapes "
                                     f"the prefix: {rel!r}; refusing to install it")
                (mine if entry.path_type.softlink else plain).append(rel)
                through.update(str(parent) for parent in Path(rel).parents if str(parent) != ".")
            layout = checked[it.sha256] = {"links": sorted(mine), "files": sorted(plain),
                                           "dirs": sorted(through)}
        layouts[it.sha256] = layout
        links.update((rel, it.name) for rel in layout["links"])
        dirs.update((rel, it.name) for rel in layout["dirs"])
        files.update((rel, it.name) for rel in layout["files"])
    for rel in sorted(links.keys() & (dirs.keys() | files.keys())):
        other = dirs.get(rel) or files[rel]
        raise PathEscape(f"package {other} installs {'files through' if rel in dirs else 'a file over'} "
                         f"{rel!r}, a symlink of package {links[rel]}; a write through it could land "
                         "outside the env; refusing it")
    return layouts, checked


def _inside(path: str, *roots: Path) -> bool:
    return any(path == str(r) or path.startswith(str(r) + os.sep) for r in roots)


def _check_links(items: tuple[CondaItem, ...], layouts: dict[str, Layout], staging: Path, final: Path) -> None:
    """After the install: every symlink a package made resolves inside the env."""
    roots = (Path(os.path.realpath(staging)), final)
    for it in items:
        for rel in layouts[it.sha256]["links"]:
            real = os.path.realpath(staging / rel)
            if not _inside(real, *roots):
                raise PathEscape(f"package {it.name} ({it.filename}) has a symlink {rel!r} that resolves "
                                 f"outside the env ({real}); refusing to install it")


async def _conda(req: Request) -> dict[str, Layout]:
    """Path check, then the install, in one event loop, then where the symlinks resolve."""
    staging, final = Path(req.staging), Path(req.final)
    layouts, checked = await _check_paths(req.conda, Path(req.memo))
    if req.conda:
        import rattler

        records = _conda_records(req.conda)
        await rattler.install(records, target_prefix=staging, cache_dir=Path(req.cache),
                              alternative_target_prefix=final, show_progress=False,
                              execute_link_scripts=False)
        _check_links(req.conda, layouts, staging, final)
    else:
        staging.mkdir(parents=True, exist_ok=True)
    return checked


def run(req: Request) -> dict[str, Layout]:
    import asyncio

    return asyncio.run(_conda(req))


def _serve(read_fd: int) -> None:
    """The worker's body: one request from the pipe, then the marker (or the error file)."""
    try:
        signal.signal(signal.SIGINT, signal.SIG_IGN)   # Ctrl-C is the parent's to handle: it kills us
        signal.signal(signal.SIGTERM, signal.SIG_DFL)  # not the parent's handler (the CLI's, forked)
        _die_with_parent()
        try:
            import rattler  # noqa: F401 - imported while the parent still prepares the request
        except ImportError:
            pass   # a wheel-only env needs none; a conda one fails below, classified

        with os.fdopen(read_fd, "rb") as f:
            data = f.read()
        if not data:  # the parent gave up before sending work
            os._exit(0)
        req = Request.from_wire(data)
        try:
            Path(req.marker).write_text(json.dumps({"paths_checked": run(req)}))
        except BaseException as e:  # noqa: BLE001 - everything goes to the parent, classified
            text = str(e) or traceback.format_exc(limit=3)
            kind = ("escape" if isinstance(e, PathEscape)
                    else "enospc" if "No space left on device" in text or "os error 28" in text
                    else "error")
            Path(req.error).write_text(json.dumps({"kind": kind, "message": text}))
    finally:
        os._exit(0)  # no flush: a forked child's buffers are copies of the parent's


if __name__ == "__main__":
    _serve(int(sys.argv[1]))
