"""Reading from the network with bounds: every body has a size cap and a deadline.

Why one module: an index page, a metadata file, a wheel and a conda archive are
all read from servers fdlenv does not control (a mirror may be hostile, broken or
slow), and each read must end. The rules, in one place:
- a socket operation waits at most TIMEOUT seconds;
- a request (`open_url`) has one total deadline, FDLENV_REQUEST_TIMEOUT
  (`deadlines`): a watch armed before the connect shuts the request's sockets
  when it passes, so a server that trickles one header line every 20 s (each
  socket operation well within TIMEOUT) is cut there, redirects included; the
  request is then `Overdue`, transient (exit 1), and not tried again here (the
  server had its whole deadline; the locks held are let go as the command ends);
- a page or metadata file (`read_all`) is read in pieces as they arrive, capped
  at its limit and finished within the same deadline, so one byte every 20 s
  cannot hold a lock for ever;
- a download (`chunks`) is capped at the size the lock or the index states (or
  at its caller's limit) and is stalled when less than STALL_BYTES arrived in the
  last STALL_WINDOW seconds (its watch is stood down once its headers came: a
  wheel's time grows with its size);
- a body that ends short of its Content-Length or its stated size was cut;
- by cause: more bytes than stated is permanent (the server serves other bytes);
  a cut, a reset, a timeout or a stall is transient (`Fail.retry`); what the
  bytes are is for the caller's hash to decide;
- a request is tried again (TRIES in all) after a refused, reset or closed
  connection or an answer `netconf.retry_pause` names (503, Retry-After...); a
  cut page is fetched again (`fetch`), a download too (`retrying`); only then
  is it the caller's (exit 1); credentials (`netauth`), CAs and proxies
  (`netconf`) are pip's and uv's, and a refusal of them is permanent.
- a stop (SIGTERM, Ctrl-C: `stop_all`, called by the signal's handler) cuts every
  request in flight at once and lets none start or be tried again: the download
  threads end now instead of at their deadline, and the process leaves within the
  second a service manager expects.
"""

from __future__ import annotations

import threading
import time
from _weakrefset import WeakSet   # weakref's own set, loaded already by threading

from .errors import Fail
from .netauth import shown

TYPE_CHECKING = False
if TYPE_CHECKING:
    import http.client
    import io
    import socket
    import ssl
    import urllib.request
    from collections.abc import Callable, Iterator
    from typing import Any, TypeVar

    T = TypeVar("T")

    class Response(http.client.HTTPResponse):
        """What `open_url` answers: urllib's response to an http(s) request, carrying its watch
        (`read_all` and `chunks` stand it down; a HEAD's caller cancels it). A name for the type
        checker only: import it under TYPE_CHECKING."""

        fdlenv_watch: _Watch

TIMEOUT = 60                 # seconds one socket operation may block
STALL_WINDOW = 60            # a download is stalled when, over this many seconds,
STALL_BYTES = 64 << 10       # ... fewer bytes than this arrived
PIECE = 1 << 20
GATHER = 0.25                # seconds a download piece may wait to fill (HTTPS hands out 16 KiB records)
TRIES = 3                    # attempts of one download before its transient failure is reported
PAUSE = 1.0                  # seconds before the second attempt, doubled for each later one


class Overdue(Fail):
    """A request that did not finish within its total deadline: transient, never tried again
    by `retrying` (the server had the whole deadline)."""


_STOPPING = False     # set once by `stop_all`: the process is stopping
_LIVE: WeakSet[_Watch] = WeakSet()   # every request's watch while its response lives


class _Watch:
    """The deadline of one request: shuts the sockets it opened when `seconds` pass."""

    def __init__(self, url: str, seconds: float):
        self.url, self.seconds, self.fired, self.done = url, seconds, False, False
        self.socks: list[socket.socket] = []
        self.guard = threading.Lock()
        self.timer = threading.Timer(seconds, self._fire)
        self.timer.daemon = True
        self.timer.start()
        _LIVE.add(self)

    def add(self, sock: socket.socket) -> None:
        with self.guard:
            self.socks.append(sock)
            if not self.fired and not _STOPPING:
                return
        self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        import socket
        try:
            sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass

    def _fire(self) -> None:
        with self.guard:
            if self.done:
                return
            self.fired = True
            socks = list(self.socks)
        for sock in socks:
            self._shut(sock)

    def cancel(self) -> bool:
        """Cancel the deadline; whether it had already passed."""
        with self.guard:
            self.done = True
            fired = self.fired
        self.timer.cancel()
        return fired

    def stand_down(self) -> None:
        """Cancel the deadline; `Overdue` if it had already passed."""
        if self.cancel():
            raise self.overdue()

    def overdue(self, came: int | None = None) -> Overdue:
        from .deadlines import REQUEST_VAR
        what = "did not answer" if came is None else f"did not finish ({came} bytes came)"
        return Overdue(f"{self.url} {what} within {self.seconds:g} s ({REQUEST_VAR}); the server is "
                       "stalled or too slow, retry later", transient=True)


