"""Which devices a variant's kernels serve, and how arch spellings parse.

The per-variant arch lists are the reference's (read out of the published
libtorch 2.10.0 archives). Rule: an NVIDIA device is covered when any token
has the SAME MAJOR compute capability and a minor no newer than the device's (SASS runs on
the later minors of its major: cu130's 7.5 serves sm_75, never sm_70);
an AMD device needs its exact bare gfx target. Tokens are parsed, never
substring-matched (the old `"5" in "7.5"` test gave false passes), and a
token that does not parse (`cpu`) covers nothing.

The parsers are `str` methods, not `re` (which `detect` would import for three patterns,
~2.5 ms), with the same answers: `str.isdecimal` is what a `re` digit class matches (Unicode
category Nd), `str.isalnum` or `_` a word character, and `str.split()` splits on what `re`
takes for whitespace.
"""

from __future__ import annotations

from collections.abc import Iterable

from .model import AMD, NVIDIA, Device

_ROCM = ("gfx908", "gfx90a", "gfx942", "gfx950", "gfx1030", "gfx1100", "gfx1101",
         "gfx1102", "gfx1150", "gfx1151", "gfx1200", "gfx1201")

ARCHS: dict[str, tuple[str, ...]] = {
    "cpu": ("cpu",),
    "cu126": ("5.0", "5.2", "6.0", "6.1", "7.0", "7.5", "8.0", "8.6", "8.9", "9.0"),
    "cu128": ("7.0", "7.5", "8.0", "8.6", "8.9", "9.0", "12.0"),
    # torch 2.10.0+cu130's (PyTorch's CUDA 13.0 builds; CUDA 13 compiles for nothing older than sm_75).
    "cu130": ("7.5", "8.0", "8.6", "9.0", "10.0", "12.0"),
    "rocm7.0": _ROCM,
    "rocm7.1": _ROCM,
}

_HEX = frozenset("0123456789abcdef")


def dotted(text: str) -> tuple[int, int] | None:
    """All of `text` as `MAJOR.MINOR` (`(\\d+)\\.(\\d+)`, whole) -> the two numbers."""
    major, dot, minor = text.partition(".")
    return (int(major), int(minor)) if dot and major.isdecimal() and minor.isdecimal() else None


def leading_version(text: str) -> tuple[int, int] | None:
    """`MAJOR.MINOR` at the start of `text`, anything after (`6.2.1`, `12.8rc`): what
    `re.match(r"(\\d+)\\.(\\d+)", text)` finds."""
    major, dot, rest = text.partition(".")
    n = 0
    while n < len(rest) and rest[n].isdecimal():
        n += 1
    return (int(major), int(rest[:n])) if dot and n and major.isdecimal() else None


def parse_cc(token: str) -> tuple[int, int] | None:
    """`8.6`, `sm_86`, `sm86`, `sm_120`, each optionally `+PTX` -> (major, minor)."""
    t = token.strip().lower()
    if t.endswith("+ptx"):
        t = t[:-4]
    if t.startswith("sm"):      # sm_?(\d+)(\d): the last digit is the minor, sm_120 = 12.0
        digits = t[3:] if t.startswith("sm_") else t[2:]
        return (int(digits[:-1]), int(digits[-1])) if len(digits) > 1 and digits.isdecimal() else None
    return dotted(t)


def parse_gfx(token: str) -> str | None:
    """`gfx90a`, also with a feature suffix (`gfx90a:xnack-`) -> bare `gfx90a`."""
    t = token.strip().lower().split(":", 1)[0]
    return t if t.startswith("gfx") and len(t) > 3 and _HEX.issuperset(t[3:]) else None


def split_archs(archs: str | Iterable[str]) -> list[str]:
    """A `.arch` `archs=` value (`;`, `,` or space separated) or a list, as tokens."""
    if isinstance(archs, str):
        return archs.replace(";", " ").replace(",", " ").split()
    return list(archs)


def covers(variant_archs: str | Iterable[str], device: Device) -> bool:
    tokens = split_archs(variant_archs)
    if device.vendor == NVIDIA:
        cc = parse_cc(device.arch)
        return cc is not None and any((p := parse_cc(t)) is not None and p[0] == cc[0] and p[1] <= cc[1]
                                       for t in tokens)
    if device.vendor == AMD:
        gfx = parse_gfx(device.arch)
        return gfx is not None and any(parse_gfx(t) == gfx for t in tokens)
    return False


def variant_covers(variant: str, device: Device) -> bool:
    """`covers` against a known variant's shipped arch list."""
    return covers(ARCHS[variant], device)
