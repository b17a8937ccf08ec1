"""`fdlenv build` end to end: a real lock, a real realised env, the activation reaching the recipe."""

import json

import pytest

from helpers_source import needs_rsync, write_tree

pytest.importorskip("rattler")
from helpers_cli import fdlenv
from helpers_store import make_world

RECIPE = ('mkdir -p target/release && '
          'printf "%s|%s|%s" "$LIBTORCH_PATH" "$HOOK_MARK" "$FDL_GPU_FEATURE" > target/release/train')


@needs_rsync
def test_the_real_env_reaches_the_recipe_and_a_redial_reuses_the_build(tmp_path):
    w = make_world(tmp_path)
    src = write_tree(tmp_path / "src", {"src/main.rs": "fn main(){}\n"})
    argv = ["build", "--libtorch", "cpu", "--lock", str(w.lock), "--home", str(w.home.root),
            "--source", f"file://{src}", "--source-build", RECIPE, "--source-bin", "target/release/train",
            "--json"]
    first = json.loads(fdlenv(*argv, check=True).stdout)
    env_dir = next(w.home.envs.iterdir())
    lt, hook, feature = open(first["bin"]).read().split("|")
    assert lt == str(env_dir / "libtorch") and hook == f"hooked:{env_dir}" and feature == ""
    assert first["built"] is True and first["run_id"] is None and first["args"] is None
    again = json.loads(fdlenv(*argv, check=True).stdout)
    assert again["built"] is False and again["build_key"] == first["build_key"]
    (src / "src/main.rs").write_text("fn main(){ println!(\"v2\"); }\n")
    third = json.loads(fdlenv(*argv, check=True).stdout)
    assert third["built"] is True and third["build_key"] != first["build_key"]


def test_an_unknown_variant_exits_2_naming_the_forms(tmp_path):
    res = fdlenv("build", "--libtorch", "cu999", "--home", str(tmp_path / "h"), "--source", f"file://{tmp_path}")
    assert res.returncode == 2 and "accepted:" in res.stderr and res.stdout == ""
