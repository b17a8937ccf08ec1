"""Build one env: fetch, verify beside the install, publish by rename.

Called by `store.realise` with the key lock held. Order matters, publish last:
1. Clear what killed runs left: `staging/<key>-*` and, when no install runs,
   rattler's hidden temp dirs in the package cache.
2. Locate archives (remote ones are downloaded into `archives/`, verified
   while streaming), start the install worker into `staging/<key>-<pid>`,
   and hash local archives *beside* it. Nothing is published unless both
   succeed; a bad hash evicts the cache entries it may have poisoned.
3. Report degraded hardlinks, refuse a package that ships anything where
   fdlenv writes its own files, write `.arch`, the file table (`store.health`) and `.fdlenv/manifest.json`
   never through a link (`store.ownfiles`), fsync them, rename the staging
   dir into `envs/`. An env directory either does not exist or is complete.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import sys
import threading
import time
from datetime import datetime, timezone
from pathlib import Path

from .. import __version__
from ..base import atomic, flocks
from ..names import variants
from ..base.deadlines import join
from ..base import errors
from ..base.errors import Fail, os_failure
from ..names.home import Home
from ..base.progress import during, say
from . import cudahome, health, linktree, ownfiles, sizes, wheels
from .env import MANIFEST, libtorch_root
from ..lock.file import Record

# The worker's module (subprocess, signal) and `store.archives` (tempfile) only for conda
# packages, and shutil only to remove what a failed run left: an env of wheels whose entries
# are all cached (a second env) imports none of them.
TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    from .archives import Archive
    from .env import LinkReport, Manifest
    from .install_worker import WorkerProcess


def _cache_in_use(home: Home) -> contextlib.AbstractContextManager[None]:
    """Shared hold on the package cache; cleanup of its temp dirs needs it exclusively."""
    home.ensure(home.locks, home.pkgs)

    def clear_debris() -> None:
        # Nobody installs right now: what hidden dirs remain are debris of killed runs.
        for p in home.pkgs.iterdir():
            if p.name.startswith(".") and p.is_dir():
                _rmtree(p)

    return flocks.shared(home.pkgs_lock, "installing", first=clear_debris)


def _clear_debris(home: Home, key: str) -> None:
    if home.staging.is_dir():
        for p in home.staging.glob(f"{key}-*"):
            _rmtree(p) if p.is_dir() else p.unlink(missing_ok=True)


def _rmtree(path: Path) -> None:
    import shutil

    shutil.rmtree(path, ignore_errors=True)


def build(home: Home, variant: str, key: str, records: list[Record], final: Path,
           lock: Path, digest: str, platform: str, mirrors: dict[str, str],
           worker: WorkerProcess | None = None, replace: bool = False) -> None:
    """Install `records` as `final`. `worker`: an install worker the caller started early.
    `replace` (a repair): `final` exists and is swapped for the new build in one rename.
    A lock of wheels only needs no worker: the prefix is made here and the wheels linked in."""
    home.ensure(home.envs, home.staging, home.cache)
    _clear_debris(home, key)
    t0 = time.monotonic()
    say(f"realising {variant} ({len(records)} packages) into {final}")
    if worker is None and any(r.manager == "conda" for r in records):
        from .install_worker import WorkerProcess
        worker = WorkerProcess()
    stage = home.stage(f"{key}-{os.getpid()}")
    try:
        archives = _located(home, [r for r in records if r.manager == "conda"], mirrors)
        wheel_records = [r for r in records if r.manager == "pip"]
        with _cache_in_use(home):
            entries = _install(home, worker, archives, wheel_records, mirrors, stage, final, variant)
        links = _link_report(home, stage, records)
        if links["copied"]:
            say(f"warning: {len(links['copied'])} package(s) were copied, not hard-linked "
                f"(is {home.pkgs} on another filesystem than {home.envs}?): "
                + ", ".join(links["copied"][:5]))
        root = libtorch_root(stage)
        ownfiles.refuse_over_own(stage, root, variant, entries)
        if variants.get(variant).vendor == "nvidia":
            cudahome.assemble(stage, root, home.pkgs)
        own = ownfiles.write_arch(stage, root, variant, records)   # fsynced below, with the manifest
        health.record(stage)   # every file's size and identity, for the quick check of each attempt
        final_root = final / root.relative_to(stage)
        manifest: Manifest = {
            "key": key, "variant": variant, "platform": platform,
            "records": [r.to_json() for r in records],
            "lock": {"path": str(lock.absolute()), "sha256": digest},
            "libtorch_root": str(final_root),
            "created": datetime.now(timezone.utc).isoformat(timespec="seconds"),
            "tool_version": __version__, "links": links,
            "size": sizes.measure(home, stage, records),
        }
        ownfiles.write(stage, MANIFEST, (json.dumps(manifest, indent=1, sort_keys=True) + "\n").encode())
        _share_metadata(stage, (stage / MANIFEST).stat().st_mode & 0o777)
        # fdlenv's own files and their directories, fsynced together, last: the first fsync
        # waits behind what the extraction left to write back (1.4 s of a cold cu128 realise
        # when `.arch` was fsynced as it was written, before the file table and the sizes)
        _fsync_files(*(stage / rel for rel in own), root, stage / MANIFEST, (stage / MANIFEST).parent, stage)
        _publish(home, stage, final, replace)
        _fsync_files(home.envs)
    except BaseException as e:
        if worker is not None:
            worker.abandon()   # killed and reaped: it writes no marker after the ones removed here
        errors.note_full(e, str(stage))   # blocks or inodes, read before the stage frees them
        _rmtree(stage)
        for leftover in (Path(str(stage) + ".ok"), Path(str(stage) + ".err")):
            leftover.unlink(missing_ok=True)
        if isinstance(e, OSError):
            raise os_failure(e, str(home.root)) from None
        _sweep_own_extractions(home)
        raise
    say(f"realised {variant} in {time.monotonic() - t0:.1f}s")


def _located(home: Home, conda: list[Record], mirrors: dict[str, str]) -> list[Archive]:
    if not conda:
        return []
    from .archives import locate

    return [locate(home, r, mirrors) for r in conda]


def _sweep_own_extractions(home: Home) -> None:
    """After a failure or Ctrl-C: wait (briefly) for this process's download threads to stop,
    then remove the extraction dirs they leave (`pkgs/.whl-<sha>.<pid>.*`)."""
    from .wheelfetch import GRACE   # a failed or interrupted realise: the fetch's own bound

    deadline = time.monotonic() + GRACE
    for t in threading.enumerate():
        if t.name.startswith("fdlenv-") and t is not threading.current_thread():
            t.join(max(0.0, deadline - time.monotonic()))
    # A thread that was still finishing its member (a starved CPU) may have made a dir after
    # the first sweep: a second one follows once threads had one more chance to end.
    for last in (False, True):
        for tmp in home.pkgs.glob(f".whl-*.{os.getpid()}.*") if home.pkgs.is_dir() else ():
            _rmtree(tmp)
        if last or not any(t.name.startswith("fdlenv-") and t.is_alive() for t in threading.enumerate()):
            break
        time.sleep(0.05)


def _publish(home: Home, stage: Path, final: Path, replace: bool) -> None:
    """Rename the staging dir into `envs/`; a repair swaps it with the old env in one step
    (`atomic.exchange`), so a process running in the env never finds it missing, and deletes
    the old one after."""
    if not (replace and final.exists()):
        os.rename(stage, final)
    elif atomic.exchange(stage, final):
        atomic.discard(stage)
    else:   # no renameat2 here: two renames, the old env kept aside until the new one is in
        aside = home.stage(f"{atomic.TRASH}{final.name}.{os.getpid()}")
        os.rename(final, aside)
        os.rename(stage, final)
        atomic.discard(aside)


def _install(home: Home, worker: WorkerProcess | None, archives: list[Archive], wheel_records: list[Record],
             mirrors: dict[str, str], stage: Path, final: Path, variant: str) -> dict[str, Path]:
    """Conda packages through the worker and wheels through `store.wheels`, side by side;
    wheels are linked into the staging prefix once the worker has made it. Returns the
    wheels' cache entries (sha256 -> entry)."""
    marker, err = Path(str(stage) + ".ok"), Path(str(stage) + ".err")
    entries: dict[str, Path] = {}
    wheel_failures: list[BaseException] = []
    stop = threading.Event()     # set when this thread is interrupted: the downloads stop too

    def fetch_wheels() -> None:
        try:
            entries.update(wheels.ensure(home, wheel_records, mirrors, stop, variant))
        except BaseException as e:  # noqa: BLE001 - re-raised in this thread below
            wheel_failures.append(e)

    failures: list[Fail] = []
    fetcher = threading.Thread(target=fetch_wheels, daemon=True)
    try:
        returncode = _run_beside(fetcher, wheel_records, archives, home, worker, stage, final, marker, err,
                                 variant, failures)
    except BaseException:    # Ctrl-C: the downloads stop and clean up before the caller's cleanup
        stop.set()
        if fetcher.is_alive():
            from .wheelfetch import GRACE

            fetcher.join(GRACE + 0.5)
        raise
    try:
        if wheel_failures:
            raise wheel_failures[0]
        if failures:
            from .archives import evict_cache_entry

            for a in archives:
                if not a.fetched:
                    evict_cache_entry(home, a.record)  # it may hold the bad bytes
            raise failures[0]
        if not marker.exists():
            if not err.exists():
                if os.statvfs(err.parent).f_favail == 0:   # no inode left even for its report
                    raise OSError(errno.ENOSPC, "no inode left for the install worker's report")
                raise Fail.retry(f"the install worker for {variant} died (exit {returncode}); "
                                 "nothing was published, retry")
            try:
                e = json.loads(err.read_text())
            except (OSError, ValueError):   # an error file the worker could not finish (a full disk)
                raise Fail.retry(f"the install worker for {variant} failed (exit {returncode}) and left "
                                 "no readable report; nothing was published, retry") from None
            if e["kind"] == "enospc":
                raise OSError(errno.ENOSPC, e["message"])
            if e["kind"] == "escape":
                raise Fail.permanent(e["message"])
            raise Fail.permanent(f"installing {variant} failed: " + " / ".join(
                line.strip() for line in e["message"].strip().splitlines()[-3:]))
        # The bytes are verified now: their path check holds for that sha256 from here on.
        for sha, layout in json.loads(marker.read_text())["paths_checked"].items():
            atomic.write_text(home.verified(f"{sha}.paths"), json.dumps(layout))
        if wheel_records:
            pyver = _site_python(archives, wheel_records)
            linked, nthreads = 0, linktree.threads()
            for r in wheel_records:   # in the lock's order: a file two wheels ship is the last one's
                try:
                    linked += linktree.link(entries[r.sha256], stage, pyver, nthreads)
                except linktree.LinkRefused as e:
                    raise Fail.permanent(f"wheel {r.filename} cannot be installed: {e}; refusing it") from None
            say(f"linked {linked} files of {len(wheel_records)} wheel(s) into lib/python{pyver}/site-packages")
    finally:
        for p in (marker, err):
            p.unlink(missing_ok=True)
    return entries


