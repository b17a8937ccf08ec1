"""Fuzzing what fdlenv reads from others: lock files, index pages, zip members, a shell's state.

A bounded hypothesis run per reader (a fixed example budget, no deadline). Each reader may
accept the input or refuse it with its own failure type (`Fail`, `streamzip.Malformed`, ...);
anything else escaping is a traceback a user would see, and fails the test.
"""

from __future__ import annotations

import io
import json
import os
import zipfile
from pathlib import Path

import pytest
import yaml
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdlenv.index import simpleapi
from fdlenv.base.errors import Fail
from fdlenv.store import activation, streamzip, wheelfile
from fdlenv.lock.file import Record, read_variant

# 60 examples per reader in the suite; FDLENV_FUZZ_EXAMPLES=N for a longer hunt.
BUDGET = settings(max_examples=int(os.environ.get("FDLENV_FUZZ_EXAMPLES", "60")), deadline=None, suppress_health_check=list(HealthCheck), database=None)

scalars = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False),
                    st.text(max_size=20), st.sampled_from(["cpu", "linux-64", "pip", "conda", "1", "main"]))
values = st.recursive(scalars, lambda inner: st.one_of(st.lists(inner, max_size=4),
                                                      st.dictionaries(st.text(max_size=10), inner, max_size=4)),
                      max_leaves=20)
KEYS = ["name", "version", "manager", "platform", "url", "hash", "category", "categories",
        "dependencies", "optional"]
entries = st.dictionaries(st.sampled_from(KEYS), values, max_size=len(KEYS))
locks = st.fixed_dictionaries({"version": st.sampled_from([1, 1, 2, "1", None]),
                               "metadata": st.one_of(values, st.just({"platforms": ["linux-64"]})),
                               "package": st.one_of(st.lists(entries, max_size=4), values)})


def _tmp(tmp_path_factory, name: str) -> Path:
    return tmp_path_factory.mktemp("fuzz") / name


@BUDGET
@given(doc=locks)
def test_a_lock_of_any_shape_is_read_or_refused_with_one_error(tmp_path_factory, doc):
    path = _tmp(tmp_path_factory, "conda-lock.yml")
    path.write_text(yaml.safe_dump(doc))
    try:
        read_variant(path, "cpu", "linux-64")
    except Fail:
        pass


@BUDGET
@given(text=st.text(alphabet=st.sampled_from(list("[]{}:- \n'\"#&*!|>abc01")), max_size=400))
def test_lock_text_of_any_bytes_is_read_or_refused_with_one_error(tmp_path_factory, text):
    path = _tmp(tmp_path_factory, "conda-lock.yml")
    path.write_text("version: 1\npackage: " + text)
    try:
        read_variant(path, "cpu", "linux-64")
    except Fail:
        pass


html = st.lists(st.one_of(
    st.text(max_size=30),
    st.builds(lambda href, text, meta: f'<a href="{href}" {meta}>{text}</a>',
              st.sampled_from(["x-1.0-py3-none-any.whl#sha256=ab", "file:///etc/passwd", "/abs/t.whl", "%zz",
                               "http://[::1", "", "#", "?q#sha256="]),
              st.text(max_size=20), st.sampled_from(["", "data-yanked", "data-core-metadata=true",
                                                     'data-dist-info-metadata="sha256=zz"', "data-requires-python"]))),
    max_size=8).map("".join)


@BUDGET
@given(body=html)
def test_an_html_project_page_of_any_shape_is_read_or_refused(body):
    try:
        simpleapi._from_html(body.encode(), "https://index.example/simple/x/")
    except Fail:
        pass


@BUDGET
@given(doc=st.one_of(values, st.fixed_dictionaries({"files": st.lists(st.dictionaries(
    st.sampled_from(["filename", "url", "hashes", "size", "yanked", "requires-python", "core-metadata"]),
    values, max_size=7), max_size=4)})))
def test_a_json_project_page_of_any_shape_is_read_or_refused(doc):
    try:
        simpleapi._from_json(json.dumps(doc).encode(), "https://index.example/simple/x/", "page")
    except Fail:
        pass


def _wheel() -> bytes:
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        z.writestr("w/__init__.py", "X = 1\n" * 50)
        z.writestr("w/lib/libw.so", bytes(range(256)) * 20)
        z.writestr("w-1.0.dist-info/RECORD", "w/__init__.py,,\n")
    return out.getvalue()


