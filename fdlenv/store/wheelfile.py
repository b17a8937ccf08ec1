"""A wheel as a whole file: the resumable download and zipfile extraction.

`store.wheels` streams each wheel (hash and extract as it downloads). This is
the other path, for what the stream reader cannot handle and for what an
interrupted run left: `download` fetches into `archives/.<sha256>.part`
(resumed with HTTP Range after re-hashing the part, restarted when the server
does not resume), renames to `archives/<sha256>.whl` only on a sha256 match;
`extract` unpacks with `zipfile`, members split across threads (zlib and file
writes release the GIL), into `pkgs/.whl-<sha256>.<pid>...`, then `publish`
renames it to `pkgs/whl-<sha256>/`. `place` maps a member to the cache entry's
layout for both paths; members that escape are refused on both.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import threading
import zipfile
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path

from ..errors import Fail
from .. import hashing
from ..home import Home
from .records import Record, mismatch
from .streamzip import escapes

CHUNK = 1 << 20


def entry_dir(home: Home, sha256: str) -> Path:
    return home.pkgs / f"whl-{sha256}"


def publish(tmp: Path, final: Path) -> None:
    try:
        os.rename(tmp, final)
    except OSError:
        if not final.is_dir():   # not another process that finished first
            raise


def verify_local(r: Record, path: Path) -> None:
    if (bad := mismatch(r, str(path), hashing.of_file(path, md5=True))):
        raise bad


def download(home: Home, r: Record, url: str, progress) -> Path:
    """`archives/<sha256>.whl`, verified; resumes a part an interrupted run left."""
    import urllib.error
    import urllib.request

    done = home.archives / f"{r.sha256}.whl"
    part = home.archives / f".{r.sha256}.part"
    if done.is_file():   # verified (renamed only on a match) by a run killed before extracting it
        return done
    with open(part, "ab+") as out:
        sha = hashing.Digest()
        out.seek(0)
        while chunk := out.read(CHUNK):
            sha.update(chunk)
        have = out.tell()
        headers = {"Range": f"bytes={have}-"} if have else {}
        try:
            with urllib.request.urlopen(urllib.request.Request(url, headers=headers), timeout=60) as resp:
                if have and resp.status != 206:   # no resume on this server: start over
                    out.seek(0)
                    out.truncate()
                    sha = hashing.Digest()
                else:
                    progress.add(have)
                while chunk := resp.read(CHUNK):
                    if progress.stopped.is_set():
                        raise Fail.retry(f"stopped fetching {r.filename}: another wheel failed")
                    sha.update(chunk)
                    out.write(chunk)
                    progress.add(len(chunk))
            out.flush()
            os.fsync(out.fileno())
        except urllib.error.HTTPError as e:
            if e.code == 416:   # the part is complete (or longer than the file): start over next time
                out.truncate(0)
            raise Fail.retry(f"download of {url} failed: {e}") from None
        except OSError as e:
            if getattr(e, "errno", None) in (errno.ENOSPC, errno.EDQUOT):
                raise
            raise Fail.retry(f"download of {url} failed (the part is kept and resumed next time): {e}") from None
        if sha.sha256 != r.sha256:
            out.truncate(0)
            raise Fail.permanent(f"wheel {r.filename} from {url} does not match the lock: sha256 "
                                 f"{sha.sha256} != {r.sha256}; the index serves other bytes")
        os.replace(part, done)
    return done


_DATA_DIR = re.compile(r"[^/]+-[^/]+\.data")


def place(name: str) -> str | None:
    """A wheel member -> its path inside the cache entry (None: not installed)."""
    first, _, rest = name.partition("/")
    if _DATA_DIR.fullmatch(first):
        kind, _, sub = rest.partition("/")
        base = {"purelib": "site/", "platlib": "site/", "data": "data/", "headers": "include/"}.get(kind)
        return base + sub if base and sub else None
    return "site/" + name


def extract(home: Home, r: Record, path: Path, pool: ThreadPoolExecutor) -> None:
    final = entry_dir(home, r.sha256)
    if final.is_dir():
        return
    tmp = home.pkgs / f".whl-{r.sha256}.{os.getpid()}.{threading.get_ident()}"
    shutil.rmtree(tmp, ignore_errors=True)
    try:
        with zipfile.ZipFile(path) as zf:
            members = [i for i in zf.infolist() if not i.is_dir()]
        planned = []
        for m in members:
            rel = place(m.filename)
            if rel is None:
                continue
            if escapes(m.filename):
                raise Fail.permanent(f"wheel {r.filename} has a member that escapes its root: "
                                     f"{m.filename!r}; refusing to install it")
            planned.append((m, rel))
        dirs = sorted({os.path.dirname(rel) for _, rel in planned})
        for d in dirs:
            os.makedirs(tmp / d, exist_ok=True)
        groups = _balance(planned, max(1, min(os.cpu_count() or 2, len(planned) // 64 or 1)))
        futures: list[Future] = [pool.submit(_extract_group, path, g, tmp) for g in groups]
        for f in futures:
            f.result()
        publish(tmp, final)
    except zipfile.BadZipFile as e:
        raise Fail.permanent(f"wheel {r.filename} is not a valid zip ({e})") from None
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


def _balance(planned: list, n: int) -> list[list]:
    groups: list[list] = [[] for _ in range(n)]
    sizes = [0] * n
    for item in sorted(planned, key=lambda p: -p[0].file_size):
        i = sizes.index(min(sizes))
        groups[i].append(item)
        sizes[i] += item[0].file_size + 4096
    return [g for g in groups if g]


def _extract_group(path: Path, group: list, root: Path) -> None:
    with zipfile.ZipFile(path) as zf:
        for m, rel in group:
            dest = root / rel
            with zf.open(m) as src, open(dest, "wb") as dst:
                shutil.copyfileobj(src, dst, CHUNK)
            mode = (m.external_attr >> 16) & 0o777
            os.chmod(dest, 0o755 if mode & 0o111 else 0o644)
