"""Human progress on stderr, so stdout stays clean for `--json`.

Anything that may take over a second says what it is doing. How, depends on
where stderr goes:
- a terminal: one live line per long step (`Meter`, drawn by tqdm: bytes,
  rate and ETA where there is a size, the elapsed time otherwise), redrawn
  in place and finished with its final state;
- anything else (a journal, a pipe, a CI log): plain lines, at most one
  every few seconds (`Ticker`, `during`, `Meter`'s fallback).
`-q` (`set_quiet`) silences all of it; errors are never progress and always
print. tqdm is imported only when a live line starts: never on a re-dial.
"""

from __future__ import annotations

import os
import sys
import time

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
    if _QUIET:
        return
    print(f"{PREFIX}: {message}", file=sys.stderr, flush=True)


def note(command: str, message: str) -> None:
    """A command's own line, `fdlenv <command>: <message>` (prepare's and join's notes)."""
    if _QUIET:
        return
    print(f"{PREFIX} {command}: {message}", file=sys.stderr, flush=True)


class Ticker:
    """Call `tick()` often; it prints at most once per `every` seconds."""

    def __init__(self, message, every: float = 3.0, clock=time.monotonic):
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

    def __init__(self, message: str, total: int = 0, every: float = 3.0, poll=None):
        import threading   # not at module level: the re-dial path imports this module, never a Meter

        self.message, self.total, self.done, self.detail = message, total, 0, ""
        self._poll, self._every = poll, every
        self._lock = threading.Lock()
        self._start = time.monotonic()
        self._stop = threading.Event()
        self._live = live()
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._bar = None

    def add(self, n: int) -> None:
        with self._lock:
            self.done += n

    def line(self) -> str:
        """The plain line: size, rate and ETA when there are bytes, the elapsed time always."""
        elapsed = max(time.monotonic() - self._start, 1e-6)
        head = f"{self.message}: {elapsed:.0f} s"
        if self.done or self.total:
            rate = self.done / elapsed
            size = f"{self.done / 1e9:.2f} of {self.total / 1e9:.2f} GB" if self.total else f"{self.done / 1e9:.2f} GB"
            eta = (f", ETA {(self.total - self.done) / rate:.0f} s"
                   if self.total and rate > 0 and self.done < self.total else "")
            head = f"{self.message}: {size} at {rate / 1e6:.0f} MB/s{eta}"
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
        self._bar.refresh()

    def _run(self) -> None:
        while not self._stop.wait(0.25 if self._live else self._every):
            self._refresh()
            if not self._live:
                say(self.line())

    def __enter__(self) -> "Meter":
        if _QUIET:
            return self
        if self._live:
            import shutil

            from tqdm import tqdm   # only a terminal draws a live line

            size = shutil.get_terminal_size((100, 24))   # a 0x0 pty gets the fallback
            self._bar = tqdm(total=self.total or None, desc=f"{PREFIX}: {self.message}", unit="B",
                             unit_scale=True, unit_divisor=1000, file=sys.stderr, leave=True,
                             ncols=size.columns, nrows=size.lines, mininterval=0.25,
                             bar_format=("{desc}: {percentage:3.0f}%|{bar:12}| {n_fmt}B/{total_fmt}B "
                                         "{rate_fmt} eta {remaining}") if self.total
                             else "{desc}: {elapsed}")
        else:
            say(f"{self.message} ...")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        if _QUIET:
            return
        self._stop.set()
        self._thread.join()
        if self._bar is not None:
            self._refresh()
            self._bar.close()


class during(Meter):
    """`with during("compiling x"):`: a step with no size (a compiler, a compressor): its
    elapsed time, live on a terminal, else a line every `every` seconds."""

    def __init__(self, message: str, every: float = 5.0, poll=None, total: int = 0):
        super().__init__(message, total, every, poll)
