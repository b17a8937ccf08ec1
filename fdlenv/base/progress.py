"""Human progress on stderr, so stdout stays clean for `--json`.

Anything that may take over a second says what it is doing. How, depends on
where stderr goes:
- a terminal: one live line per long step (`Meter`, drawn by tqdm: bytes,
  rate and ETA where there is a size, the elapsed time otherwise), redrawn
  in place and finished with its final state; the rate and ETA are read from
  the last WINDOW seconds, never averaged since the start (a slow first
  connection does not make the ETA read an hour);
- anything else (a journal, a pipe, a CI log): plain lines, at most one
  every few seconds (`Ticker`, `during`, `Meter`'s fallback).
`-q` (`set_quiet`) silences all of it; errors are never progress and always
print. tqdm is imported only when a live line starts: never on a re-dial.
"""

from __future__ import annotations

import os
import sys
import time

from .output import scrub, stderr_line

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections import deque
    from collections.abc import Callable
    from typing import Any

PREFIX = "fdlenv"
_QUIET = False


def set_quiet(quiet: bool) -> None:
    global _QUIET
    _QUIET = quiet


def live() -> bool:
    """Whether progress is drawn in place: stderr is a terminal that can, and not -q."""
    try:
        tty = sys.stderr.isatty()
    except (AttributeError, ValueError):
        tty = False
    return tty and not _QUIET and os.environ.get("TERM") != "dumb"


def say(message: str) -> None:
    """One line on stderr, written whole (one write: a line said by a download thread never
    runs into the main thread's error line)."""
    if _QUIET:
        return
    stderr_line(scrub(f"{PREFIX}: {message}"))


def note(command: str, message: str) -> None:
    """A command's own line, `fdlenv <command>: <message>` (prepare's and join's notes)."""
    if _QUIET:
        return
    print(scrub(f"{PREFIX} {command}: {message}"), file=sys.stderr, flush=True)


class Ticker:
    """Call `tick()` often; it prints at most once per `every` seconds."""

    def __init__(self, message: str | Callable[[], str], every: float = 3.0,
                 clock: Callable[[], float] = time.monotonic):
        self._message = message  # str or callable returning str
        self._every = every
        self._clock = clock
        self._last = clock()

    def tick(self) -> None:
        if _QUIET:
            return
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            say(self._message() if callable(self._message) else self._message)


class Meter:
    """A long step's progress: `done` of `total` bytes (0: unknown) plus a short `detail`,
    read by a background thread that draws it live on a terminal (tqdm) or prints a plain
    line every `every` seconds elsewhere. `poll()`, when given, returns (done, detail)
    and is asked before each draw (for work that reports nothing itself)."""

    WINDOW = 8.0       # seconds of recent progress the rate and ETA are read from

    def __init__(self, message: str, total: int = 0, every: float = 3.0,
                 poll: Callable[[], tuple[int, str]] | None = None, clock: Callable[[], float] = time.monotonic):
        import threading   # not at module level: the re-dial path imports this module, never a Meter
        from collections import deque

        self.message, self.total, self.done, self.detail = message, total, 0, ""
        self._poll, self._every, self._clock = poll, every, clock
        self._lock = threading.Lock()
        self._start = clock()
        # (time, done) looks, the oldest within WINDOW: a slow start (index lookups, the first
        # connection) does not weigh on the rate for the rest of the download.
        self._samples: deque[tuple[float, int]] = deque([(self._start, 0)])
        self._stop = threading.Event()
        self._live = live()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._bar: Any = None   # a tqdm bar (tqdm has no types), drawn on a terminal only

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n

    def rate(self) -> float | None:
        """Bytes per second over the last WINDOW seconds (None until a second of it is seen)."""
        now = self._clock()
        samples = self._samples
        samples.append((now, self.done))
        while len(samples) > 2 and now - samples[1][0] >= self.WINDOW:
            samples.popleft()
        t0, d0 = samples[0]
        if now - t0 >= 1.0:
            return (self.done - d0) / (now - t0)
        # the first second: what came since the start, once anything did
        return self.done / (now - self._start) if self.done and now > self._start else None

    def eta(self, rate: float | None) -> float | None:
        if not self.total or not rate or self.done >= self.total:
            return None
        return (self.total - self.done) / rate

    def line(self) -> str:
        """The plain line: size, rate and ETA when there are bytes, the elapsed time always."""
        elapsed = max(self._clock() - self._start, 1e-6)
        head = f"{self.message}: {elapsed:.0f} s"
        if self.done or self.total:
            rate = self.rate()
            eta = self.eta(rate)
            size = f"{self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB" if self.total else f"{self.done / 1e9:.2f} GB"
            speed = f" at {_rate_text(rate)}" if rate is not None else ""
            head = f"{self.message}: {size}{speed}" + (f", ETA {_clock_text(eta)}" if eta is not None else "")
        return head + (f"; {self.detail}" if self.detail else "")

    def _refresh(self) -> None:
        if self._poll is not None:
            done, self.detail = self._poll()
            with self._lock:
                self.done = max(self.done, done)
        if self._bar is None:
            return
        self._bar.n = min(self.done, self.total) if self.total else self.done
        self._bar.set_description_str(f"{PREFIX}: {self.message}" + (f" ({self.detail})" if self.detail else ""),
                                      refresh=False)
        if self.total:
            rate = self.rate()
            eta = self.eta(rate)
            self._bar.set_postfix_str((_rate_text(rate) if rate is not None else "-- B/s")
                                      + (f" eta {_clock_text(eta)}" if eta is not None else ""), refresh=False)
        self._bar.refresh()

    def _run(self) -> None:
        while not self._stop.wait(0.25 if self._live else self._every):
            self._refresh()
            if not self._live:
                say(self.line())

    def __enter__(self) -> Meter:
        if _QUIET:
            return self
        if self._live:
            from tqdm import tqdm   # only a terminal draws a live line

            size = _stderr_size()
            self._bar = tqdm(total=self.total or None, desc=f"{PREFIX}: {self.message}", unit="B",
                             unit_scale=True, unit_divisor=1000, file=sys.stderr, leave=True,
                             ncols=size.columns, nrows=size.lines, mininterval=0.25,
                             bar_format="{desc}: {percentage:3.0f}%|{bar:12}| {n_fmt}B/{total_fmt}B{postfix}"
                             if self.total
                             else "{desc}: {elapsed}")
        else:
            say(f"{self.message} ...")
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if _QUIET:
            return
        self._stop.set()
        self._thread.join()
        if self._bar is not None:
            self._refresh()
            self._bar.close()