def _run_beside(fetcher: threading.Thread, wheel_records: list[Record], archives: list[Archive], home: Home,
                worker: WorkerProcess | None, stage: Path, final: Path, marker: Path, err: Path, variant: str,
                failures: list[Fail]) -> int:
    """The wheels' fetcher, the install worker and the hashing of local archives, side by side;
    returns the worker's exit code (its marker file, not this, says whether it succeeded).
    Without conda packages there is no worker: the prefix is made here, as the worker would."""
    if wheel_records:
        fetcher.start()
    if worker is None:
        assert not archives, "conda packages need the install worker"
        (stage / "conda-meta").mkdir(parents=True)
        atomic.write_text(marker, json.dumps({"paths_checked": {}}))
        if wheel_records:
            join(fetcher)   # in slices: a stop signal landing on another thread still stops us
        return 0
    from .install_worker import CondaItem, Request

    req = Request(
        conda=tuple(CondaItem(name=r.name, version=r.version, build=r.build, subdir=r.subdir,
                              filename=r.filename, channel=r.url.rsplit("/", 2)[0], archive=str(a.path),
                              sha256=r.sha256, md5=r.md5, dependencies=dict(r.dependencies))
                    for a in archives for r in (a.record,)),
        staging=str(stage), final=str(final), cache=str(home.pkgs), memo=str(home.verified()),
        marker=str(marker), error=str(err))

    def hash_all() -> None:   # local archives, hashed while the worker extracts them
        from concurrent.futures import ThreadPoolExecutor

        from .archives import verify

        with ThreadPoolExecutor(max_workers=2) as pool:
            for a, fut in [(a, pool.submit(verify, home, a)) for a in archives]:
                try:
                    fut.result()
                except Fail as f:
                    failures.append(f)
                except OSError as e:  # unreadable: unverified is never published
                    failures.append(Fail.permanent(f"cannot read archive {a.path} to verify it: {e}"))

    hasher = threading.Thread(target=hash_all, daemon=True)
    hasher.start()
    poll, size = _installed(stage, archives)
    with during(f"installing {len(archives)} package(s) for {variant}", every=3.0, poll=poll,
                total=size) if archives else contextlib.nullcontext():
        returncode = worker.run(req)
        join(hasher)
    if wheel_records:
        join(fetcher)
    return returncode


