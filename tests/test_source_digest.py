"""The tree digest, its per-file cache, and the `.fdl-run.sha256` check."""

import hashlib
import os
import shutil
import subprocess

import pytest

from fdlenv.base import hashing
from fdlenv.base.errors import Fail
from fdlenv.source import digest
from fdlenv.source.state import State

from helpers_source import write_tree

FILES = {"Cargo.toml": "[package]\n", "src/main.rs": "fn main(){}\n", "app/Cargo.toml": "[x]\n",
         "vendor/libtorch/a.h": "nested libtorch is user source\n"}
IGNORED = {"target/release/train": "bin", "app/target/x": "bin", ".git/HEAD": "ref",
           "libtorch/lib/libtorch.so": "so", ".fdl-run.yml": "bin: t\n", ".fdl-run.sha256": "x"}


def test_the_digest_is_the_sha256sum_listing_of_the_tree(tmp_path):
    tree = write_tree(tmp_path / "t", {**FILES, **IGNORED})
    s = digest.scan(tree)
    assert sorted(s.hashes) == sorted(FILES)
    if shutil.which("sha256sum"):  # the listing is what `sha256sum` prints, sorted
        out = subprocess.run(["sha256sum", *sorted(FILES)], cwd=tree, capture_output=True, text=True).stdout
        assert digest.sidecar_text(s) == out
    d = s.digest()
    assert d.sha256 == hashlib.sha256(digest.sidecar_text(s).encode()).hexdigest()
    assert (d.files, d.bytes) == (len(FILES), sum(len(v) for v in FILES.values()))
    assert d.content == d.sha256  # no symlinks


def test_symlinks_change_the_content_digest_only(tmp_path):
    tree = write_tree(tmp_path / "t", FILES)
    before = digest.scan(tree).digest()
    os.symlink("src/main.rs", tree / "link.rs")
    after = digest.scan(tree).digest()
    assert after.sha256 == before.sha256 and after.content != before.content
    os.remove(tree / "link.rs")
    os.symlink("Cargo.toml", tree / "link.rs")
    assert digest.scan(tree).digest().content not in (before.content, after.content)


def test_unchanged_files_are_not_reread_and_changed_ones_are(tmp_path, monkeypatch):
    tree = write_tree(tmp_path / "t", FILES)
    monkeypatch.setattr(digest, "RACY_NS", 0)
    st = State.load(tmp_path / "state.json")
    first = digest.scan(tree, st).digest()
    assert len(st.get("files")) == len(FILES)
    reads = []
    real = hashing.of_file
    monkeypatch.setattr(hashing, "of_file", lambda path, **kw: reads.append(str(path)) or real(path, **kw))
    assert digest.scan(tree, st).digest() == first and reads == []
    p = tree / "src/main.rs"
    old = p.stat()
    p.write_text("fn main(){1}")  # same size, mtime put back: only ctime tells
    os.utime(p, ns=(old.st_atime_ns, old.st_mtime_ns))
    changed = digest.scan(tree, st).digest()
    assert reads == [str(p)] and changed != first


def test_a_file_touched_just_now_is_not_cached(tmp_path):
    tree = write_tree(tmp_path / "t", {"a": "1"}, mtime=None)
    st = State.load(tmp_path / "state.json")
    digest.scan(tree, st)
    assert st.get("files") == {}


def published(tmp_path, files):
    tree = write_tree(tmp_path / "t", files)
    side = digest.sidecar_text(digest.scan(tree))
    (tree / digest.SIDECAR).write_text(side)
    return tree, hashlib.sha256(side.encode()).hexdigest()


def test_a_tree_matching_its_sidecar_passes(tmp_path):
    tree, sha = published(tmp_path, FILES)
    write_tree(tree, {"target/release/train": "built here", ".fdl-run.yml": "bin: x\n"})
    digest.verify(tree, sha, digest.scan(tree))


@pytest.mark.parametrize("mutate,expect", [
    (lambda t: (t / "src/main.rs").write_text("tampered"), "src/main.rs differs"),
    (lambda t: (t / "Cargo.toml").unlink(), "Cargo.toml is missing"),
    (lambda t: (t / "extra.rs").write_text("x"), "extra.rs is not in the published set"),
    (lambda t: (t / digest.SIDECAR).unlink(), "pulled mid-publish"),
    (lambda t: (t / digest.SIDECAR).write_text("0" * 64 + "  a\n"), "two different publishes"),
])
def test_the_digest_names_every_deviation_and_is_transient(tmp_path, mutate, expect):
    tree, sha = published(tmp_path, FILES)
    mutate(tree)
    with pytest.raises(Fail) as e:
        digest.verify(tree, sha, digest.scan(tree))
    assert e.value.transient and expect in e.value.message


def test_at_most_five_problems_are_listed(tmp_path):
    tree, sha = published(tmp_path, FILES)
    for i in range(8):
        (tree / f"extra{i}").write_text("x")
    with pytest.raises(Fail) as e:
        digest.verify(tree, sha, digest.scan(tree))
    assert e.value.message.count("is not in the published set") == 5 and "and 3 more" in e.value.message
