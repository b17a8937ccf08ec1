"""Reading from the network with bounds: every body has a size cap and a deadline.

Why one module: an index page, a metadata file, a wheel and a conda archive are
all read from servers fdlenv does not control (a mirror may be hostile, broken or
slow), and each read must end. The rules, in one place:
- a socket operation waits at most TIMEOUT seconds;
- a page or metadata file (`read_all`) is read in pieces as they arrive, capped
  at its limit and finished within PAGE_DEADLINE seconds, so one byte every 20 s
  cannot hold a lock for ever;
- a download (`chunks`) is capped at the size the lock or the index states (or
  at its caller's limit) and is stalled when less than STALL_BYTES arrived in the
  last STALL_WINDOW seconds;
- a body that ends short of its Content-Length or its stated size was cut;
- by cause: more bytes than stated is permanent (the server serves other bytes);
  a cut, a reset, a timeout or a stall is transient (`Fail.retry`); what the
  bytes are is for the caller's hash to decide;
- a transient failure is tried again here (`retrying`: TRIES in all, a short
  pause between), and only then reaches the caller (exit 1: a persist box
  re-dials later).
"""

from __future__ import annotations

import time

from .errors import Fail

TIMEOUT = 60                 # seconds one socket operation may block
PAGE_DEADLINE = 120          # seconds a whole page or metadata file may take
STALL_WINDOW = 60            # a download is stalled when, over this many seconds,
STALL_BYTES = 64 << 10       # ... fewer bytes than this arrived
PIECE = 1 << 20
GATHER = 0.25                # seconds a download piece may wait to fill (HTTPS hands out 16 KiB records)
TRIES = 3                    # attempts of one download before its transient failure is reported
PAUSE = 1.0                  # seconds before the second attempt, doubled for each later one


def open_url(url: str, headers: dict[str, str] | None = None):
    """urlopen with fdlenv's timeout; OSError (URLError, HTTPError) on failure."""
    import urllib.request

    return urllib.request.urlopen(urllib.request.Request(url, headers=headers or {}), timeout=TIMEOUT)


def _piece(f, n: int) -> bytes:
    """What has arrived, up to `n` bytes, without waiting for all `n` (read1 where it exists)."""
    read1 = getattr(f, "read1", None)
    return read1(n) if read1 is not None else f.read(n)


def _gathered(f, n: int) -> bytes:
    """Up to `n` bytes: what has arrived, then more while it keeps arriving (GATHER s at most).
    Over HTTPS a read hands out one 16 KiB TLS record; whoever consumes the pieces (the hash,
    the zip stream, the file writes) pays per piece, so it gets a few large ones instead."""
    first = _piece(f, n)
    if not first or len(first) >= n >> 1:
        return first
    parts, have, end = [first], len(first), time.monotonic() + GATHER
    while have < n and time.monotonic() < end:
        more = _piece(f, n - have)
        if not more:
            break           # the end: the next read says so again
        parts.append(more)
        have += len(more)
    return b"".join(parts)


def _ended_short(f, url: str, n: int) -> None:
    """At the end of a body: one the server declared longer (Content-Length; http.client's read1
    just stops at a cut, it does not raise) was cut."""
    left = getattr(f, "length", None)
    if isinstance(left, int) and left > 0:
        raise Fail.retry(f"{url} ended early at {n} bytes, {left} short of its Content-Length; retry")


def _cut(url: str, e: BaseException) -> Fail:
    return Fail.retry(f"reading {url} was cut ({type(e).__name__}: {e}); retry")


def read_all(f, limit: int, url: str, deadline: float = PAGE_DEADLINE) -> bytes:
    """The whole body of `f`, at most `limit` bytes (more: permanent), within `deadline` s (transient)."""
    import http.client

    end, parts, n = time.monotonic() + deadline, [], 0
    try:
        while True:
            chunk = _piece(f, min(PIECE, limit + 1 - n))
            if not chunk:
                _ended_short(f, url, n)
                break
            n += len(chunk)
            parts.append(chunk)
            if n > limit:
                raise Fail.permanent(f"{url} sent over {limit >> 20} MiB; an index page or metadata file "
                                     "is far smaller (a broken or hostile index?)")
            if time.monotonic() > end:
                raise Fail.retry(f"{url} did not finish within {deadline:g} s ({n} bytes came); "
                                 "the server is too slow, retry")
    except (OSError, http.client.HTTPException) as e:
        raise _cut(url, e) from None
    return b"".join(parts)


def chunks(f, url: str, limit: int, stated: int | None = None, size: int = PIECE):
    """The body of download `f` piece by piece: at most `limit` bytes (`stated`: the size the
    lock or index gives, a tighter cap, and a body ending short of it is a cut), never stalled;
    a cut is a transient `Fail`."""
    import http.client

    cap = stated if stated is not None else limit
    n, window_start, window_bytes = 0, time.monotonic(), 0
    while True:
        try:
            chunk = _gathered(f, size)
        except (OSError, http.client.HTTPException) as e:
            raise _cut(url, e) from None
        if not chunk:
            _ended_short(f, url, n)
            if stated is not None and n < stated:
                raise Fail.retry(f"{url} ended early at {n} of the {stated} bytes stated for it; retry")
            return
        n += len(chunk)
        if n > cap:
            what = f"the {stated} bytes stated for it" if stated is not None else f"{limit >> 20} MiB"
            raise Fail.permanent(f"{url} sent more than {what}; the server serves other bytes")
        now = time.monotonic()
        window_bytes += len(chunk)
        if now - window_start >= STALL_WINDOW:
            if window_bytes < STALL_BYTES:
                raise Fail.retry(f"{url} stalled: {window_bytes} bytes in the last {now - window_start:.0f} s; retry")
            window_start, window_bytes = now, 0
        yield chunk


def retrying(fetch, what: str, stop=None):
    """`fetch()`, tried again after a transient `Fail` (TRIES in all); `stop()` true: give up now
    (another download of the same realise failed for good)."""
    from .progress import say

    for attempt in range(1, TRIES + 1):
        try:
            return fetch()
        except Fail as f:
            if not f.transient or attempt == TRIES or (stop is not None and stop()):
                raise
            say(f"{what}: {f.message}; trying again ({attempt + 1}/{TRIES})")
            time.sleep(PAUSE * 2 ** (attempt - 1))
