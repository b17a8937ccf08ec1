"""A broken record never stops the home (issue 45, point 2).

A home with two variants realised from the suite's loopback index shaped like PyTorch's
(`helpers_pytorch_index`); then one record of it broken by hand: an env's manifest or file
table, a re-dial answer, a hot memo, an activation memo, a lease, `.active`, a pointer or a
root (empty, `null`, `[]`, half of it, bad UTF-8, another JSON shape, a symlink, a directory).
The commands a box runs then still answer: the damaged env is one entry reported by name,
the others are listed and used, and no line ever says "a bug in fdlenv". The commands run
in child processes where they realise, exec or collect, and in-process (`cli.main`) under
hypothesis, where each example breaks one record and puts it back after.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import shutil
import subprocess
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from fdlenv.base import output
from fdlenv.front import cli
from helpers_cli import fdlenv
from helpers_pytorch_index import serve

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

BUDGET = settings(max_examples=int(os.environ.get("FDLENV_FUZZ_EXAMPLES", "40")), deadline=None,
                  suppress_health_check=list(HealthCheck), database=None)


@pytest.fixture(scope="module")
def index(tmp_path_factory):
    with serve(tmp_path_factory.mktemp("pt")) as idx:
        yield idx


def make_home(root: Path, url: str) -> Path:
    """cpu and rocm7.1 realised, each run once (its lease file) and hooked twice (its memo)."""
    home = root / "home"
    for v in ("cpu", "rocm7.1"):
        r = fdlenv("env", "realize", v, "--mirror", f"pytorch={url}", home=home, timeout=300)
        assert r.returncode == 0, r.stderr
    for _ in range(2):
        assert fdlenv("run", "--libtorch", "cpu", "true", home=home, timeout=300).returncode == 0
        assert fdlenv("shell-hook", "--libtorch", "cpu", home=home, timeout=300).returncode == 0
    return home


@pytest.fixture
def home(tmp_path, index):
    return make_home(tmp_path, index.url)


def cpu_env(home: Path) -> Path:
    return next((home / "envs").glob("cpu-*"))


def clean(r: subprocess.CompletedProcess | tuple) -> None:
    text = r.stdout + r.stderr if isinstance(r, subprocess.CompletedProcess) else r[1] + r[2]
    assert "bug" not in text and "Traceback" not in text, text


BROKEN = {"empty": b"", "null": b"null", "a list": b"[]", "half": None, "bad UTF-8": b"\xff\xfe{\x80",
          "no key": b'{"variant": "cpu"}', "wrong types": b'{"key": 1, "variant": ["cpu"], "records": "x"}',
          "a symlink": "symlink", "a directory": "dir"}


def damage(path: Path, how) -> None:
    """Break the record at `path` one way (`BROKEN`'s values, or bytes)."""
    original = path.read_bytes() if path.is_file() else b""
    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif os.path.lexists(path):
        path.unlink()
    if how == "symlink":
        path.symlink_to("/nonexistent/elsewhere")
    elif how == "dir":
        path.mkdir()
    else:
        path.write_bytes(original[:len(original) // 2] if how is None else how)


@pytest.mark.parametrize("how", list(BROKEN.values()), ids=list(BROKEN))
def test_a_broken_manifest_is_one_damaged_env_and_every_command_goes_on(home, index, how):
    env = cpu_env(home)
    damage(env / ".fdlenv" / "manifest.json", how)
    listed = fdlenv("env", "list", home=home, timeout=300)
    clean(listed)
    assert listed.returncode == 0
    rows = {ln.split()[0]: ln for ln in listed.stdout.splitlines()[1:]}
    assert "DAMAGED" in rows["cpu"] and "DAMAGED" not in rows["rocm7.1"], listed.stdout
    assert f"{env.name} is damaged (its manifest: " in listed.stderr
    verify = fdlenv("env", "verify", home=home, timeout=300)
    clean(verify)
    assert verify.returncode == 2 and f"FAILED   {env}" in verify.stdout and ".fdlenv/manifest.json" in verify.stdout
    for argv in (["env", "gc", "--dry-run"], ["env", "remove", "cpu", "--dry-run"],
                 ["shell-hook", "--libtorch", "rocm7.1"], ["run", "--libtorch", "rocm7.1", "true"]):
        r = fdlenv(*argv, home=home, timeout=300)
        clean(r)
        assert r.returncode == 0, (argv, r.stderr)
    other = fdlenv("env", "realize", "rocm7.1", "--mirror", f"pytorch={index.url}", home=home, timeout=300)
    clean(other)
    assert other.returncode == 0, other.stderr
    again = fdlenv("env", "realize", "cpu", "--mirror", f"pytorch={index.url}", home=home, timeout=300)
    clean(again)
    assert again.returncode == 0 and again.stdout.startswith(f"cpu: {env}"), again.stderr
    assert fdlenv("env", "verify", home=home, timeout=300).returncode == 0, "the fresh realise made it whole"


def test_verify_repair_removes_an_env_whose_manifest_is_damaged_and_gc_or_remove_take_it(home, index):
    env = cpu_env(home)
    assert fdlenv("env", "use", "cpu", home=home, timeout=300).returncode == 0
    damage(env / ".fdlenv" / "manifest.json", b"")
    fixed = fdlenv("env", "verify", "--repair", home=home, timeout=300)
    clean(fixed)
    assert fixed.returncode == 0 and f"removed  {env}" in fixed.stdout, fixed.stdout + fixed.stderr
    assert not env.exists() and (home / "libtorch" / ".active").read_text() == ""
    assert not os.path.lexists(home / "libtorch" / "precompiled" / "cpu")
    assert fdlenv("env", "realize", "cpu", "--mirror", f"pytorch={index.url}", home=home, timeout=300).returncode == 0
    damage(env / ".fdlenv" / "manifest.json", b"null")
    removed = fdlenv("env", "remove", "cpu", home=home, timeout=300)
    clean(removed)
    assert removed.returncode == 0 and f"env {env}" in removed.stdout and not env.exists(), removed.stdout


def _records(home: Path) -> dict[str, Path]:
    """Every record the home holds for the cpu env, by name."""
    env = cpu_env(home)
    return {
        "manifest": env / ".fdlenv" / "manifest.json",
        "file table": env / ".fdlenv" / "files",
        "re-dial answer": next((home / "cache" / "fast").glob("*-cpu-linux-64.json")),
        "hot memo": next((home / "cache" / "hot").glob("shell-hook-*")),
        "activation memo": next((home / "cache" / "activation").glob(f"{env.name.split('-')[1]}*.json")),
        "lease": home / "locks" / f"use-{env.name}.lock",
        ".active": home / "libtorch" / ".active",
        "pointer": home / "libtorch" / "precompiled" / "cpu",
        "root": next((home / "roots").glob("cpu-*")),
    }


def in_process(home: Path, *argv: str) -> tuple[int, str, str]:
    out, err = io.StringIO(), io.StringIO()
    saved = dict(os.environ)
    os.environ["FLODL_HOME"] = str(home)
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            rc = cli.main(list(argv))
    finally:
        output.set_json(False)
        os.environ.clear()
        os.environ.update(saved)
    return rc, out.getvalue(), err.getvalue()


# What each command may answer with one record broken: 0, or 2 where it reports damage.
COMMANDS = {("env", "list"): {0}, ("env", "list", "--json"): {0}, ("env", "verify"): {0, 2},
            ("env", "gc", "--dry-run"): {0}, ("env", "remove", "cpu", "--dry-run"): {0, 2},
            ("shell-hook", "--libtorch", "rocm7.1"): {0}, ("shell-hook", "--libtorch", "cpu"): {0, 1, 2},
            ("env", "path", "rocm7.1"): {0}, ("env", "use", "rocm7.1"): {0}}
values = st.recursive(st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=12)),
                      lambda inner: st.one_of(st.lists(inner, max_size=3),
                                              st.dictionaries(st.text(max_size=8), inner, max_size=3)), max_leaves=8)
breakage = st.one_of(st.sampled_from(list(BROKEN.values())), st.binary(max_size=64),
                     values.map(lambda v: json.dumps(v).encode()))


@pytest.fixture(scope="module")
def fuzz_home(tmp_path_factory, index):
    return make_home(tmp_path_factory.mktemp("fuzz"), index.url)


@BUDGET
@given(which=st.sampled_from(["manifest", "file table", "re-dial answer", "hot memo", "activation memo", "lease",
                              ".active", "pointer", "root"]), how=breakage)
def test_any_record_broken_any_way_is_never_a_traceback_nor_a_bug_line(fuzz_home, which, how):
    path = _records(fuzz_home)[which]
    saved = os.readlink(path) if path.is_symlink() else path.read_bytes()
    try:
        damage(path, how)
        for argv, codes in COMMANDS.items():
            got = in_process(fuzz_home, *argv)
            clean(got)
            assert got[0] in codes, (which, how, argv, got)
    finally:
        if path.is_dir() and not path.is_symlink():
            shutil.rmtree(path)
        elif os.path.lexists(path):
            path.unlink()
        if isinstance(saved, str):
            path.symlink_to(saved)
        else:
            path.write_bytes(saved)
        (fuzz_home / "libtorch" / ".active").write_text("precompiled/cpu\n")
