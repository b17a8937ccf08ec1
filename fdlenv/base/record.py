"""Typed records without importing typing or collections: `class Env(Record)` with annotated fields.

Why: a record (an env, a pointer, a survey result, a setting) should say the type of each
field, and `typing.NamedTuple` says it, but importing `typing` costs about 2 ms,
`dataclasses` about 10 ms and `collections` (namedtuple's home) about 1.2 ms, which the hot
commands answered from their memo (about 2 ms of fdlenv's own) would pay on every call.
So the type checker reads `Record` as `typing.NamedTuple` (it is that name, imported under
TYPE_CHECKING), and at run time `Record`'s metaclass makes what `typing.NamedTuple` would:
a tuple of the annotated fields, in order, with their defaults, `_fields`, `_replace`,
`_asdict`, a repr and pickling, and the methods and properties the class body defines.
Fields are read from the annotations' names only, never from what they say (strings
under `from __future__ import annotations`; evaluated types in the modules the hot path
imports, which go without it: `__future__` is one module more on every call). Fields are read through the same C descriptor namedtuple
uses (`_collections._tuplegetter`, a built-in module: no import of `collections`).
"""

__all__ = ["Record"]
TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import NamedTuple as Record
else:
    try:
        from _collections import _tuplegetter as _getter
    except ImportError:      # another interpreter: a property over operator's itemgetter
        from operator import itemgetter

        def _getter(i, doc):
            return property(itemgetter(i), doc=doc)

    def _methods(name, fields, defaults):
        n = len(fields)

        def __new__(cls, *args, **kw):
            if len(args) > n:
                raise TypeError(f"{name}() takes {n} arguments, {len(args)} given")
            values = list(args)
            for f in fields[len(args):]:
                if f in kw:
                    values.append(kw.pop(f))
                elif f in defaults:
                    values.append(defaults[f])
                else:
                    raise TypeError(f"{name}() missing argument {f!r}")
            if kw:
                raise TypeError(f"{name}() got unexpected or repeated arguments {sorted(kw)}")
            return tuple.__new__(cls, values)

        def _replace(self, **kw):
            out = type(self)(*(kw.pop(f, v) for f, v in zip(fields, self, strict=True)))
            if kw:
                raise TypeError(f"{name}._replace() got unexpected arguments {sorted(kw)}")
            return out

        def _asdict(self):
            return dict(zip(fields, self, strict=True))

        def __repr__(self):
            return f"{name}(" + ", ".join(f"{f}={v!r}" for f, v in zip(fields, self, strict=True)) + ")"

        def __getnewargs__(self):
            return tuple(self)

        return {"__new__": __new__, "_replace": _replace, "_asdict": _asdict, "__repr__": __repr__,
                "__getnewargs__": __getnewargs__}

    class _Maker(type):
        def __new__(mcls, name, bases, ns):
            if ns.get("__module__") == __name__ and name == "Record":
                return super().__new__(mcls, name, bases, ns)
            fields = tuple(ns.get("__annotations__", {}))
            defaults = {f: ns[f] for f in fields if f in ns}
            if any(f not in defaults for f in fields[len(fields) - len(defaults):]):
                raise TypeError(f"{name}: a field without a default follows one with a default")
            body = {k: v for k, v in ns.items() if k not in fields and k != "__annotations__"}
            body.update(_methods(name, fields, defaults), __slots__=(), _fields=fields, _field_defaults=defaults)
            for i, f in enumerate(fields):
                body[f] = _getter(i, f"{name}.{f}")
            return type(name, (tuple,), body)

    class Record(metaclass=_Maker):
        """The base of a typed record (see the module docstring)."""
