"""The install worker: rattler.install (and pip wheels) in a child process.

Run as `python -m fdlenv.store.install_worker REQUEST.json`. It lives in its
own process because py-rattler 0.28 crashes at interpreter exit in up to 1 run
in 10 after its async calls succeeded; the parent therefore judges success by
the marker file this worker writes last, never by the exit code, and the
worker leaves with os._exit right after flushing it. The child also keeps
rattler's tokio threads out of the caller.

Files are installed into the staging prefix but written as if they lived at
the final env path (`alternative_target_prefix`), so prefix placeholders and
script shebangs name the published location.
"""

from __future__ import annotations

import asyncio
import json
import os
import sys
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


async def _check_paths(items: list[dict], cache: Path) -> None:
    from rattler.package_streaming import PackageArchive

    for it in items:
        stem = it["filename"].removesuffix(".conda").removesuffix(".tar.bz2")
        cached = cache / stem / "info" / "paths.json"
        if cached.is_file():
            paths = [p["_path"] for p in json.loads(cached.read_text())["paths"]]
        else:
            archive = await PackageArchive.from_path(it["archive"])
            paths = [p.relative_path for p in (await archive.paths_json()).paths]
        for rel in paths:
            if _escapes(str(rel)):
                raise PathEscape(f"package {it['name']} ({it['filename']}) has a path that escapes "
                                 f"the prefix: {rel!r}; refusing to install it")


def run(req: dict) -> None:
    import rattler

    staging, final = Path(req["staging"]), Path(req["final"])
    asyncio.run(_check_paths(req["conda"], Path(req["cache"])))
    records = _conda_records(req["conda"])
    if records:
        asyncio.run(rattler.install(
            records, target_prefix=staging, cache_dir=Path(req["cache"]),
            alternative_target_prefix=final, show_progress=False, execute_link_scripts=False,
        ))
    else:
        staging.mkdir(parents=True, exist_ok=True)
    if req["wheels"]:
        _install_wheels(req["wheels"], staging, final, req["python"])


def main() -> None:
    req_path = Path(sys.argv[1])
    req = json.loads(req_path.read_text())
    marker = Path(req["marker"])
    try:
        run(req)
        marker.write_text("ok\n")
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