def _stderr_size() -> os.terminal_size:
    """The size of the terminal the bar is drawn on: stderr's (stdout may be a pipe: `--json | jq`);
    $COLUMNS/$LINES when set, a 0x0 pty or none: 100x24."""
    import shutil

    try:
        size = os.get_terminal_size(sys.stderr.fileno())
    except (OSError, ValueError, AttributeError):
        return shutil.get_terminal_size((100, 24))
    if size.columns and size.lines and not os.environ.get("COLUMNS"):
        return size
    return shutil.get_terminal_size((size.columns or 100, size.lines or 24))


def _rate_text(bps: float) -> str:
    """912 B/s, 48 kB/s, 105 MB/s, 1.2 GB/s."""
    for unit, size in (("GB/s", 1e9), ("MB/s", 1e6), ("kB/s", 1e3)):
        if bps >= size:
            return f"{bps / size:.1f} {unit}" if unit == "GB/s" else f"{bps / size:.0f} {unit}"
    return f"{bps:.0f} B/s"


def _clock_text(seconds: float) -> str:
    """42 s, 6:25, 1:20:16."""
    s = int(round(seconds))
    if s < 60:
        return f"{s} s"
    h, rest = divmod(s, 3600)
    return f"{h}:{rest // 60:02d}:{rest % 60:02d}" if h else f"{rest // 60}:{rest % 60:02d}"


class during(Meter):
    """`with during("compiling x"):`: a step with no size (a compiler, a compressor): its
    elapsed time, live on a terminal, else a line every `every` seconds."""

    def __init__(self, message: str, every: float = 5.0, poll: Callable[[], tuple[int, str]] | None = None,
                 total: int = 0):
        super().__init__(message, total, every, poll)


class Tally:
    """Progress for work counted in files and bytes whose totals are known once it starts
    (`verify --full`'s hashing, `mirror export`'s fetches), told through `__call__(files,
    nbytes, of_files, of_bytes)` from any thread: totals add to `of_*`, done work to the
    counts. Nothing shows for work done within SHOW_AFTER seconds; past that, one `Meter`
    line (bytes, rate, ETA; `n of N files`), whose clock started with the work, so the rate
    and ETA count the time before it showed. `close()` ends it with one summary line."""

    SHOW_AFTER = 1.0

    def __init__(self, message: str, clock: Callable[[], float] = time.monotonic):
        import threading

        self.message, self.files, self.nbytes, self.of_files, self.of_bytes = message, 0, 0, 0, 0
        self._clock, self._lock = clock, threading.Lock()
        self._meter: Meter | None = None
        self._shown = False
        self._start = clock()

    def __call__(self, files: int, nbytes: int, of_files: int = 0, of_bytes: int = 0) -> None:
        with self._lock:
            self.files += files
            self.nbytes += nbytes
            self.of_files += of_files
            self.of_bytes += of_bytes
            if self._meter is None:
                self._meter = Meter(self.message, total=self.of_bytes, poll=self._poll, clock=self._clock)
            self._meter.total = self.of_bytes
            show = not self._shown and self._clock() - self._start >= self.SHOW_AFTER
            self._shown = self._shown or show
        if show:
            self._meter.__enter__()

    def _poll(self) -> tuple[int, str]:
        return self.nbytes, f"{self.files} of {self.of_files} files"

    def close(self) -> None:
        """The meter's end and one line of what was done (only when it showed)."""
        if self._meter is not None and self._shown:
            self._meter.__exit__(None, None, None)
            took = self._clock() - self._start
            size = f"{self.nbytes / 1e9:.2f} GB" if self.nbytes >= 1e8 else f"{self.nbytes / 1e6:.1f} MB"
            say(f"{self.message}: {self.files} files, {size} in {_clock_text(took)}")
