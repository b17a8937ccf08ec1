"""Every name under the home has one owner (`names.home`), and `env gc` sweeps each by its owner.

A home walked after every command has run (realise, lock on demand, run, shell-hook, prepare
with a build, build, the walk-through, what killed runs leave, gc, remove) holds no path that no
`Home` member claims; each member's own path is claimed by that member; every claim is kept
with a reason or swept by a sweep that names it (the store's, or one the command hands in).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest
from helpers_source import needs_rsync, write_tree
from helpers_store import fdlenv, make_world, realise_json

from fdlenv.front.commands.env import sweepers
from fdlenv.names import home as layout_module
from fdlenv.names.home import Home, layout
from fdlenv.source import manifest
from fdlenv.source.manifest import RunManifest
from fdlenv.store import gc

# A value for each argument a member takes, by name: the member's path is then one real name.
SAMPLE = {"sha256": "ab" * 32, "pid": 4242, "thread": 7, "ext": ".whl", "name": "cpu-" + "0" * 16,
          "key": "cd" * 32, "spec_hash": "ef" * 8, "variant": "cpu", "env_name": "cpu-" + "1" * 16,
          "entry": "hooks-1.0-h0"}
NOT_PATHS = {"ensure", "claims", "root"}


def members() -> dict[str, object]:
    """Every public member of `Home` that names a path (a property, or a method of str args)."""
    return {n: v for n, v in vars(Home).items() if not n.startswith("_") and n not in NOT_PATHS
            and (isinstance(v, property) or callable(v))}


def paths_of(home: Home, name: str) -> list[Path]:
    member = members()[name]
    if isinstance(member, property):
        return [getattr(home, name)]
    code = member.__code__   # type: ignore[attr-defined]
    args = code.co_varnames[1:code.co_argcount]
    out = [getattr(home, name)(*(SAMPLE[a] for a in args))]
    if member.__defaults__:   # type: ignore[attr-defined]  # a member taking a name: its directory too
        out.append(getattr(home, name)())
    return out


def unclaimed(home: Home) -> list[str]:
    """What under the home no member claims (symlinks are not followed)."""
    out = []
    for d, dirs, files in os.walk(home.root):
        for n in dirs + files:
            p = Path(d) / n
            if home.claims(p) is None:
                out.append(str(p.relative_to(home.root)))
    return sorted(out)


def test_each_member_of_home_names_a_path_it_claims_itself(tmp_path):
    home = Home(tmp_path)
    assert len(members()) > 40
    for name in members():
        for p in paths_of(home, name):
            assert p.is_relative_to(tmp_path) and p != tmp_path, name
            assert home.claims(p) == name, (name, p, home.claims(p))


def test_each_claim_is_a_members_and_is_either_kept_or_swept_by_a_sweep_naming_it():
    swept = {*gc.COLLECTED, *(m for s in (*gc.SWEEPERS, *sweepers()) for m in s.covers)}
    for claim in layout():
        assert claim.owner in members(), claim
        assert claim.kept or claim.owner in swept, f"{claim.pattern}: neither kept nor swept by {claim.owner}'s sweep"
    kept_only = {c.owner for c in layout()} - {c.owner for c in layout() if not c.kept}
    assert not swept & kept_only, swept & kept_only    # nothing sweeps what is declared kept
    assert set(gc.NEVER) <= kept_only


def test_a_path_no_member_claims_is_found(tmp_path):
    home = Home(tmp_path)
    home.ensure(home.fast, home.envs)
    (home.fast / ("00" * 16 + "-cpu-linux-64.json")).write_text("{}")
    assert unclaimed(home) == []
    (tmp_path / "stray.txt").write_text("x")
    (home.cache / "mystery").mkdir()
    (home.cache / "mystery" / "x").write_text("x")
    assert unclaimed(home) == ["cache/mystery", "cache/mystery/x", "stray.txt"]


def test_a_claim_dropped_from_the_layout_leaves_its_files_unclaimed(tmp_path, monkeypatch):
    home = Home(tmp_path)
    home.ensure(home.fast)
    (home.fast / "answer.json").write_text("{}")
    full = layout()
    monkeypatch.setattr(layout_module, "_LAYOUT", [tuple(c for c in full if c.pattern != "cache/fast/*")])
    assert unclaimed(home) == ["cache/fast/answer.json"]


def test_a_sweep_left_out_of_the_ones_handed_in_leaves_a_claim_unswept(monkeypatch):
    from fdlenv.front.commands import env

    monkeypatch.setattr(env, "sweepers", lambda: sweepers()[1:])   # the hot memos' sweep forgotten
    swept = {*gc.COLLECTED, *(m for s in (*gc.SWEEPERS, *env.sweepers()) for m in s.covers)}
    assert [c.pattern for c in layout() if not c.kept and c.owner not in swept] == ["cache/hot/*"]


def _tree(root: Path, run: str) -> Path:
    src = write_tree(root, {"src/main.rs": "fn main() {}\n"})
    recipe = 'mkdir -p target/release && printf "%s" "$LIBTORCH_PATH" > target/release/train'
    (src / ".fdl-run.yml").write_text(manifest.dump(RunManifest(bin="target/release/train", build=recipe, run=run)))
    return src


def _killed_runs(home: Home) -> list[Path]:
    """What killed runs leave, each named through its owner; gc takes all of them."""
    made = [home.stage(f"{'d' * 64}-4242"), home.activations(f"{'d' * 64}-0123456789ab.json"),
            home.key_lock("d" * 64), home.key_lock("d" * 64).with_name("d" * 64 + ".lock.holder"),
            home.build_stage("c" * 64, 4242), home.partial("ee" * 32), home.envs / ".trash-cpu-gone.1"]
    for p in made:
        p.parent.mkdir(parents=True, exist_ok=True)
        p.write_text("{}")
    return made


@needs_rsync
@pytest.mark.slow
def test_a_home_after_every_command_holds_no_path_no_member_claims(tmp_path):
    from helpers_pytorch_index import serve
    from test_walkthrough import local_lock

    w = make_world(tmp_path / "w", variants=("cpu",), wheel=True)
    home, at = w.home, ("--home", str(w.home.root))
    box = {"FLODL_TESTING_GPU_JSON": "[]", "HOME": str(tmp_path), "TMPDIR": str(tmp_path)}
    realise_json(w)
    with serve(tmp_path / "pt") as idx:   # a variant no lock names: locked on demand into lockfiles/
        fdlenv("env", "realize", "--libtorch", "rocm7.1", "--mirror", f"pytorch={idx.url}", *at, check=True)
    for _ in range(2):   # the second is replayed from the memo the first wrote
        fdlenv("run", "--libtorch", "cpu", "--lock", str(w.lock), *at, "--", "true", check=True)
    fdlenv("shell-hook", "--libtorch", "cpu", "--lock", str(w.lock), *at, check=True)
    fdlenv("prepare", "--libtorch", "cpu", "--lock", str(w.lock), "--source", f"file://{_tree(tmp_path / 's1', 'ab' * 16)}",
           *at, env=box, cwd=tmp_path, check=True)
    fdlenv("build", "--libtorch", "cpu", "--lock", str(w.lock), "--source", f"file://{_tree(tmp_path / 's2', 'cd' * 16)}",
           *at, env=box, cwd=tmp_path, check=True)
    url, lock, cxx = local_lock(tmp_path / "wt")
    fdlenv("walkthrough", "--lock", str(lock), "--mirror", f"pypi={url}", *at, env={"CXX": str(cxx)}, check=True)
    fdlenv("env", "verify", "--full", *at, check=True)
    made = _killed_runs(home)
    assert [home.claims(p) for p in made] == ["stage", "activations", "key_lock", "key_lock", "build_stage",
                                              "partial", "env_dir"]
    assert unclaimed(home) == []
    plan = json.loads(fdlenv("env", "gc", "--dry-run", "--json", *at, check=True).stdout)
    assert {str(p) for p in made} <= {o["path"] for o in plan["other"]} | set(plan["archives"]), plan
    fdlenv("env", "gc", "--sources", *at, check=True)
    fdlenv("env", "remove", "rocm7.1", *at, check=True)
    assert unclaimed(home) == [] and not any(p.exists() for p in made)
    assert not list(home.source.iterdir())        # the trees and the digest caches beside them
    assert json.loads(fdlenv("env", "gc", "--dry-run", "--json", *at, check=True).stdout)["other"] == []
