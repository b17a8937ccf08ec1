"""`fdlenv build` through the CLI front: JSON shape, exit codes, reuse on a re-dial."""

import json

import pytest

from fdlenv.front import cli
from fdlenv.store.env import Env as FakeStoreEnv
from fdlenv.source import manifest
from fdlenv.source.manifest import RunManifest

from helpers_source import environ_for, fake_env, needs_rsync, write_tree

RECIPE = 'mkdir -p target/release && printf "%s" "$FDL_TEST_ACTIVATED" > target/release/train'


@pytest.fixture
def fdlenv(monkeypatch, tmp_path, capsys):
    """main() with only the build command, and a fake env instead of the store's."""
    from fdlenv.store import activation, realise

    from helpers_store import make_world

    monkeypatch.setattr(cli, "COMMANDS", ("build",))
    make_world(tmp_path / "locked", variants=("cpu", "cu128"))   # a real lock the view reads
    (tmp_path / "conda-lock.yml").write_bytes((tmp_path / "locked" / "conda-lock.yml").read_bytes())
    capsys.readouterr()   # what locking it said is not the command's output
    env = fake_env(tmp_path)
    seen = []

    def fake_realise(home, variant, lock, mirrors=None, *, activate=False, fork=False, platform=None,
                     check=False):
        seen.append((variant, lock))
        return FakeStoreEnv(variant, env.key, env.path, env.libtorch_root, False)

    monkeypatch.setattr(realise, "realise", fake_realise)
    monkeypatch.setattr(activation, "child_environ", lambda home, e, base=None, rocm_root=None: environ_for(env))
    monkeypatch.chdir(tmp_path)  # no fdl.yml above: lock discovery sees only flags and the tree

    def run(*argv, lock=True):
        given = ["--lock", str(tmp_path / "conda-lock.yml")] if lock else []
        code = cli.main(["build", "--home", str(tmp_path / "home"), *given, *argv])
        out, err = capsys.readouterr()
        return code, out, err

    run.seen = seen
    return run


@needs_rsync
def test_the_json_names_the_artifact_and_a_redial_reuses_it(fdlenv, tmp_path):
    src = write_tree(tmp_path / "src", {"main.rs": "fn main(){}\n"})
    m = RunManifest(bin="target/release/train", build=RECIPE, args=("--epochs", "2"), run="feedbeef" * 4)
    (src / ".fdl-run.yml").write_text(manifest.dump(m))
    code, out, err = fdlenv("--libtorch", "12.8", "--source", f"file://{src}", "--json")
    assert code == 0, err
    first = json.loads(out)
    assert set(first) == {"schema", "bin", "cwd", "build_key", "built", "run_id", "args", "seconds"}
    assert first["built"] is True and first["run_id"] == m.run and first["args"] == ["--epochs", "2"]
    assert open(first["bin"]).read().startswith("from-") and len(first["build_key"]) == 64
    assert set(first["seconds"]) >= {"source", "env", "build", "total"}
    assert "run manifest: run feedbeef" in err
    assert fdlenv.seen[0][0] == "cu128"  # the token is canonicalised before the store sees it
    code, out, _ = fdlenv("--libtorch", "cu128", "--source", f"file://{src}", "--json", "--", "--lr", "1")
    again = json.loads(out)
    assert code == 0 and again["built"] is False and again["bin"] == first["bin"]
    assert again["args"] == ["--lr", "1"]  # a `--` tail replaces the manifest's args


@needs_rsync
def test_a_lock_at_the_trees_root_is_used_when_none_is_given(fdlenv, tmp_path):
    src = write_tree(tmp_path / "src", {"main.rs": "x", "conda-lock.yml": (tmp_path / "conda-lock.yml").read_text()})
    code, out, err = fdlenv("--libtorch", "cpu", "--source", f"file://{src}", "--source-build", RECIPE,
                            "--source-bin", "target/release/train", lock=False)
    assert code == 0, err
    assert fdlenv.seen[0][1].name == "conda-lock.yml" and fdlenv.seen[0][1].parent != src
    assert out.startswith("built ")       # the result on stdout, progress on stderr


def test_a_broken_spec_exits_2_before_anything_moves(fdlenv, tmp_path):
    code, out, err = fdlenv("--libtorch", "cpu", "--source", "git+https://h/r", "--json")
    assert code == 2 and err.startswith("error: source:") and "not a pin" in err
    assert json.loads(out) == {"schema": 1, "error": err[len("error: "):].strip(), "exit": 2}   # --json: an object
    assert not (tmp_path / "home" / "source").exists() and fdlenv.seen == []


@needs_rsync
def test_a_failing_build_exits_1_and_an_empty_one_exits_2(fdlenv, tmp_path):
    src = write_tree(tmp_path / "src", {"main.rs": "x"})
    code, out, err = fdlenv("--libtorch", "cpu", "--source", f"file://{src}", "--source-build", "exit 4",
                            "--source-bin", "t", "--json")
    assert code == 1 and "exit 4" in err and json.loads(out)["exit"] == 1
    code, _, err = fdlenv("--libtorch", "cpu", "--source", f"file://{src}", "--source-build", "true",
                          "--source-bin", "t")
    assert code == 2 and "is not a file" in err


@needs_rsync
def test_no_manifest_and_no_bin_is_transient(fdlenv, tmp_path):
    src = write_tree(tmp_path / "src", {"main.rs": "x"})
    code, _, err = fdlenv("--libtorch", "cpu", "--source", f"file://{src}")
    assert code == 1 and "--source-bin" in err


def test_the_help_carries_an_example(monkeypatch, capsys):
    monkeypatch.setattr(cli, "COMMANDS", ("build",))
    with pytest.raises(SystemExit) as e:
        cli.main(["build", "--help"])
    assert e.value.code == 0
    out = capsys.readouterr().out
    assert "examples:" in out and "fdlenv build --libtorch cpu --source file://" in out