def stop_all() -> None:
    """A stop: cut every request in flight (its reads fail at once) and refuse new ones and
    retries. Called from a signal handler, in the main thread, which may hold a watch's guard:
    so it takes no lock (a socket connected after the flag is set is shut by `add`)."""
    global _STOPPING
    _STOPPING = True
    for watch in list(_LIVE):
        for sock in list(watch.socks):
            _Watch._shut(sock)


def _pause(seconds: float, what: str) -> None:
    """The pause before a retry, in slices a stop (`stop_all`) ends at once: a thread waiting out a
    capped Retry-After must not hold the process past its stop."""
    end = time.monotonic() + seconds
    while not _STOPPING and (left := end - time.monotonic()) > 0:
        time.sleep(min(0.25, left))
    if _STOPPING:
        raise Fail.retry(f"{what}: not tried again: this process is stopping")


_local = threading.local()
_OPENER: urllib.request.OpenerDirector | None = None
# One TLS context for every request of the process: each context loads the CA store (~1 MiB),
# and urllib makes one per connection when given none (16 for 16 index pages side by side).
# Its CAs are the ones pip or uv would use (`netconf.tls`), hostnames checked.
_CONTEXT_LOCK = threading.Lock()
_SETTINGS = {"ca": "the system's CAs", "proxy": ""}   # which CA and proxy settings the opener uses


def _watched(conn_class: Callable[..., http.client.HTTPConnection]) -> Callable[..., http.client.HTTPConnection]:
    """`conn_class`, each connection's socket added to this thread's watch once connected."""
    def make(host: str, **kw: Any) -> http.client.HTTPConnection:
        conn = conn_class(host, **kw)
        watch: _Watch | None = getattr(_local, "watch", None)
        connect = conn.connect

        def connect_watched() -> None:
            connect()
            if watch is not None:
                watch.add(conn.sock)
        conn.connect = connect_watched   # type: ignore[method-assign]  # this connection's own connect
        return conn
    return make


def _opener() -> urllib.request.OpenerDirector:
    global _OPENER
    with _CONTEXT_LOCK:   # one opener (and so one TLS context) for all the threads asking at once
        if _OPENER is None:
            _OPENER = _build_opener()
    return _OPENER


def _build_opener() -> urllib.request.OpenerDirector:
    import urllib.request

    from . import netauth, netconf

    class Watched(urllib.request.AbstractHTTPHandler):
        def do_open(self, http_class: Callable[..., http.client.HTTPConnection], req: urllib.request.Request,
                    **kw: Any) -> http.client.HTTPResponse:
            # Credentials by the origin asked, here below the redirects: another host gets none.
            req.remove_header("Authorization")
            auth = netauth.authorization(req.full_url)
            if auth is not None:
                req.add_unredirected_header("Authorization", auth[0])
            return super().do_open(_watched(http_class), req, **kw)

    class HTTP(Watched, urllib.request.HTTPHandler):
        pass

    class HTTPS(Watched, urllib.request.HTTPSHandler):
        _context: ssl.SSLContext | None   # HTTPSHandler's own, which typeshed does not declare

        def https_open(self, req: urllib.request.Request) -> http.client.HTTPResponse:
            if self._context is None:   # made on the first https:// request, then shared
                with _CONTEXT_LOCK:
                    if self._context is None:
                        self._context, _SETTINGS["ca"] = netconf.tls()
            return super().https_open(req)

    found, _SETTINGS["proxy"] = netconf.proxies()
    return urllib.request.build_opener(HTTP, HTTPS, urllib.request.ProxyHandler(found))


