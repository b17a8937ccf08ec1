"""Which variant a command means: a `--libtorch` token, `auto`, or none.

It sits above the store and the hardware survey because it reads both: no
token carries the box's active variant (`store.pointers`), `auto` routes on
this box's GPUs (`hw.survey` then `hw.routing`, imported only then).
"""

from __future__ import annotations

from . import variants


def settle(token: str | None, home, survey=None) -> str | None:
    """A `--libtorch` token -> canonical variant; `survey`: a callable returning the Survey
    (default: the real one); no token -> the box's active variant (None when nothing is)."""
    if token is None:
        from .store.pointers import active_variant
        return active_variant(home)
    name = variants.parse_token(token)
    if name != "auto":
        return name
    from .hw.routing import choose
    if survey is None:
        from .hw.survey import survey
    return choose(survey())
