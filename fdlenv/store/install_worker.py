"""The install worker: rattler.install (and pip wheels) in a child process.

Run as `python -m fdlenv.store.install_worker` with the request as JSON on
stdin. The parent starts it before it has located the archives, so this
process imports rattler while the parent works, then blocks on stdin. It
lives in its own process because py-rattler 0.28 crashes at interpreter exit
in up to 1 run in 10 after its async calls succeeded; the parent therefore
judges success by the marker file this worker writes last, never by the exit
code, and the worker leaves with os._exit right after flushing it. The child
also keeps rattler's tokio threads out of the caller.

Order: refuse packages whose paths escape the prefix (once per archive
sha256, remembered in `cache/verified/<sha256>.paths`), then install into
the staging prefix as if it lived at the final env path
(`alternative_target_prefix`), so prefix placeholders and script shebangs
name the published location.
"""

from __future__ import annotations

import json
import os
import sys
import subprocess
import traceback
from pathlib import Path


def _conda_records(items: list[dict]):
    from rattler import BuildString, PackageRecord, RepoDataRecord

    out = []
    for it in items:
        depends = [f"{n} {c}".strip() for n, c in sorted(it["dependencies"].items())]
        pr = PackageRecord(
            name=it["name"], version=it["version"], build=BuildString(it["build"]),
            build_number=0, subdir=it["subdir"], depends=depends,
            sha256=bytes.fromhex(it["sha256"]), md5=bytes.fromhex(it["md5"]) if it["md5"] else None,
        )
        out.append(RepoDataRecord(pr, it["filename"], Path(it["archive"]).as_uri(), it["channel"]))
    return out


def _install_wheels(wheels: list[str], staging: Path, final: Path, pyver: str) -> None:
    from installer import install
    from installer.destinations import SchemeDictionaryDestination
    from installer.sources import WheelFile

    site = f"lib/python{pyver}/site-packages"
    scheme = {
        "purelib": str(staging / site), "platlib": str(staging / site),
        "headers": str(staging / "include"), "scripts": str(staging / "bin"), "data": str(staging),
    }
    # Scripts run from the published env, so their shebang names the final prefix.
    dest = SchemeDictionaryDestination(scheme, interpreter=str(final / "bin" / "python"), script_kind="posix")
    for w in wheels:
        with WheelFile.open(w) as src:
            install(src, dest, additional_metadata={"INSTALLER": b"fdlenv\n"})


class PathEscape(Exception):
    """A package names a path outside the prefix; refused before anything is linked."""


def _escapes(rel: str) -> bool:
    return os.path.isabs(rel) or os.path.normpath(rel).split(os.sep)[0] == ".."


class WorkerProcess:
    """The parent's handle: started early, so the child imports rattler while the parent
    reads the lock and locates archives; then one request, then the marker decides."""

    def __init__(self):
        self.proc = subprocess.Popen([sys.executable, "-m", "fdlenv.store.install_worker"],
                                     stdin=subprocess.PIPE)

    def abandon(self) -> None:
        """Stop a worker that got no request (or is still running after a failure)."""
        if self.proc.poll() is None:
            self.proc.kill()
        self.proc.wait()
        if self.proc.stdin and not self.proc.stdin.closed:
            self.proc.stdin.close()

    def run(self, req: dict) -> int:
        self.proc.stdin.write(json.dumps(req).encode())
        self.proc.stdin.close()
        return self.proc.wait()  # blocking: a polled wait would add up to 50 ms after the exit


async def _check_paths(items: list[dict], memo: Path) -> list[str]:
    """Refuse escaping paths; returns the sha256s checked (the parent remembers them once the
    archive's bytes are verified, so a tampered archive never vouches for the real one)."""
    from rattler.package_streaming import PackageArchive

    checked = []
    for it in items:
        if (memo / f"{it['sha256']}.paths").exists():
            continue
        archive = await PackageArchive.from_path(it["archive"])
        for rel in (p.relative_path for p in (await archive.paths_json()).paths):
            if _escapes(str(rel)):
                raise PathEscape(f"package {it['name']} ({it['filename']}) has a path that escapes "
                                 f"the prefix: {rel!r}; refusing to install it")
        checked.append(it["sha256"])
    return checked


async def _conda(req: dict) -> list[str]:
    """Path check, then the install, in one event loop."""
    import rattler

    staging, final = Path(req["staging"]), Path(req["final"])
    checked = await _check_paths(req["conda"], Path(req["memo"]))
    records = _conda_records(req["conda"])
    if records:
        await rattler.install(records, target_prefix=staging, cache_dir=Path(req["cache"]),
                              alternative_target_prefix=final, show_progress=False,
                              execute_link_scripts=False)
    else:
        staging.mkdir(parents=True, exist_ok=True)
    return checked


def run(req: dict) -> list[str]:
    import asyncio

    checked = asyncio.run(_conda(req))
    if req["wheels"]:
        _install_wheels(req["wheels"], Path(req["staging"]), Path(req["final"]), req["python"])
    return checked


def main() -> None:
    import rattler  # noqa: F401 - imported while the parent still prepares the request

    req = json.loads(sys.stdin.read() or "null")
    if req is None:  # the parent gave up before sending work
        os._exit(0)
    marker = Path(req["marker"])
    try:
        marker.write_text(json.dumps({"paths_checked": run(req)}))
    except BaseException as e:  # noqa: BLE001 - everything goes to the parent, classified
        text = str(e) or traceback.format_exc(limit=3)
        kind = ("escape" if isinstance(e, PathEscape)
                else "enospc" if "No space left on device" in text or "os error 28" in text
                else "error")
        Path(req["error"]).write_text(json.dumps({"kind": kind, "message": text}))
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    main()