def _open_once(url: str, headers: dict[str, str] | None, method: str | None, within: float | None) -> Response:
    import http.client
    import urllib.request

    from .deadlines import request_timeout

    if _STOPPING:
        raise Fail.retry(f"{url}: not requested: this process is stopping")
    seconds = request_timeout() if within is None else min(within, request_timeout())
    watch = _Watch(url, seconds)
    _local.watch = watch
    try:
        resp: Response = _opener().open(urllib.request.Request(url, headers=headers or {}, method=method),
                                        timeout=min(TIMEOUT, seconds))
    except (OSError, http.client.HTTPException):
        if watch.cancel():
            raise watch.overdue() from None
        raise
    finally:
        _local.watch = None
    if watch.fired:       # headers cut short by the watch parse as a (shorter) answer: not one
        resp.close()
        raise watch.overdue()
    resp.fdlenv_watch = watch
    return resp


def open_url(url: str, headers: dict[str, str] | None = None, method: str | None = None,
             within: float | None = None) -> Response:
    """urlopen under one deadline per try (FDLENV_REQUEST_TIMEOUT, or `within` s if shorter: connect,
    redirects, headers and, by `read_all`, the body), tried again as `netconf.retry_pause` says;
    then OSError, `Overdue`, or a permanent `Fail` (`netconf.refused`: credentials, proxy, CA).
    `url` may carry `user:password@` (`netauth.split`). `method`: "HEAD" for headers only."""
    import http.client

    from . import netauth, netconf
    from .progress import say
    url = netauth.split(url)
    for attempt in range(1, TRIES + 1):
        try:
            return _open_once(url, headers, method, within)
        except (OSError, http.client.HTTPException) as e:
            if _STOPPING:   # cut by the stop: not a fault of the index, never tried again
                raise
            refusal = netconf.refused(url, e, _SETTINGS["ca"], _SETTINGS["proxy"])
            if refusal is not None:
                raise refusal from None
            pause = netconf.retry_pause(e, attempt)
            if pause is None or attempt == TRIES:
                e.fdlenv_tries = attempt   # type: ignore[union-attr]  # told by `why`
                raise
            getattr(e, "close", lambda: None)()
            say(f"{shown(url)}: {why(e)}; trying again in {pause:g} s ({attempt + 1}/{TRIES})")
            _pause(pause, url)
    raise AssertionError("unreachable: the last try returns or raises")


def fetch(url: str, limit: int, headers: dict[str, str] | None = None) -> tuple[bytes, Response]:
    """(the body of `url`, at most `limit` bytes; its closed response): a page, a metadata file or
    a range, fetched again (TRIES in all) when its body is cut (`open_url` tries the rest again)."""
    return retrying(lambda: _fetch_once(url, limit, headers), shown(url))


def _fetch_once(url: str, limit: int, headers: dict[str, str] | None) -> tuple[bytes, Response]:
    with open_url(url, headers) as resp:
        return read_all(resp, limit, shown(url)), resp


def why(e: BaseException) -> str:
    """Why a request failed, as one line: a redirect loop (urllib says so over three lines) as
    itself, anything else its reason with its whitespace folded."""
    code = getattr(e, "code", None)
    if isinstance(code, int) and 300 <= code < 400:
        return f"it redirects in a loop or more than 10 times (the last answer: HTTP {code})"
    text = " ".join(str(getattr(e, "reason", None) or e).split())
    text = f"HTTP {code} ({text})" if isinstance(code, int) else text
    tries = getattr(e, "fdlenv_tries", 0)
    return f"{text}, {tries} tries" if tries > 1 else text


def _stand_down(f: io.BufferedIOBase) -> None:
    """A download's body is held to the stall rule, not to the request's deadline."""
    watch = getattr(f, "fdlenv_watch", None)
    if watch is not None:
        watch.stand_down()


def _piece(f: io.BufferedIOBase, n: int) -> bytes:
    """What has arrived, up to `n` bytes, without waiting for all `n` (read1 where it exists)."""
    read1 = getattr(f, "read1", None)
    piece: bytes = read1(n) if read1 is not None else f.read(n)
    return piece


