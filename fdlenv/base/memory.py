"""malloc's policy is the process owner's: library code asks, only the program's main sets it.

A wheel stream allocates and frees a few times its bytes in per-step buffers. Two glibc
settings make that cheap and keep the peak low (figures in `hold` and `give_back`), but
both change malloc for the whole process: a host program that imports fdlenv as a library
must not find its allocator retuned. So, in this order:
1. `cli.main`, run as the `fdlenv` program (never when a host calls it), calls `own_process()`;
2. the fetch (`store.wheelfetch`), before it starts its threads, and the stream
   (`store.streamzip`) call `hold()`; the stream calls `give_back()` every so many bytes.
   Both do nothing unless step 1 ran, and nothing on a C library without these calls (musl,
   macOS). ctypes is loaded only then.
"""

from __future__ import annotations

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable

    # glibc's (malloc_trim, mallopt), as ctypes calls them
    Libc = tuple[Callable[[int], int], Callable[[int, int], int]]

_OWNED: list[bool] = []   # [True] once the program's main owns the process
_LIBC: list[Libc | None] = []   # [glibc's (malloc_trim, mallopt), or None where the C library has neither], found once
_HELD: list[bool] = []    # [True] once hold() has set the thresholds
HOLD_BELOW = 8 << 20      # blocks under this come from malloc's arenas, not a mapping of their own
TRIM_ABOVE = 32 << 20     # an arena's free top is handed back only past this (give_back does the rest)
ARENAS = 1                # threads made after `hold` share the main arena (see `hold`)


def own_process() -> None:
    """The program's main (cli.main as `fdlenv`): malloc's policy is fdlenv's to set here."""
    if not _OWNED:
        _OWNED.append(True)


def _libc() -> Libc | None:
    if not _OWNED:
        return None
    if not _LIBC:
        try:
            import ctypes

            c = ctypes.CDLL(None)
            _LIBC.append((c.malloc_trim, c.mallopt))
        except (OSError, AttributeError):
            _LIBC.append(None)
    return _LIBC[0]


def hold() -> None:
    """Once per process, before the streams' threads start (`store.wheelfetch.fetch`): malloc
    keeps the pages a stream's per-step buffers (reads, inflated steps, unconsumed input) free
    and take again, instead of mapping them afresh each time (a fresh page faults in at about
    5 us on a VM: the cu128 env took 485,000 faults, 92,000 with this); `give_back` still trims
    every so often. And the threads made from now on share one arena instead of one each:
    each arena keeps its own high-water mark between trims, and four streams in four arenas
    peaked at 71-78 MiB against 68-69 MiB in one (a cold cu128 realise from the configured
    index, two runs each; no slower: the streams allocate a few blocks per MiB)."""
    if _HELD or (libc := _libc()) is None:
        return
    _HELD.append(True)
    libc[1](-3, HOLD_BELOW)    # M_MMAP_THRESHOLD
    libc[1](-1, TRIM_ABOVE)    # M_TRIM_THRESHOLD
    libc[1](-8, ARENAS)        # M_ARENA_MAX


def give_back() -> None:
    """Hand the memory freed in every malloc arena back to the OS (glibc's malloc_trim). A stream
    allocates and frees a few times its bytes, in blocks glibc then keeps per thread: four
    streams held some 20 MiB more at their peak (82 MiB against 60 MiB for a cu128 realise)."""
    if (libc := _libc()) is not None:
        libc[0](0)