def _installed(stage: Path, archives: list[Archive]) -> tuple[Callable[[], tuple[int, str]], int]:
    """Progress of the worker, which reports none: the packages whose conda-meta record exists
    in the staging prefix, weighed by their archives' sizes (a listdir per look)."""
    sizes = {}
    for a in archives:
        r = a.record
        try:
            sizes[f"{r.name}-{r.version}-{r.build}.json"] = a.path.stat().st_size
        except OSError:
            sizes[f"{r.name}-{r.version}-{r.build}.json"] = 0

    def poll() -> tuple[int, str]:
        try:
            names = set(os.listdir(stage / "conda-meta"))
        except OSError:
            names = set()
        done = [n for n in sizes if n in names]
        return sum(sizes[n] for n in done), f"{len(done)}/{len(sizes)} linked"
    return poll, sum(sizes.values())


def _share_metadata(stage: Path, mode: int) -> None:
    """rattler writes conda-meta/*.json readable by its owner only; give them the mode the
    rest of the env has (the manifest's: 0644 under the usual umask), so another user of a
    shared store can verify and activate it."""
    meta = stage / "conda-meta"
    if meta.is_dir():
        for p in meta.iterdir():
            if p.is_file() and not p.is_symlink() and p.stat().st_mode & 0o777 != mode:
                os.chmod(p, mode)


