"""Test helpers for the source step: an env record without a store, trees on disk, a local git remote."""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path

import pytest

from fdlenv.store.env import Env

needs_rsync = pytest.mark.skipif(not shutil.which("rsync"), reason="rsync is not installed")
needs_git = pytest.mark.skipif(not shutil.which("git") or not importlib.util.find_spec("git"),
                               reason="git or gitpython is not installed")

OLD = 1_500_000_000  # 2017: an mtime no fetch could produce by restamping


def fake_env(tmp: Path, variant: str = "cpu", key: str = "e" * 64) -> Env:
    """The store's own Env record for a directory holding only `libtorch/lib`: what build()
    needs of an env, with no realise behind it."""
    path = tmp / f"env-{variant}"
    (path / "libtorch" / "lib").mkdir(parents=True, exist_ok=True)
    return Env(variant, key, path, path / "libtorch")


def environ_for(env: Env, **extra: str) -> dict:
    """A hand-made child environment: LIBTORCH_PATH plus an activate.d-style marker."""
    return dict(os.environ, LIBTORCH_PATH=str(env.libtorch_root), FDL_GPU_FEATURE="",
                FDL_TEST_ACTIVATED=f"from-{env.key[:8]}", **extra)


def write_tree(root: Path, files: dict[str, str], mtime: int | None = OLD) -> Path:
    for rel, text in files.items():
        p = root / rel
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text(text)
        if mtime is not None:
            os.utime(p, (mtime, mtime))
    return root


def git(*args: str, cwd: Path) -> str:
    env = dict(os.environ, GIT_AUTHOR_NAME="t", GIT_AUTHOR_EMAIL="t@t", GIT_COMMITTER_NAME="t",
               GIT_COMMITTER_EMAIL="t@t")
    return subprocess.run(["git", *args], cwd=cwd, env=env, check=True,
                          capture_output=True, text=True).stdout.strip()


@dataclass
class Remote:
    """A bare repository served as git+file://, with a work clone to push from."""
    bare: Path
    work: Path

    @property
    def url(self) -> str:
        return f"git+file://{self.bare}"

    def commit(self, files: dict[str, str], tag: str | None = None, branch: str = "main") -> str:
        write_tree(self.work, files, mtime=None)
        git("add", "-A", cwd=self.work)
        git("commit", "-q", "-m", tag or "change", cwd=self.work)
        if tag:
            git("tag", tag, cwd=self.work)
        git("push", "-q", "origin", f"HEAD:refs/heads/{branch}", "--tags", cwd=self.work)
        return git("rev-parse", "HEAD", cwd=self.work)


def make_remote(tmp: Path, name: str = "repo") -> Remote:
    bare, work = tmp / f"{name}.git", tmp / f"{name}-work"
    git("init", "-q", "--bare", str(bare), cwd=tmp)
    git("init", "-q", str(work), cwd=tmp)
    git("remote", "add", "origin", str(bare), cwd=work)
    return Remote(bare, work)


def wait_out_racy_window(since_ns: int) -> None:
    """Until every file written before `since_ns` is past the source caches' racy window
    (digest.RACY_NS; ctime counts, which os.utime cannot set back): a condition on the clock."""
    import time

    from fdlenv.source.digest import RACY_NS

    while (left := since_ns + RACY_NS - time.time_ns()) >= 0:
        time.sleep(left / 1e9 + 0.001)
