"""env list / path / use / verify / gc, and activation through run and shell-hook."""

from __future__ import annotations

import pytest

import json
import os
from pathlib import Path

from helpers_cli import fdlenv
from helpers_store import bump_variant, make_world, realise_json, visible_envs

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)


def _home(w):
    return ["--home", str(w.home.root)]


def test_verify_full_catches_a_flipped_byte_and_repair_fixes_it(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    lib = os.path.join(env["libtorch_root"], "lib/libtorch.so")
    data = bytearray(open(lib, "rb").read())
    data[0] ^= 0xFF
    was = os.stat(lib)
    with open(lib, "r+b") as f:                       # in place: the cache's inode flips too
        f.write(data)
    quick = fdlenv("env", "verify", *_home(w))
    assert quick.returncode == 2 and "modified in place" in quick.stdout   # its mtime moved
    os.utime(lib, ns=(was.st_atime_ns, was.st_mtime_ns))
    assert fdlenv("env", "verify", *_home(w)).returncode == 0          # size and mtime as realised: --full's job
    res = fdlenv("env", "verify", "cpu", "--full", "--json", *_home(w))
    assert res.returncode == 2
    problems = json.loads(res.stdout)["envs"][0]["problems"]
    assert [p["path"] for p in problems] == ["libtorch/lib/libtorch.so"]
    res = fdlenv("env", "verify", "cpu", "--full", "--repair", "--json", *_home(w))
    assert res.returncode == 0, res.stderr
    assert json.loads(res.stdout)["envs"][0]["repaired"] is True
    assert open(lib, "rb").read() == b"cpu-lib"
    assert fdlenv("env", "verify", "--full", *_home(w)).returncode == 0
    # the repaired env is still hard-linked to a (now clean) cache entry
    assert os.stat(lib).st_nlink >= 2


def test_verify_notices_a_deleted_file_with_full_and_a_lost_package_record_by_default(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    os.unlink(os.path.join(env["path"], "share/common/data.txt"))
    quick = fdlenv("env", "verify", *_home(w))                        # the file table's lstat
    assert quick.returncode == 2 and "share/common/data.txt: missing" in quick.stdout
    res = fdlenv("env", "verify", "--full", "--json", *_home(w))
    assert res.returncode == 2 and "missing" in res.stdout
    (meta,) = Path(env["path"], "conda-meta").glob("common-data-*.json")
    meta.unlink()
    res = fdlenv("env", "verify", "--json", *_home(w))
    problems = json.loads(res.stdout)["envs"][0]["problems"]
    assert res.returncode == 2 and problems[0]["what"] == "record set differs from the manifest"
    assert problems[0]["package"] == "common-data"


def test_verify_notices_a_lost_libtorch_by_default(tmp_path):
    import shutil

    w = make_world(tmp_path)
    env = realise_json(w)
    shutil.rmtree(os.path.join(env["libtorch_root"], "lib"))
    res = fdlenv("env", "verify", "--json", *_home(w))
    assert res.returncode == 2 and json.loads(res.stdout)["envs"][0]["problems"][0]["package"] == "(libtorch)"


def test_gc_keeps_rooted_envs_and_collects_the_rest(tmp_path):
    w = make_world(tmp_path)
    old = realise_json(w)
    bump_variant(w)
    new = realise_json(w)
    # a second lock file roots its own env
    other_lock = tmp_path / "other" / "conda-lock.yml"
    other_lock.parent.mkdir()
    other_lock.write_bytes(w.lock.read_bytes())
    fdlenv("env", "realize", "--libtorch", "cpu", "--lock", str(other_lock), *_home(w), check=True)
    listing = json.loads(fdlenv("env", "list", "--json", *_home(w), check=True).stdout)["envs"]
    by_key = {e["key"]: e for e in listing}
    assert by_key[old["key"]]["rooted"] is False and by_key[new["key"]]["rooted"] is True
    assert by_key[new["key"]]["active"] is True and by_key[new["key"]]["size"] > 0
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *_home(w), check=True).stdout)
    assert plan["envs"] == [old["path"]] and plan["bytes"] > 0
    assert os.path.isdir(old["path"])                 # dry run removed nothing
    fdlenv("env", "gc", *_home(w), check=True)
    assert [str(p) for p in visible_envs(w.home)] == [new["path"]]
    # the old build's cache entry went with it; the live one stayed
    stems = {p.name for p in w.home.pkgs.iterdir() if p.is_dir() and not p.name.startswith(".")}
    assert "libtorch-cpu-2.10.0-h0" not in stems and "libtorch-cpu-2.10.0-h1" in stems
    assert fdlenv("env", "verify", "--full", *_home(w)).returncode == 0


