"""The run manifest `.fdl-run.yml`: fields, tolerance, the stat-keyed cache."""

import os
import subprocess
import sys
import textwrap
import time

import pytest

from fdlenv.base.errors import Fail
from fdlenv.source import manifest
from fdlenv.source.manifest import Digest, RunManifest
from helpers_source import wait_out_racy_window
from fdlenv.source.state import State

FULL = RunManifest(bin="target/release/train", cwd="app", build="cargo build --release",
                   args=("--epochs", "3"), origin="file:///srv/t", rustc="rustc 1.80.0",
                   published_epoch=1_700_000_000, run="0123456789abcdef0123456789abcdef", built=True,
                   digest=Digest("ab" * 32, 3, 120))


def test_the_manifest_round_trips_through_yaml(tmp_path):
    (tmp_path / ".fdl-run.yml").write_text(manifest.dump(FULL))
    assert manifest.dump(FULL).startswith("#")
    assert manifest.read(tmp_path) == FULL


def test_absent_means_nothing_published_yet(tmp_path):
    assert manifest.read(tmp_path) is None


def test_only_bin_is_required_and_unknown_fields_are_tolerated(tmp_path):
    (tmp_path / ".fdl-run.yml").write_text("bin: train\nfuture_field: {x: 1}\n")
    m = manifest.read(tmp_path)
    assert m == RunManifest(bin="train") and m.args == () and m.built is False


@pytest.mark.parametrize("text,field", [
    ("cwd: app\n", "`bin`"),
    ("bin: ''\n", "`bin`"),
    ("bin: t\nargs: --x\n", "`args`"),
    ("bin: t\nargs: [1, 2]\n", "`args`"),
    ("bin: t\nbuilt: 'yes'\n", "`built`"),
    ("bin: t\npublished_epoch: soon\n", "`published_epoch`"),
    ("bin: t\ndigest: abc\n", "`digest`"),
    ("bin: t\ndigest: {sha256: xyz, files: 1, bytes: 2}\n", "`digest.sha256`"),
    ("bin: t\ndigest: {sha256: " + "a" * 64 + ", files: many, bytes: 2}\n", "`digest.files`"),
    ("- just\n- a list\n", "mapping"),
    ("bin: [unclosed\n", "not valid YAML"),
])
def test_an_invalid_manifest_is_permanent_and_names_the_field(tmp_path, text, field):
    (tmp_path / ".fdl-run.yml").write_text(text)
    with pytest.raises(Fail) as e:
        manifest.read(tmp_path)
    assert not e.value.transient and field in e.value.message


def test_the_summary_says_run_bin_cwd_age_and_who_built():
    s = manifest.summary(FULL, now=FULL.published_epoch + 600)
    assert s == "run manifest: run 01234567… bin target/release/train in app, published 10m ago"
    unbuilt = RunManifest(bin="t", published_epoch=1000)
    assert manifest.summary(unbuilt, now=1030).endswith("published just now — NOT built by the controller")
    assert "3h ago" in manifest.summary(unbuilt, now=1000 + 3 * 3600 + 5)
    assert "2d ago" in manifest.summary(unbuilt, now=1000 + 2 * 86400 + 5)
    assert "published" not in manifest.summary(unbuilt, now=10)  # clock behind: no age


READ = textwrap.dedent("""
    import sys
    from pathlib import Path
    from fdlenv.source import manifest
    from fdlenv.source.state import State
    st = State.load(Path(sys.argv[2]))
    print(manifest.read(Path(sys.argv[1]), st).bin)
    st.save()
    print("yaml imported" if "yaml" in sys.modules else "yaml not imported")
""")


@pytest.mark.slow   # it waits out the 2 s racy window
def test_an_unchanged_manifest_is_read_from_the_cache_without_yaml(tmp_path):
    (tmp_path / ".fdl-run.yml").write_text(manifest.dump(FULL))
    wait_out_racy_window(time.time_ns())   # a just-written file is never cached
    state = tmp_path / "state.json"
    run = lambda: subprocess.run([sys.executable, "-c", READ, str(tmp_path), str(state)],  # noqa: E731
                                 check=True, capture_output=True, text=True).stdout.split("\n")
    assert run()[:2] == ["target/release/train", "yaml imported"]
    assert run()[:2] == ["target/release/train", "yaml not imported"]
    (tmp_path / ".fdl-run.yml").write_text(manifest.dump(RunManifest(bin="other")))
    assert run()[:2] == ["other", "yaml imported"]


def test_a_just_written_manifest_is_not_cached(tmp_path):
    (tmp_path / ".fdl-run.yml").write_text("bin: a\n")
    st = State.load(tmp_path / "state.json")
    manifest.read(tmp_path, st)
    assert st.get("manifest") is None
    os.utime(tmp_path / ".fdl-run.yml", (1, 1))  # mtime old, but ctime is now: still racy
    manifest.read(tmp_path, st)
    assert st.get("manifest") is None


def test_a_corrupt_state_file_reads_as_empty(tmp_path):
    p = tmp_path / "s.json"
    p.write_text("{not json")
    st = State.load(p)
    assert st.get("files") is None
    st.put("x", 1)
    st.save()
    assert State.load(p).get("x") == 1 and not list(tmp_path.glob(".s.json.*"))
