"""The build key is what the source delivered and the toolchain that builds it.

An in-tree C build (outputs in the tree's root and in build/) re-dialled five
times builds once, from a git checkout, a local copy and an rsync pull; a
changed tracked file rebuilds; a compiler whose bytes change rebuilds.
Everything goes through `fdlenv build` as a user runs it, on a real env.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from helpers_source import needs_git, needs_rsync
from helpers_store import make_world

pytestmark = pytest.mark.slow   # end to end: drives fdlenv as a user would (conftest checks the mark)

RECIPE = 'echo run >> "$COUNT" && cc -o app main.c && mkdir -p build && cp app build/app.copy'


def c_source(root: Path, body: str = "0") -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "main.c").write_text(f"int main(void){{return {body};}}\n")
    return root


def git(*args, cwd):
    subprocess.run(["git", "-c", "user.email=t@t", "-c", "user.name=t", *args], cwd=cwd, check=True,
                   capture_output=True)


class Builder:
    def __init__(self, tmp: Path, spec: str, *, cwd: Path | None = None, path: str | None = None):
        self.world = make_world(tmp)
        self.count = tmp / "count"
        self.spec, self.cwd, self.path = spec, cwd or tmp, path

    def __call__(self) -> dict:
        env = {**os.environ, "COUNT": str(self.count)}
        if self.path:
            env["PATH"] = self.path
        res = subprocess.run([sys.executable, "-m", "fdlenv", "build", "--libtorch", "cpu",
                              "--lock", str(self.world.lock), "--home", str(self.world.home.root),
                              "--source", self.spec, "--source-build", RECIPE, "--source-bin", "app", "--json"],
                             capture_output=True, text=True, env=env, cwd=self.cwd)
        assert res.returncode == 0, res.stderr
        return json.loads(res.stdout)

    @property
    def runs(self) -> int:
        return len(self.count.read_text().split()) if self.count.exists() else 0


def five_redials_build_once(b: Builder) -> dict:
    outs = [b() for _ in range(5)]
    assert [o["built"] for o in outs] == [True, False, False, False, False] and b.runs == 1
    assert len({o["build_key"] for o in outs}) == 1
    return outs[0]


@needs_git
def test_a_git_checkout_builds_once_and_a_changed_tracked_file_rebuilds(tmp_path):
    repo = c_source(tmp_path / "repo")
    git("init", "-q", cwd=repo)
    git("add", ".", cwd=repo)
    git("commit", "-qm", "one", cwd=repo)
    b = Builder(tmp_path, f"git+file://{repo}#master" if _branch(repo) == "master" else f"git+file://{repo}#main")
    first = five_redials_build_once(b)
    checkout = Path(first["cwd"])
    assert (checkout / "app").is_file() and (checkout / "build" / "app.copy").is_file()   # outputs in the tree
    (checkout / "main.c").write_text("int main(void){return 3;}\n")   # a tracked file edited in place:
    again = b()                                                         # seen, and the tool-owned tree
    assert again["built"] is False and b.runs == 1                      # is put back to the commit
    assert (checkout / "main.c").read_text() == (repo / "main.c").read_text()
    c_source(repo, "42")
    git("commit", "-qam", "two", cwd=repo)                              # a new commit changes it
    again = b()
    assert again["built"] is True and b.runs == 2 and again["build_key"] != first["build_key"]


def _branch(repo: Path) -> str:
    return subprocess.run(["git", "symbolic-ref", "--short", "HEAD"], cwd=repo, capture_output=True,
                          text=True).stdout.strip()


@needs_rsync
def test_a_local_copy_builds_once_and_a_changed_file_rebuilds(tmp_path):
    src = c_source(tmp_path / "src")
    b = Builder(tmp_path, f"file://{src}")
    five_redials_build_once(b)
    c_source(src, "42")   # another size: rsync's own quick check looks at size and mtime
    assert b()["built"] is True and b.runs == 2 and b()["built"] is False


@needs_rsync
def test_an_rsync_pull_builds_once(tmp_path, sshd_server):
    s = sshd_server
    src = c_source(tmp_path / "remote")
    (tmp_path / "fdl.yml").write_text(
        "join:\n  ssh:\n"
        f"    target: {s.host}\n    port: {s.port}\n    user: {s.user}\n    identity_file: {s.identity}\n"
        f"    options: [UserKnownHostsFile={s.known_hosts}, IdentitiesOnly=yes]\n")
    b = Builder(tmp_path, f"rsync://{s.user}@{s.host}:{s.port}:{src}", cwd=tmp_path)
    five_redials_build_once(b)


@needs_rsync
def test_a_compiler_whose_bytes_change_rebuilds_and_an_unchanged_one_does_not(tmp_path):
    tools = tmp_path / "tools"
    tools.mkdir()
    real_cc = subprocess.run(["sh", "-c", "command -v cc"], capture_output=True, text=True).stdout.strip()
    wrapper = tools / "cc"
    wrapper.write_text(f'#!/bin/sh\n# v1\nexec {real_cc} "$@"\n')
    wrapper.chmod(0o755)
    src = c_source(tmp_path / "src")
    b = Builder(tmp_path, f"file://{src}", path=f"{tools}:{os.environ['PATH']}")
    five_redials_build_once(b)
    wrapper.write_text(f'#!/bin/sh\n# v2: an upgraded compiler\nexec {real_cc} "$@"\n')
    assert b()["built"] is True and b.runs == 2
    assert b()["built"] is False and b.runs == 2


@pytest.mark.parametrize("bad", ["../outside", "/etc/passwd"])
def test_a_bad_source_bin_is_refused_before_the_recipe_runs(tmp_path, bad):
    src = c_source(tmp_path / "src")
    w = make_world(tmp_path)
    res = subprocess.run([sys.executable, "-m", "fdlenv", "build", "--libtorch", "cpu", "--lock", str(w.lock),
                          "--home", str(w.home.root), "--source", f"file://{src}",
                          "--source-build", f'echo ran > "{tmp_path}/ran"', "--source-bin", bad],
                         capture_output=True, text=True, cwd=tmp_path)
    assert res.returncode == 2 and "bin" in res.stderr and not (tmp_path / "ran").exists()
