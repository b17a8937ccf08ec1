"""An activation as data: applied over an environment, recorded in `_FDLENV_STATE`, undone.

Why its own module, importing only os: the memo replay (`hot.replay`) and the slow path
(`store.activation`) must apply an activation the same way, and the replay may import no
more than this. In order: `join` (a path list, de-duplicated), `apply` (unsets and sets
over a base environment, SENTINEL standing for the inherited value of a path list), then
the `_FDLENV_STATE` codec: `shell_state` writes how one environment became another as
length-prefixed text (any character may be in a value), `restored` undoes it.
"""

TYPE_CHECKING = False   # `typing` stays off the replay's path
if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping
    from typing import Any

SENTINEL = "/__fdlenv_inherited__"
PATH_LISTS = ("PATH", "LD_LIBRARY_PATH", "LIBRARY_PATH", "CPATH", "PKG_CONFIG_PATH",
              "CMAKE_PREFIX_PATH", "PYTHONPATH", "MANPATH", "XDG_DATA_DIRS")
STATE = "_FDLENV_STATE"
ROCM_VARS = ("ROCM_PATH", "HIP_PATH", "HSA_PATH")   # what the host ROCm lib dir is read from
# An activation's defaults: set only where the base has no (or an empty) value, so a user's
# own stands, on the slow path and in a replayed memo alike (a toolkit env's arch list).
DEFAULTS = ("TORCH_CUDA_ARCH_LIST",)


def join(parts: "Iterable[str]") -> str:
    """A path list from `parts`: empty entries dropped, the first of each kept."""
    seen: set[str] = set()
    out: list[str] = []
    for p in parts:
        if p and p not in seen:
            seen.add(p)
            out.append(p)
    return ":".join(out)


def apply(unset: "Iterable[str]", sets: "Iterable[tuple[str, str]]", base: "Mapping[str, str]") -> dict[str, str]:
    """`base` with `unset` removed, then each of `sets` (VAR, value) set; SENTINEL in a value
    stands for base's value of VAR (a path list: the result is de-duplicated); one of DEFAULTS
    that base has is left as it is."""
    out = dict(base)
    for var in unset:
        out.pop(var, None)
    for var, value in sets:
        if var in DEFAULTS and base.get(var):
            continue
        if SENTINEL in value:
            value = join(value.replace(SENTINEL, base.get(var, "")).split(":"))
        out[var] = value
    return out


def _field(value: str | None) -> str:
    return "-" if value is None else f"{len(value)}:{value}"


def shell_state(before: "Mapping[str, str]", after: "Mapping[str, str]") -> str:
    """The `_FDLENV_STATE` value recording how `before` became `after` (for `restored`): each
    changed variable as `<len>:<name>` then its value before and after, `<len>:<value>` or
    `-` for unset. Lengths, not separators: a value may hold any character."""
    changed = sorted(k for k in set(before) | set(after) if k != STATE and before.get(k) != after.get(k))
    return "fdlenv1;" + "".join(_field(k) + _field(before.get(k)) + _field(after.get(k)) for k in changed)


def _read_field(text: str, i: int) -> tuple[str, int]:
    colon = text.index(":", i)
    n = int(text[i:colon])
    if n < 0 or colon + 1 + n > len(text):
        raise ValueError("short")
    return text[colon + 1:colon + 1 + n], colon + 1 + n


def _read_nullable_field(text: str, i: int) -> tuple[str | None, int]:
    return (None, i + 1) if text.startswith("-", i) else _read_field(text, i)


def _read_state(raw: str) -> "dict[str, Any]":
    """Each changed variable -> [value before, value after]: fdlenv's own codec, checked only for
    its framing, or the JSON an older fdlenv wrote; `restored` checks each pair."""
    if raw.startswith("{"):   # written by fdlenv before 0.1's memo: JSON
        import json

        state = json.loads(raw)["vars"]
        return state if isinstance(state, dict) else {}
    if not raw.startswith("fdlenv1;"):
        raise ValueError("not ours")
    out: dict[str, Any] = {}
    i = len("fdlenv1;")
    while i < len(raw):
        var, i = _read_field(raw, i)
        was, i = _read_nullable_field(raw, i)
        now, i = _read_nullable_field(raw, i)
        out[var] = [was, now]
    return out


def restored(environ: "Mapping[str, str]") -> dict[str, str]:
    """`environ` with a shell activation (`_FDLENV_STATE`) undone: each variable gets its value
    from before, unless it was changed since. A path list changed since loses only the entries
    the activation added."""
    out = dict(environ)
    raw = out.pop(STATE, None)
    try:
        state = _read_state(raw) if raw else {}
    except (ValueError, KeyError, TypeError):
        return out          # not ours to read: dropped, nothing else touched
    if not state:
        return out          # no activation to undo (and base.shells not imported for one)
    from ..base.shells import valid_name

    for var, pair in state.items():
        if not isinstance(var, str) or not valid_name(var):
            continue
        try:
            was, now = pair
        except (TypeError, ValueError):
            continue
        if not all(v is None or isinstance(v, str) for v in (was, now)):
            continue
        cur = out.get(var)
        if cur == now:
            if was is None:
                out.pop(var, None)
            else:
                out[var] = was
        elif var in PATH_LISTS and cur is not None and now is not None:
            added = set(now.split(":")) - set((was or "").split(":"))
            out[var] = ":".join(p for p in cur.split(":") if p not in added)
    return out
