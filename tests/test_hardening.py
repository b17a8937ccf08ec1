"""Bad input and bad disks: one `error:` line, the right exit code, nothing half-written.

Each case here was a traceback, a hang or debris before (issue 13's adversarial pass).
"""

from __future__ import annotations

import errno
import json
import os
import stat
import subprocess
import sys
import zipfile

import pytest
import yaml
from helpers_conda import Pkg, write_env
from helpers_cli import fdlenv
from helpers_store import make_world, realise_json, visible_envs
from test_join_loop import _gone
from test_store_faults import tmpfs

from fdlenv.base import yamlfile
from fdlenv.config.load import load_project
from fdlenv.base.errors import Fail
from fdlenv.names.home import Home
from fdlenv.lock import lock_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def one_error_line(res: subprocess.CompletedProcess, code: int, *needles: str) -> str:
    """The command failed with `code` and said so in exactly one `error:` line, no traceback."""
    lines = [ln for ln in res.stderr.splitlines() if ln.startswith("error:")]
    assert res.returncode == code, res.stderr
    assert len(lines) == 1 and "Traceback" not in res.stderr, res.stderr
    assert all(n in lines[0] for n in needles), lines[0]
    return lines[0]


# ------------------------------------------------------------------ malformed locks

def _mutated_lock(w, mutate) -> None:
    doc = yaml.safe_load(w.lock.read_text())
    mutate(next(p for p in doc["package"] if p["name"] == "libtorch-cpu"))
    w.lock.write_text(yaml.safe_dump(doc, sort_keys=False))


@pytest.mark.parametrize("mutate, field", [
    (lambda p: p.__setitem__("hash", {"sha256": "abc", "md5": p["hash"]["md5"]}), "hash.sha256"),
    (lambda p: p.__setitem__("hash", "abc"), "hash"),
    (lambda p: p["hash"].__setitem__("md5", "zz"), "hash.md5"),
    (lambda p: p.__setitem__("dependencies", "x"), "dependencies"),
    (lambda p: p.__setitem__("dependencies", {"x": ["a"]}), "dependencies"),
    (lambda p: p.__setitem__("version", ["2.10"]), "version"),
    (lambda p: p.__setitem__("url", {"u": 1}), "url"),
])
def test_a_malformed_lock_field_is_one_error_line_naming_it(tmp_path, mutate, field):
    w = make_world(tmp_path)
    _mutated_lock(w, mutate)
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root))
    one_error_line(res, 2, "libtorch-cpu", field)
    assert visible_envs(w.home) == []


@pytest.mark.parametrize("content, needle", [
    (b"version: 1\npackage:\n  - name: \xff\xfe\n", "not UTF-8"),
    (b"version: 1\npackage: [\n  {name: a,\n   url: [\n", "does not parse as YAML at line"),
])
def test_a_lock_that_is_not_utf8_yaml_is_one_error_line(tmp_path, content, needle):
    lock = tmp_path / "conda-lock.yml"
    lock.write_bytes(content)
    res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(lock), "--home", str(tmp_path / "h"))
    one_error_line(res, 2, needle)


# ------------------------------------------------------------------ YAML people write

BOMB = ("a0: &a0 [x, x, x, x, x, x, x, x, x, x]\n"
        + "".join(f"a{i}: &a{i} [" + ", ".join([f"*a{i - 1}"] * 10) + "]\n" for i in range(1, 12))
        + "join:\n  devices: *a11\n")


def test_an_anchor_bomb_in_fdl_yml_is_refused_at_its_first_alias(tmp_path, monkeypatch):
    (tmp_path / "fdl.yml").write_text(BOMB)
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Fail) as e:
        load_project()
    assert not e.value.transient and "line 2" in e.value.message and "alias (*a0)" in e.value.message
    res = fdlenv("prepare", "--libtorch", "cpu", cwd=tmp_path)
    one_error_line(res, 2, "fdl.yml", "line 2", "alias")