def test_use_and_path_switch_flodls_active_pointer(tmp_path):
    w = make_world(tmp_path, variants=("cpu", "cu128"))
    cpu, cu = realise_json(w, "cpu"), realise_json(w, "cu128")
    active = w.home.libtorch / ".active"
    assert active.read_text() == "precompiled/cu128\n"
    fdlenv("env", "use", "cpu", *_home(w), check=True)
    assert active.read_text() == "precompiled/cpu\n"
    assert fdlenv("env", "path", "12.8", *_home(w), check=True).stdout.strip() == cu["path"]
    assert fdlenv("env", "path", "cpu", *_home(w), check=True).stdout.strip() == cpu["path"]
    res = fdlenv("env", "path", "rocm7.1", *_home(w))
    assert res.returncode == 2 and "not realised" in res.stderr


def test_run_reaches_a_grandchild_with_activation_and_flodl_vars(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    script = 'sh -c \'echo "$HOOK_MARK|$LIBTORCH_PATH|$FDL_GPU_FEATURE|$LD_LIBRARY_PATH|$(hello)"\''
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), *_home(w), "--", "sh", "-c", script,
                 env={"LD_LIBRARY_PATH": "/inherited/lib"}, check=True)
    mark, libtorch, feature, ld, hello = res.stdout.strip().split("|")
    assert mark == f"hooked:{env['path']}"
    assert libtorch == env["libtorch_root"] and feature == ""
    assert ld == f"{env['libtorch_root']}/lib:/inherited/lib"
    assert hello == "hello-from-env"                  # the env's bin/ is on PATH


def test_run_passes_the_exit_code_through(tmp_path):
    w = make_world(tmp_path)
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), *_home(w), "--", "sh", "-c", "exit 7")
    assert res.returncode == 7
    res = fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), *_home(w), "--", "no-such-cmd-xyz")
    assert res.returncode == 127 and "not found" in res.stderr


def test_shell_hook_json_matches_what_run_sees(tmp_path):
    w = make_world(tmp_path)
    env = realise_json(w)
    hook = json.loads(fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(w.lock), "--json",
                             *_home(w), check=True).stdout)
    assert hook["key"] == env["key"]
    assert hook["environment_variables"]["HOOK_MARK"] == f"hooked:{env['path']}"
    assert hook["environment_variables"]["PATH"].split(":")[0] == f"{env['path']}/bin"
    assert len(hook["environment_variables"]["PATH"].split(":")) == len(set(hook["environment_variables"]["PATH"].split(":")))
    text = fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(w.lock), *_home(w), check=True).stdout
    assert f"export LIBTORCH_PATH={env['libtorch_root']}" in text


def test_amd_variant_puts_host_rocm_first(tmp_path):
    from fdlenv.store.activation import child_environ
    from fdlenv.store.realise import realise

    w = make_world(tmp_path, variants=("rocm7.1",))
    env = realise(w.home, "rocm7.1", w.lock)
    rocm = tmp_path / "rocm"
    (rocm / "lib").mkdir(parents=True)
    (rocm / "lib" / "libamdhip64.so.7").write_text("")
    out = child_environ(w.home, env, {"PATH": "/usr/bin:/bin", "LD_LIBRARY_PATH": "/x"}, rocm_root=rocm)
    assert out["LD_LIBRARY_PATH"].split(":") == [str(rocm / "lib"), str(env.libtorch_root / "lib"), "/x"]
    assert out["FDL_GPU_FEATURE"] == "rocm"
