"""`base.record.Record`: a typed record that is a tuple at run time, as a namedtuple is, without typing."""

from __future__ import annotations

import pickle
import subprocess
import sys

import pytest

from fdlenv.base.record import Record


class Pointer(Record):
    """A record of the shape the store keeps."""

    link: str
    target: str
    size: int | None = None

    @property
    def name(self) -> str:
        return self.link.rsplit("/", 1)[-1]

    def to_json(self) -> dict[str, object]:
        return {"link": self.link, "target": self.target}


def test_a_record_is_a_tuple_of_its_annotated_fields_in_order_with_their_defaults():
    p = Pointer("/h/libtorch/precompiled/cu128", "/h/envs/x")
    assert p == ("/h/libtorch/precompiled/cu128", "/h/envs/x", None) and isinstance(p, tuple)
    assert Pointer._fields == ("link", "target", "size") and p._replace(size=3).size == 3
    assert p.name == "cu128" and p.to_json() == {"link": p.link, "target": p.target}
    assert Pointer.__doc__ == "A record of the shape the store keeps." and Pointer.__name__ == "Pointer"


def test_a_record_survives_pickling_and_takes_no_new_attribute():
    p = Pointer("a", "b", 1)
    assert pickle.loads(pickle.dumps(p)) == p
    with pytest.raises(AttributeError):
        p.other = 1   # type: ignore[attr-defined]


def test_a_field_without_a_default_after_one_with_a_default_is_refused():
    with pytest.raises(TypeError, match="without a default follows"):
        class Bad(Record):
            a: int = 0
            b: int


def test_making_records_imports_neither_typing_nor_collections():
    code = ("import sys; from fdlenv.base.record import Record\n"
            "class R(Record):\n    a: int\n"
            "print('typing' in sys.modules, 'collections' in sys.modules, R(1).a)")
    out = subprocess.run([sys.executable, "-S", "-c", code], capture_output=True, text=True,
                         env={"PYTHONPATH": ":".join(p for p in sys.path if p)}, check=True).stdout
    assert out.split() == ["False", "False", "1"]


def test_a_record_is_made_as_a_namedtuple_is():
    p = Pointer("a", target="b")
    assert p == Pointer("a", "b", None) and p._asdict() == {"link": "a", "target": "b", "size": None}
    assert repr(p) == "Pointer(link='a', target='b', size=None)" and Pointer._field_defaults == {"size": None}
    for bad in (lambda: Pointer("a"), lambda: Pointer("a", "b", 1, 2), lambda: Pointer("a", "b", link="c"),
                lambda: p._replace(other=1)):
        with pytest.raises(TypeError):
            bad()