def test_a_key_given_twice_is_refused_with_its_line(tmp_path, monkeypatch):
    (tmp_path / "fdl.yml").write_text("join:\n  bin: /a\n  libtorch: cpu\n  bin: /b\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(Fail) as e:
        load_project()
    assert "line 4" in e.value.message and "'bin' is given twice" in e.value.message


def test_an_env_file_with_an_alias_or_a_twice_given_key_is_refused(tmp_path):
    home = Home(tmp_path / "h")
    envs = tmp_path / "envs"
    write_env(envs, "cpu", ["flodl"], ["zlib"])
    (envs / "cpu.yml").write_text("channels: &c [flodl]\nplatforms: *c\ndependencies: [zlib]\n")
    with pytest.raises(Fail, match=r"cpu.yml: not YAML fdlenv reads \(line 2: an alias"):
        lock_envs(envs, tmp_path / "out.yml", home=home)
    (envs / "cpu.yml").write_text("channels: [flodl]\ndependencies: [zlib]\nchannels: [x]\n")
    with pytest.raises(Fail, match="line 3: the key 'channels' is given twice"):
        lock_envs(envs, tmp_path / "out.yml", home=home)


def test_a_large_fdl_yml_is_read_with_the_c_parser_and_whole(tmp_path, monkeypatch):
    args = [f"--arg-{i}=some padding to make the file large" for i in range(80_000)]
    (tmp_path / "fdl.yml").write_text(yaml.safe_dump({"join": {"bin": "/bin/true", "args": args}}))
    assert (tmp_path / "fdl.yml").stat().st_size > 4_000_000
    monkeypatch.chdir(tmp_path)
    assert list(load_project().join.args) == args
    assert yamlfile._loader().__mro__[1].__name__ == ("CSafeLoader" if hasattr(yaml, "CSafeLoader") else "SafeLoader")


def test_a_yaml_syntax_error_spanning_lines_is_one_error_line(tmp_path):
    (tmp_path / "fdl.yml").write_text("join:\n  args: [a,\n    b\n  bin: x\n")
    one_error_line(fdlenv("prepare", "--libtorch", "cpu", cwd=tmp_path), 2, "fdl.yml", "line")


# ------------------------------------------------------------------ tokens

@pytest.mark.parametrize("where", ["flag", "block"])
def test_a_token_with_a_newline_is_refused(tmp_path, where):
    (tmp_path / "train").write_text("#!/bin/sh\n")
    (tmp_path / "train").chmod(0o755)
    if where == "flag":
        res = fdlenv("join", "--bin", "./train", "--token", "abc\ndef", cwd=tmp_path)
        one_error_line(res, 2, "--token", "newline")
    else:
        (tmp_path / "fdl.yml").write_text('join:\n  bin: ./train\n  token: "abc\\ndef"\n')
        one_error_line(fdlenv("join", cwd=tmp_path), 2, "join.token", "newline")


# ------------------------------------------------------------------ a shared store

def test_conda_metadata_is_as_readable_as_the_rest_of_the_env(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    want = stat.S_IMODE(os.stat(os.path.join(env["path"], ".fdlenv", "manifest.json")).st_mode)
    meta = [os.path.join(env["path"], "conda-meta", n) for n in os.listdir(os.path.join(env["path"], "conda-meta"))
            if n.endswith(".json")]
    assert meta and {stat.S_IMODE(os.stat(p).st_mode) for p in meta} == {want}
    assert want & 0o044 == 0o044   # the usual umask: others may read


# ------------------------------------------------------------------ a full disk

@pytest.mark.parametrize("size", ["1m", "3m", "5m"])
def test_a_full_disk_at_any_step_is_transient_names_the_home_and_leaves_no_debris(tmp_path, size):
    """The same lock realised into homes of several sizes: the disk fills while the archive is
    hashed, extracted, linked or recorded; every time: exit 1, one line, nothing left half-written."""
    w = make_world(tmp_path, extra=[Pkg("bulky", "1.0", files={"share/bulk.bin": os.urandom(5 << 20)})])
    write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu", "bulky"])
    lock_envs(w.envs, w.lock, home=w.home)
    with tmpfs(tmp_path / "tiny", size) as tiny:
        home = tiny / "home"
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(home))
        one_error_line(res, 1, "no space left", str(home))
        debris = [os.path.join(d, n) for d, dirs, files in os.walk(home) for n in dirs + files
                  if n.startswith(".") and "/pkgs/" not in d + "/"]
        assert debris == [] and (not (home / "envs").exists() or not list((home / "envs").iterdir()))
        assert not (home / "staging").exists() or not list((home / "staging").iterdir())


def test_a_full_disk_error_that_names_no_file_names_the_home_not_the_working_directory(tmp_path, monkeypatch):
    """A write that fills the disk raises ENOSPC with no file name: the home the command settled
    is named, with its free space, never "the working directory"."""
    from fdlenv.base import errors

    monkeypatch.setattr(errors, "_HOME", None)    # restored after: the home is this test's
    with tmpfs(tmp_path / "tiny", "1m") as tiny:
        home = tiny / "home"
        errors.record_home(str(home), "--home")
        (home / "envs").mkdir(parents=True)
        with open(home / "envs" / "fill", "wb", buffering=0) as f, pytest.raises(OSError) as e:
            while True:
                f.write(b"\0" * 65536)
        assert e.value.errno == errno.ENOSPC and e.value.filename is None
        f = errors.os_failure(e.value)
        assert f.transient and f"no space left on the device holding {home} (0 MiB free)" in f.message, f.message
        assert "working directory" not in f.message


@pytest.mark.parametrize("bulky", [True, False], ids=["with a bulky package", "small files only"])
def test_a_home_out_of_inodes_is_told_apart_from_one_out_of_blocks(tmp_path, bulky):
    """ENOSPC is both "no block" and "no inode": a realise into a home on a tmpfs with room
    for 64 MiB but only a few dozen inodes says the inodes ran out (statvfs's f_favail),
    with the count, never "no space left (N MiB free)", which sends the operator after
    blocks that are there. Exit 1, one line, no debris, as for a full disk."""
    w = make_world(tmp_path, extra=[Pkg("many", "1.0", files={f"share/many/f{i}": b"x" for i in range(80)}),
                                    Pkg("bulky", "1.0", files={"share/bulk.bin": os.urandom(3 << 20)})])
    write_env(w.envs, "cpu", ["flodl"], ["libtorch-cpu", "many"] + (["bulky"] if bulky else []))
    lock_envs(w.envs, w.lock, home=w.home)
    tmp_path.joinpath("few").mkdir()
    with tmpfs(tmp_path / "few" / "inodes", "64m,nr_inodes=60") as few:
        home = few / "home"
        res = fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(home))
        line = one_error_line(res, 1, "no free inodes left", str(home), "inodes free")
        assert "no space left" not in line and "MiB free" in line
        assert not (home / "envs").exists() or not list((home / "envs").iterdir())
    if not bulky:
        return
    with tmpfs(tmp_path / "few" / "blocks", "2m") as tiny:
        home = tiny / "home"
        errors_line = one_error_line(fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(w.lock),
                                            "--home", str(home)), 1, "no space left", str(home))
        assert "no free inodes" not in errors_line and "inodes free" not in errors_line


