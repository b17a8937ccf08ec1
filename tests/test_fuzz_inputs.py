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

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

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


# ------------------------------------------------------------------ issue 48: names, bounds, RECORD

def _one_line(e: BaseException) -> None:
    assert "\n" not in str(e) and str(e), repr(e)


HOSTILE_NAMES = ["torch-2.10.0+cpu-1/../../../../../bashrc-cp312-cp312-linux_x86_64.whl",
                 "torch-2.10.0+cpu-1%2F..%2F..%2Fbashrc-cp312-cp312-linux_x86_64.whl",
                 "torch-2.10.0+cpu-1%252F..%252Fbashrc-cp312-cp312-linux_x86_64.whl",
                 "torch-2.10.0-1%5C..%5Cx-cp312-cp312-linux_x86_64.whl", "..", "%2E%2E", "other-1.0-py3-none-any.whl",
                 "torch-1." + "9" * 5000 + "-py3-none-any.whl", "torch-2.10.0-py3-none-any.whl",
                 "torch-2.10.0-cp312-cp312-manylinux_2_28_x86_64.whl", "torch-2.10.0.tar.gz", "torch-\x00.whl"]
hostile_html = st.lists(st.builds(
    lambda name, href, extra: f'<a href="{href or name}" {extra}>{name}</a>',
    st.one_of(st.sampled_from(HOSTILE_NAMES), st.text(max_size=40)),
    st.one_of(st.just(""), st.sampled_from(["../../x/../../y.whl", "/a/%2e%2e/b.whl", "http://h/a/../b.whl",
                                            "https://h/" + "x" * 9000])),
    st.sampled_from(["", 'data-requires-python=">=3.' + "1" * 100 + '"', "data-requires-python='>=3.8'",
                     'data-core-metadata="sha256=zz"'])), max_size=6).map("".join)


@BUDGET
@given(body=hostile_html)
def test_a_hostile_project_page_is_read_or_refused_in_one_line_naming_the_index(body):
    """Issue 48: a page is bounded and each name checked before it is used; a refusal is one
    permanent line naming the index and the project; what is kept is a wheel of torch."""
    from fdlenv.index import checked

    raw = body.encode("utf-8", "surrogatepass")
    try:
        kept = checked.parsed(raw, False, "https://index.example/simple", "torch",
                              lambda _: simpleapi._from_html(raw, "https://index.example/simple/torch/"))
    except Fail as e:
        _one_line(e)
        assert not e.transient and "https://index.example/simple" in e.message
        return
    for f in kept:
        assert "/" not in f.filename and "\\" not in f.filename and f.filename not in (".", "..")
        if f.filename.endswith(".whl"):
            assert f.filename.startswith("torch-")


@BUDGET
@given(doc=st.fixed_dictionaries({"files": st.lists(st.fixed_dictionaries({
    "filename": st.one_of(st.sampled_from(HOSTILE_NAMES), values),
    "url": st.one_of(st.sampled_from(["t.whl", "../../../etc/passwd", "/x/%2e%2e/y"]), values),
    "requires-python": st.one_of(st.none(), values, st.just(">=3." + "7" * 5000))}), max_size=5)}))
def test_a_hostile_json_page_is_read_or_refused_in_one_line(doc):
    from fdlenv.index import checked

    raw = json.dumps(doc).encode()
    try:
        checked.parsed(raw, True, "https://index.example/simple", "torch",
                       lambda _: simpleapi._from_json(raw, "https://index.example/simple/torch/", "page"))
    except Fail as e:
        _one_line(e)


@BUDGET
@given(lines=st.lists(st.one_of(
    st.sampled_from(["Requires-Dist: c==1." + "9" * 20000, "Requires-Dist: c>=1.0", "Version: 1." + "0" * 5000,
                     "Requires-Python: >=3." + "8" * 4400, "Requires-Dist: c (>=1.0)"]),
    st.text(alphabet=st.sampled_from(list("Requires-Dist: c=<>!~.0123456789;[]()'\" ")), max_size=60)), max_size=6))
def test_metadata_of_any_size_is_read_or_refused_in_one_line(lines):
    from fdlenv.index.provider import Meta, requirements_of

    body = ("Metadata-Version: 2.1\nName: a\nVersion: 1.0\n" + "\n".join(lines) + "\n").encode()
    try:
        meta = Meta(body, "a-1.0-py3-none-any.whl")
        list(requirements_of(meta, (), {"python_version": "3.12", "sys_platform": "linux"}))
    except Fail as e:
        _one_line(e)


def _recorded_wheel() -> bytes:
    """A wheel whose RECORD lists each member with its size, as real ones do."""
    members = {"w/__init__.py": b"X = 1\n" * 50, "w/lib/libw.so": bytes(range(256)) * 20,
               "w-1.0.dist-info/METADATA": b"Metadata-Version: 2.1\nName: w\nVersion: 1.0\n"}
    record = "".join(f"{n},,{len(b)}\n" for n, b in members.items()) + "w-1.0.dist-info/RECORD,,\n"
    out = io.BytesIO()
    with zipfile.ZipFile(out, "w", zipfile.ZIP_DEFLATED) as z:
        for n, b in {**members, "w-1.0.dist-info/RECORD": record.encode()}.items():
            z.writestr(n, b)
    return out.getvalue()


RECORDED = _recorded_wheel()


@BUDGET
@given(changes=st.lists(st.tuples(st.integers(0, len(RECORDED) - 1), st.integers(0, 255)), min_size=1, max_size=12),
       step=st.integers(1, 4096))
def test_a_mutated_wheel_is_extracted_with_its_record_agreeing_or_refused_in_one_line(tmp_path_factory, changes, step):
    """Issue 48: the stream reader, then RECORD both ways; a mutation is accepted only where every
    member is listed with the size extracted, else refused in one line."""
    data = bytearray(RECORDED)
    for at, byte in changes:
        data[at] = byte
    root = tmp_path_factory.mktemp("r")
    unzip = streamzip.StreamUnzip(root, wheelfile.place)
    r = Record("pip", "w", "1.0", "", "https://index.example/w-1.0-py3-none-any.whl", "0" * 64, None, "linux-64")
    try:
        for i in range(0, len(data), step):
            unzip.feed(bytes(data[i:i + step]))
        unzip.finish()
        wheelfile.check_record(r, root, unzip.sizes)
    except (streamzip.Malformed, streamzip.Unsupported, streamzip.Escape, Fail) as e:
        _one_line(e)
        return
    finally:
        unzip.close()
    listed = {ln.split(",")[0] for ln in (root / "site/w-1.0.dist-info/RECORD").read_text().splitlines()}
    assert set(unzip.sizes) <= listed