def _site_python(archives: list[Archive], wheel_records: list[Record]) -> str:
    """One site-packages for every wheel: the env's python's X.Y, else the first CPython tag
    the wheels carry (the lock's fixed target), else this interpreter's."""
    python = next((a.record.version for a in archives if a.record.name == "python"), None)
    if python:
        return ".".join(python.split(".")[:2])
    for r in wheel_records:
        for tag in r.filename.removesuffix(".whl").split("-")[-3].split("."):
            if tag.startswith("cp3") and tag[3:].isdigit():
                return f"3.{tag[3:]}"
    return f"{sys.version_info[0]}.{sys.version_info[1]}"


def _link_report(home: Home, stage: Path, records: list[Record]) -> LinkReport:
    """One plain file per package: nlink == 1 means rattler fell back to copying.

    The sample comes from the package's cache entry (a directory walk, no JSON:
    a 20,000-file package's conda-meta costs more to parse than to link), skipping
    files that are copied on purpose (prefix placeholders, no_link). A wheel's entry
    holds under `site/` what the env holds under site-packages.
    """
    linked, copied = 0, []
    site = next(iter(stage.glob("lib/python*/site-packages")), None)
    into: Path | None
    for r in records:
        entry, into, skip = home.pkgs / sizes.entry_name(r), stage, set()
        if r.manager == "pip":
            entry, into = entry / "site", site
        else:
            for name in ("has_prefix", "no_link"):
                with contextlib.suppress(OSError):
                    skip |= {ln.split()[-1] for ln in (entry / "info" / name).read_text().splitlines() if ln.strip()}
        sample = _first_file(entry, skip)
        if sample is None or into is None or not (into / sample).is_file():
            continue
        if (into / sample).lstat().st_nlink > 1:
            linked += 1
        else:
            copied.append(r.name)
    return {"hardlinked": linked, "copied": copied}


def _first_file(entry: Path, skip: set[str]) -> str | None:
    for dirpath, dirnames, filenames in os.walk(entry):
        rel_dir = os.path.relpath(dirpath, entry)
        if rel_dir == "info":
            dirnames[:] = []
            continue
        dirnames.sort()
        for name in sorted(filenames):
            rel = name if rel_dir == "." else f"{rel_dir}/{name}"
            if rel not in skip and not os.path.islink(os.path.join(dirpath, name)):
                return rel
    return None


def _fsync_files(*paths: Path) -> None:
    """Make fdlenv's own files durable before the rename publishes the env.

    Payload files are not fsynced one by one (20k syscalls on a warm realise):
    kill -9 safety comes from the rename, and a power cut that loses payload
    pages is what `fdlenv env verify --full --repair` is for.
    """
    for p in dict.fromkeys(paths):
        fd = os.open(p, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)
