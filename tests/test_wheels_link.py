"""Linking a wheel's cache entry into an env with threads sharing out its directories
(store/linktree.py `_link_shared`): the same tree as depth first in one thread, nothing
written through a symlink, and no descriptor left open whatever happens."""

from __future__ import annotations

import os
import pytest

from fdlenv.store import linktree


def _entry(root, width: int = 12, depth: int = 3):
    site = root / "entry" / "site"
    for i in range(width):
        d = site / "pkg" / f"d{i}"
        for j in range(depth):
            d = d / f"e{j}"
        d.mkdir(parents=True)
        for k in range(3):
            (d / f"f{k}.py").write_text(f"{i}-{k}\n")
            (d.parent / f"g{k}.py").write_text(f"{i}+{k}\n")
    return root / "entry"


def _tree(prefix):
    return sorted((os.path.relpath(os.path.join(dp, f), prefix), os.stat(os.path.join(dp, f)).st_ino)
                  for dp, _, fs in os.walk(prefix) for f in fs)


def _open_fds() -> int:
    return len(os.listdir("/proc/self/fd"))


@pytest.mark.parametrize("budget, nthreads", [(0, 2), (1, 3), (3, 2), (256, 4)])
def test_a_shared_out_link_makes_the_tree_a_depth_first_link_makes(tmp_path, monkeypatch, budget, nthreads):
    entry = _entry(tmp_path)
    monkeypatch.setattr(linktree, "_OPEN_BUDGET", budget)
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    n_seq = linktree.link(entry, tmp_path / "a", "3.11")
    fds = _open_fds()
    n_par = linktree.link(entry, tmp_path / "b", "3.11", nthreads)
    assert n_par == n_seq == 12 * 6
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")      # the same inodes: hard links of the entry
    assert _open_fds() == fds


def test_a_symlink_an_earlier_wheel_left_is_refused_and_every_descriptor_closed(tmp_path, monkeypatch):
    entry = _entry(tmp_path)
    monkeypatch.setattr(linktree, "_OPEN_BUDGET", 4)
    prefix = tmp_path / "env"
    planted = prefix / "lib" / "python3.11" / "site-packages" / "pkg" / "d7"
    planted.mkdir(parents=True)
    outside = tmp_path / "outside"
    outside.mkdir()
    # where a later wheel makes a directory, while other directories wait open on the stack
    (planted / "e0").symlink_to(outside)
    fds = _open_fds()
    with pytest.raises(linktree.LinkRefused, match="d7/e0"):
        linktree.link(entry, prefix, "3.11", 2)
    assert list(outside.iterdir()) == []
    assert _open_fds() == fds