def test_pack_on_a_full_disk_is_transient_and_leaves_no_partial_package(tmp_path):
    from test_pack_libtorch import official_zip

    src = official_zip(tmp_path, "cpu")
    big = tmp_path / "libtorch-shared-with-deps-2.10.0+cpu-big.zip"   # one that cannot fit
    with zipfile.ZipFile(src) as zin, zipfile.ZipFile(big, "w") as zout:
        for info in zin.infolist():
            zout.writestr(info, zin.read(info))
        zout.writestr("libtorch/lib/libtorch_cpu.so", os.urandom(3 << 20))
    with tmpfs(tmp_path / "tiny", "2m") as tiny:
        res = fdlenv("pack", "libtorch", "--variant", "cpu", "--from", str(big), "--channel", str(tiny / "ch"))
        one_error_line(res, 1, "no space left")
        left = [os.path.join(d, n) for d, _dirs, files in os.walk(tiny) for n in files]
        assert not any(p.endswith(".conda") or "/." in p for p in left), left


# ------------------------------------------------------------------ children die with fdlenv

def test_kill_9_of_fdlenv_build_ends_its_recipe_and_the_next_call_builds_once(tmp_path):
    w = make_world(tmp_path)
    tree = tmp_path / "src"
    tree.mkdir()
    (tree / "main.c").write_text("int main(void){return 0;}\n")
    started = tmp_path / "started"
    os.mkfifo(started)
    # With STARTED naming a fifo the recipe hangs (a child of its own too); without, it builds.
    recipe = ('echo run >> "$COUNT"; if [ -p "$STARTED" ]; then sleep 600 & echo "$$ $!" > "$STARTED"; wait; fi; '
              'echo built > app')
    argv = [sys.executable, "-m", "fdlenv", "build", "--libtorch", "cpu", "--lock", str(w.lock),
            "--home", str(w.home.root), "--source", f"file://{tree}", "--source-build", recipe,
            "--source-bin", "app", "--json"]
    env = {**os.environ, "COUNT": str(tmp_path / "count")}
    job = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                           env={**env, "STARTED": str(started)})
    try:
        with open(started) as f:      # barrier: the recipe and its child run
            shell, child = (int(x) for x in f.read().split())
        job.kill()
        job.wait()
    finally:
        if job.poll() is None:
            job.kill()
    assert _gone(shell) and _gone(child)
    outs = [json.loads(subprocess.run(argv, capture_output=True, text=True, env=env, check=True).stdout)
            for _ in range(2)]
    assert [o["built"] for o in outs] == [True, False]
    assert (tmp_path / "count").read_text().split() == ["run", "run"]   # the killed one, then one build


def test_a_recipe_outliving_its_fdlenv_keeps_the_source_claim_until_it_is_gone(tmp_path):
    """The claim's descriptor is inherited: the tree stays claimed while any of its holders runs,
    so a new fdlenv can never start a recipe beside a stale one."""
    from fdlenv.base.flocks import exclusive, held
    from fdlenv.base.groupguard import spawn

    lock = tmp_path / "locks" / "source-x.lock"
    with exclusive(lock, "the test") as fd:
        proc = spawn(["sleep", "600"], pass_fds=(fd,))
    try:
        assert held(lock)                 # its parent let go; the recipe still holds it
    finally:
        proc.kill()
        proc.wait()
        proc.guard.release()
    assert not held(lock)