WHEEL = _wheel()
mutations = st.lists(st.tuples(st.integers(0, len(WHEEL) - 1), st.integers(0, 255)), min_size=1, max_size=12)


def _mutated(changes) -> bytes:
    data = bytearray(WHEEL)
    for at, byte in changes:
        data[at] = byte
    return bytes(data)


@BUDGET
@given(changes=mutations, cut=st.integers(0, len(WHEEL)), step=st.integers(1, 4096))
def test_the_stream_reader_takes_any_bytes_without_a_traceback(tmp_path_factory, changes, cut, step):
    data = _mutated(changes)[: cut or None]
    unzip = streamzip.StreamUnzip(tmp_path_factory.mktemp("z"), wheelfile.place)
    try:
        for i in range(0, len(data), step):
            unzip.feed(data[i:i + step])
        unzip.complete()
        unzip.finish()
    except (streamzip.Malformed, streamzip.Unsupported, streamzip.Escape):
        pass


@BUDGET
@given(changes=mutations)
def test_the_whole_file_extractor_takes_any_bytes_without_a_traceback(tmp_path_factory, changes):
    from fdlenv.names.home import Home

    tmp = tmp_path_factory.mktemp("w")
    path = tmp / "w-1.0-py3-none-any.whl"
    path.write_bytes(_mutated(changes))
    home = Home(tmp / "home")
    home.ensure(home.pkgs)
    r = Record("pip", "w", "1.0", "", path.as_uri(), "0" * 64, None, "linux-64")
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(2) as pool:
        try:
            wheelfile.extract(home, r, path, pool)
        except Fail:
            pass


@BUDGET
@given(state=st.one_of(st.text(max_size=60), values.map(json.dumps),
                       st.dictionaries(st.text(max_size=12), values, max_size=4).map(lambda d: json.dumps({"vars": d}))))
def test_any_shell_state_is_undone_or_dropped_and_never_raises(state):
    out = activation.restored({"_FDLENV_STATE": state, "PATH": "/a:/b", "X": "1"})
    assert "_FDLENV_STATE" not in out and all(isinstance(v, str) for v in out.values())


@pytest.mark.parametrize("nesting", ["[" * 50000 + "]" * 50000, "[" * 1000 + "]" * 1000, "{a: " * 3000 + "1" + "}" * 3000],
                         ids=["50000 brackets", "1000 brackets", "3000 braces"])
def test_deeply_nested_locks_are_one_error_not_a_crash(tmp_path, nesting):
    import subprocess
    import sys

    lock = tmp_path / "conda-lock.yml"
    lock.write_text("version: 1\npackage: " + nesting + "\n")
    for args in (["env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--home", str(tmp_path / "h")],
                 ["lock", "--check", "--out", str(lock), "--home", str(tmp_path / "h")]):
        res = subprocess.run([sys.executable, "-m", "fdlenv", *args], capture_output=True, text=True)
        assert res.returncode == 2, (args, res.returncode, res.stderr[-500:])
        assert res.stderr.strip().splitlines()[-1].startswith("error:") and "nested" in res.stderr
        assert "Traceback" not in res.stderr


@pytest.mark.parametrize("body, words", ids=["version 7", "a list as a name", "unclosed"], argvalues=[
    ("version: 7\npackage: []\n", "not a conda-lock v1"),
    ("version: 1\nmetadata: {platforms: [linux-64]}\npackage:\n- {name: [x], version: '1', manager: pip}\n", ""),
    ("version: 1\npackage: [\n", "does not parse"),
])
def test_lock_check_refuses_a_malformed_lock_with_one_error(tmp_path, body, words):
    import subprocess
    import sys

    lock = tmp_path / "conda-lock.yml"
    lock.write_text(body)
    res = subprocess.run([sys.executable, "-m", "fdlenv", "lock", "--check", "--out", str(lock),
                          "--home", str(tmp_path / "h")], capture_output=True, text=True)
    assert res.returncode == 2 and "Traceback" not in res.stderr, res.stderr[-800:]
    last = res.stderr.strip().splitlines()[-1]
    assert last.startswith("error: --out") and words in last