def _gathered(f: io.BufferedIOBase, buf: bytearray) -> bytes | memoryview:
    """Up to `len(buf)` bytes: what has arrived, then more while it keeps arriving (GATHER s at
    most). Over HTTPS a read hands out one 16 KiB TLS record; whoever consumes the pieces (the
    hash, the zip stream, the file writes) pays per piece, so it gets a few large ones instead,
    gathered into `buf` (a view of it: valid until the next call) rather than joined anew."""
    n = len(buf)
    first = _piece(f, n)
    if not first or len(first) >= n >> 1:
        return first
    view = memoryview(buf)
    have, end = len(first), time.monotonic() + GATHER
    view[:have] = first
    while have < n and time.monotonic() < end:
        more = _piece(f, n - have)
        if not more:
            break           # the end: the next read says so again
        view[have:have + len(more)] = more
        have += len(more)
    return view[:have]


def _ended_short(f: io.BufferedIOBase, url: str, n: int) -> None:
    """At the end of a body: one the server declared longer (Content-Length; http.client's read1
    just stops at a cut, it does not raise) was cut."""
    left = getattr(f, "length", None)
    if isinstance(left, int) and left > 0:
        raise Fail.retry(f"{url} ended early at {n} bytes, {left} short of its Content-Length; retry")


def _cut(url: str, e: BaseException) -> Fail:
    return Fail.retry(f"reading {url} was cut ({type(e).__name__}: {e}); retry")


def read_all(f: io.BufferedIOBase, limit: int, url: str, deadline: float | None = None) -> bytes:
    """The whole body of `f`, at most `limit` bytes (more: permanent), within `deadline` s
    (default: what is left of the request's deadline; past it: `Overdue`, transient)."""
    import http.client

    from .deadlines import request_timeout

    watch: _Watch | None = getattr(f, "fdlenv_watch", None)
    seconds = deadline if deadline is not None else watch.seconds if watch is not None else request_timeout()
    end, n = time.monotonic() + seconds, 0
    parts: list[bytes] = []
    try:
        while True:
            chunk = _piece(f, min(PIECE, limit + 1 - n))
            if watch is not None and watch.fired:
                raise watch.overdue(n)
            if not chunk:
                _ended_short(f, url, n)
                break
            n += len(chunk)
            parts.append(chunk)
            if n > limit:
                raise Fail.permanent(f"{url} sent over {limit >> 20} MiB; an index page or metadata file "
                                     "is far smaller (a broken or hostile index?)")
            if time.monotonic() > end:
                raise Fail.retry(f"{url} did not finish within {seconds:g} s ({n} bytes came); "
                                 "the server is too slow, retry")
    except (OSError, http.client.HTTPException) as e:
        if watch is not None and watch.fired:
            raise watch.overdue(n) from None
        raise _cut(url, e) from None
    finally:
        if watch is not None:
            watch.cancel()
    return b"".join(parts)


def chunks(f: io.BufferedIOBase, url: str, limit: int, stated: int | None = None,
           size: int = PIECE) -> Iterator[bytes | memoryview]:
    """The body of download `f` piece by piece: at most `limit` bytes (`stated`: the size the
    lock or index gives, a tighter cap, and a body ending short of it is a cut), never stalled;
    a cut is a transient `Fail`. A piece may be a view of one buffer this reuses: consume it
    (hash it, write it) before asking for the next, never keep it."""
    import http.client

    _stand_down(f)
    cap = stated if stated is not None else limit
    n, window_start, window_bytes = 0, time.monotonic(), 0
    buf = bytearray(size)
    while True:
        try:
            chunk = _gathered(f, buf)
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


def pieces(url: str, limit: int) -> Iterator[bytes | memoryview]:
    """The body of `url` (http(s), with pip's credentials, CAs and proxies, or file://) piece by
    piece under `chunks`' rules, in one attempt: a caller that can start over (its hash anew)
    wraps its whole reading in `retrying`. OSError or HTTPException as `open_url` raises them."""
    with open_url(url) as resp:
        yield from chunks(resp, shown(url), limit)


def retrying(fetch: Callable[[], T], what: str, stop: Callable[[], bool] | None = None) -> T:
    """`fetch()`, tried again after a transient `Fail` (TRIES in all); `stop()` true: give up now
    (another download of the same realise failed for good)."""
    from .progress import say

    for attempt in range(1, TRIES + 1):
        try:
            return fetch()
        except Fail as f:
            if (not f.transient or isinstance(f, Overdue) or attempt == TRIES or _STOPPING
                    or (stop is not None and stop())):
                raise
            say(f"{what}: {f.message}; trying again ({attempt + 1}/{TRIES})")
            _pause(PAUSE * 2 ** (attempt - 1), what)
    raise AssertionError("unreachable: the last attempt returns or raises")
