"""Typed records without importing typing: `class Env(Record)` with annotated fields.

Why: a record (an env, a pointer, a survey result, a setting) should say the type of each
field, and `typing.NamedTuple` says it, but importing `typing` costs about 2 ms and
`dataclasses` about 10 ms, which the re-dial path (`env realize` without a memo, about 20 ms
of fdlenv's own) would pay on every call. So the type checker reads `Record` as
`typing.NamedTuple` (it is that name, imported under TYPE_CHECKING), and at run time
`Record`'s metaclass makes the same class `typing.NamedTuple` would: a
`collections.namedtuple` of the annotated fields, in order, with their defaults, and the
methods and properties the class body defines. Fields are read from the annotations'
names only (they are strings under `from __future__ import annotations`), never evaluated.
"""

from __future__ import annotations

import collections

__all__ = ["Record"]
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    class _Maker(type):
        def __new__(mcls, name, bases, ns):
            if ns.get("__module__") == __name__ and name == "Record":
                return super().__new__(mcls, name, bases, ns)
            fields = list(ns.get("__annotations__", {}))
            defaults = [ns[f] for f in fields if f in ns]
            if any(f not in ns for f in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{name}: a field without a default follows one with a default")
            base = collections.namedtuple(name, fields, defaults=defaults or None, module=ns.get("__module__"))
            body = {k: v for k, v in ns.items() if k not in fields and k not in ("__annotations__", "__qualname__")}
            body["__slots__"] = ()
            body["__qualname__"] = ns.get("__qualname__", name)
            return type(name, (base,), body)

    class Record(metaclass=_Maker):
        """The base of a typed record (see the module docstring)."""
