"""The hot path's pieces without a process: the `_FDLENV_STATE` codec, the JSON writer and
shell quoting that replace json and shlex there (each held to the module it replaces), and
the rule that keeps a memo from being written in its dependencies' clock tick."""

from __future__ import annotations

import json
import os
import re
import shlex

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from fdlenv.hot import memo as hot_memo, replay
from fdlenv.base.output import dumps
from fdlenv.base.shells import quote, valid_name

EXAMPLES = int(os.environ.get("FDLENV_FUZZ_EXAMPLES", "60"))


def _past_on_the_file_systems_clock(d, since_ns: int) -> None:
    """Until a file written in `d` gets an mtime after `since_ns`: a condition on the clock."""
    probe = d / ".probe"
    while True:
        probe.write_text("tick")
        if os.stat(probe).st_mtime_ns > since_ns:
            probe.unlink()
            return


def test_a_memo_is_written_only_when_every_dependency_is_older_than_it(tmp_path):
    dep, memo = tmp_path / "dep", tmp_path / "cache" / "memo"
    memo.parent.mkdir()
    dep.write_text("x")
    future = os.stat(dep).st_mtime_ns + 10**12     # a change yet to come, as a tick not yet past
    os.utime(dep, ns=(future, future))
    hot_memo._write_if_settled(str(memo), "text", {str(dep): replay.sig(str(dep))})
    assert not memo.exists()
    os.utime(dep, ns=(0, 0))
    _past_on_the_file_systems_clock(tmp_path, os.stat(dep).st_ctime_ns)
    hot_memo._write_if_settled(str(memo), "text", {str(dep): replay.sig(str(dep))})
    assert memo.read_text() == "text"
    assert [p.name for p in memo.parent.iterdir()] == ["memo"]   # no temp file left


NAMES = st.from_regex(r"[A-Za-z_][A-Za-z0-9_]{0,8}", fullmatch=True)
VALUES = st.text(st.characters(blacklist_characters="\0", blacklist_categories=("Cs",)), max_size=30)


@settings(max_examples=EXAMPLES, deadline=None)
@given(before=st.dictionaries(NAMES, VALUES, max_size=6), after=st.dictionaries(NAMES, VALUES, max_size=6))
def test_a_shell_state_undoes_exactly_what_it_recorded(before, after):
    before.pop(replay.STATE, None)
    after.pop(replay.STATE, None)
    shell = {**after, replay.STATE: replay.shell_state(before, after)}
    assert replay.restored(shell) == before


def test_a_state_written_by_an_older_fdlenv_as_json_is_still_undone():
    old = json.dumps({"vars": {"PATH": ["/usr/bin", "/env/bin:/usr/bin"], "NEW": [None, "1"]}})
    assert replay.restored({"PATH": "/env/bin:/usr/bin", "NEW": "1", replay.STATE: old}) == {"PATH": "/usr/bin"}


@pytest.mark.parametrize("garbage", ["fdlenv1;", "fdlenv1;9:PATH", "fdlenv1;4:PATH-x", "fdlenv1;-1:x--", "[1]", "plain"])
def test_a_state_fdlenv_cannot_read_is_dropped_and_nothing_else_touched(garbage):
    assert replay.restored({"PATH": "/a", replay.STATE: garbage}) == {"PATH": "/a"}


JSONABLE = st.recursive(st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(),
                        lambda kids: st.lists(kids, max_size=4) | st.dictionaries(st.text(max_size=5), kids, max_size=4),
                        max_leaves=12)


@settings(max_examples=EXAMPLES, deadline=None)
@given(obj=JSONABLE)
def test_the_json_writer_prints_what_json_dumps_prints(obj):
    assert dumps(obj) == json.dumps(obj)


@settings(max_examples=EXAMPLES, deadline=None)
@given(text=st.text(max_size=20))
def test_shell_quoting_is_shlex_quote_but_for_an_equals_sign_and_names_are_the_name_pattern(text):
    # A value holding `=` is always quoted (zsh expands a bare `=word`); shlex leaves `a=b` bare.
    if "=" in text:
        assert quote(text).startswith("'") and shlex.split(quote(text)) == [text]
    else:
        assert quote(text) == shlex.quote(text)
    assert valid_name(text) == (re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", text) is not None)
