"""The source spec grammar: every shipped spelling, every broken shape."""

import pytest

from fdlenv.base.errors import EXIT_PERMANENT, Fail
from fdlenv.source.spec import ACCEPTED, GitSpec, LocalSpec, RsyncSpec, parse, spec_hash

GOOD = [
    ("file:///srv/train", LocalSpec("file:///srv/train", "/srv/train")),
    ("file:///srv/train/", LocalSpec("file:///srv/train/", "/srv/train")),
    ("rsync://ctrl:/srv/train", RsyncSpec("rsync://ctrl:/srv/train", "ctrl", None, None, "/srv/train")),
    ("rsync://flodl@ctrl:/srv/t", RsyncSpec("rsync://flodl@ctrl:/srv/t", "ctrl", "flodl", None, "/srv/t")),
    ("rsync://ctrl:2222/srv/t", RsyncSpec("rsync://ctrl:2222/srv/t", "ctrl", None, 2222, "/srv/t")),
    ("rsync://flodl@ctrl:2222:/srv/t", RsyncSpec("rsync://flodl@ctrl:2222:/srv/t", "ctrl", "flodl", 2222, "/srv/t")),
    ("rsync://ctrl/srv/t", RsyncSpec("rsync://ctrl/srv/t", "ctrl", None, None, "/srv/t")),
    ("git+https://github.com/me/train#v1.2",
     GitSpec("git+https://github.com/me/train#v1.2", "https://github.com/me/train", "v1.2")),
    ("git+ssh://git@github.com/me/train#release/2024-06",
     GitSpec("git+ssh://git@github.com/me/train#release/2024-06", "ssh://git@github.com/me/train",
             "release/2024-06")),
    ("git+file:///srv/mirror/train.git#main",
     GitSpec("git+file:///srv/mirror/train.git#main", "file:///srv/mirror/train.git", "main")),
    # Split at the first `#`: a later one is part of the ref.
    ("git+https://h/r#feat#2", GitSpec("git+https://h/r#feat#2", "https://h/r", "feat#2")),
]


@pytest.mark.parametrize("raw,want", GOOD)
def test_every_shipped_spelling_parses(raw, want):
    assert parse(raw) == want


def test_rsync_remote_is_rsyncs_own_spelling():
    assert parse("rsync://flodl@ctrl:2222:/srv/t").remote == "flodl@ctrl:/srv/t"
    assert parse("rsync://ctrl:2222/srv/t").remote == "ctrl:/srv/t"


BROKEN = [
    ("", "names no transport"),
    ("/srv/train", "file:// + its absolute path"),
    ("./train", "names no transport"),
    ("ftp://host/x", "unsupported source scheme"),
    ("git://host/x#main", "unsupported source scheme"),
    ("file://srv/train", "absolute path"),
    ("file://", "absolute path"),
    ("file:///", "root is not a source root"),
    ("rsync://ctrl", "no path"),
    ("rsync://ctrl:pear:/srv", "not a number"),
    ("rsync://ctrl:pear/srv", "not a number"),
    ("rsync://ctrl:0/srv", "not a number in 1-65535"),
    ("rsync://ctrl:70000/srv", "not a number in 1-65535"),
    ("rsync://:/srv", "empty host"),
    ("rsync://@ctrl:/srv", "empty user"),
    ("rsync://ctrl:/", "root is not a source root"),
    ("rsync://-oProxyCommand=x:/srv", "starting with `-`"),
    ("git+https://github.com/me/train", "not a pin"),
    ("git+https://github.com/me/train#", "empty ref"),
    ("git+https://#main", "no repository"),
    ("git+file://rel/repo#main", "absolute path"),
    ("git+https://h/r#--upload-pack=evil", "not a valid git ref"),
    ("git+https://h/r#a..b", "not a valid git ref"),
    ("git+https://h/r#has space", "not a valid git ref"),
    ("file:///srv/a\nb", "control character"),
]


@pytest.mark.parametrize("raw,why", BROKEN)
def test_a_broken_spec_is_permanent_and_names_the_forms(raw, why):
    with pytest.raises(Fail) as e:
        parse(raw, field="join.source.from")
    f = e.value
    assert not f.transient and f.exit_code == EXIT_PERMANENT
    assert why in f.message
    assert f.message.startswith("join.source.from: ")
    assert ACCEPTED in f.message


def test_a_missing_ref_explains_why_a_default_branch_is_not_a_pin():
    with pytest.raises(Fail) as e:
        parse("git+ssh://git@host/me/train")
    assert "default branch floats" in e.value.message and "#v1.2" in e.value.message


@pytest.mark.parametrize("path", ["/srv/a b;$(touch pwned)`id`|&>'x'\"y\"*?", "/srv/-rf", "/srv/#x"])
def test_shell_metacharacters_in_a_path_are_carried_as_data(path):
    assert parse("file://" + path).path == path
    assert parse("rsync://ctrl:" + path).path == path


def test_each_origin_has_its_own_directory_and_a_ref_move_keeps_it():
    a, b = parse("git+file:///r.git#v1"), parse("git+file:///r.git#v2")
    assert spec_hash(a) == spec_hash(b)
    hashes = {spec_hash(parse(s)) for s in (
        "file:///srv/t", "file:///srv/u", "rsync://ctrl:/srv/t", "rsync://ctrl:2222:/srv/t",
        "rsync://me@ctrl:/srv/t", "git+file:///srv/t#main", "git+https://h/srv/t#main")}
    assert len(hashes) == 7
    assert spec_hash(parse("file:///srv/t/")) == spec_hash(parse("file:///srv/t"))
