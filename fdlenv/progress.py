"""Human progress on stderr, so stdout stays clean for `--json`.

Anything that may take over a second says what it is doing; `Ticker` repeats
a line every few seconds while something waits (a lock holder, a download).
"""

from __future__ import annotations

import sys
import time

PREFIX = "fdlenv"


def say(message: str) -> None:
    print(f"{PREFIX}: {message}", file=sys.stderr, flush=True)


def note(command: str, message: str) -> None:
    """A command's own line, `fdlenv <command>: <message>` (prepare's and join's notes)."""
    print(f"{PREFIX} {command}: {message}", file=sys.stderr, flush=True)


class Ticker:
    """Call `tick()` often; it prints at most once per `every` seconds."""

    def __init__(self, message, every: float = 3.0, clock=time.monotonic):
        self._message = message  # str or callable returning str
        self._every = every
        self._clock = clock
        self._last = clock()

    def tick(self) -> None:
        now = self._clock()
        if now - self._last >= self._every:
            self._last = now
            say(self._message() if callable(self._message) else self._message)


class during:
    """`with during("compiling x"):` says the message, then repeats it with the
    elapsed time every `every` seconds from a background thread, for work that
    has no progress hook of its own (a compiler, a compressor)."""

    def __init__(self, message: str, every: float = 5.0):
        import threading

        self._message = message
        self._every = every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def _run(self) -> None:
        start = time.monotonic()
        while not self._stop.wait(self._every):
            say(f"{self._message} ... {time.monotonic() - start:.0f} s")

    def __enter__(self) -> "during":
        say(f"{self._message} ...")
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()
