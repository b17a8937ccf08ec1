"""fdlenv's lock resolver against uv's on generated indexes: the same versions, or both fail.

Each case is a small random index (seeded: case i of seed S is `random.Random(f"{S}-{i}")`):
a handful of projects with releases among finals, pre-releases, post and dev
releases, epochs and local labels; some yanked; `Requires-Python` on the page,
or only in the metadata, admitting or excluding 3.12; requirements between
them with specifiers, extras and markers for other Pythons and platforms, so
that some sets need backtracking and some have no solution. It is served over
loopback (tests/helpers_simple_index.py), locked by `resolve_versions` and by
`uv pip compile --python-version 3.12 --python-platform x86_64-manylinux_2_28`,
and the picked versions compared: the same, or, where the set has several
solutions and the two resolvers' orders part (resolvelib backjumps to an
earlier pick where PubGrub downgrades the later one), fdlenv's picks are a
solution uv accepts when they are pinned (counted and printed); where uv finds
no solution, fdlenv fails permanently with one line. Two policies where uv differs from pip are left out
of the generator (fdlenv takes pip's; tests/test_lock_resolver.py holds each): a
`Requires-Python` excluding 3.12 stated only in a wheel's metadata (uv trusts the
wheel's tag, pip and fdlenv refuse the wheel), and a specifier naming a pre-release
(`>=1.1rc1`: pip and fdlenv admit every pre-release it allows, uv prefers a final).
An upper bound (`<3.12`) is left out too: uv ignores upper bounds of `Requires-Python`.
And a yanked release that another release's requirement pins exactly (`p0` requiring
`p2===1.2`, 1.2 yanked: seed 1234, case 447) is not yanked in the generator: uv admits a
yanked release only under an exact pin among the roots, pip and fdlenv under any exact pin.
FDLENV_DIFF_CASES=N runs N cases (default 300),
FDLENV_DIFF_SEED=S another seed (default 35).

Cost, per case, was a server of its own (0.5 s to shut: `serve_forever`'s poll) and uv
looking for a Python on PATH (pyenv's shims: 0.45 s a call): 40 cases took 50 s. Now one
server serves every case under its own prefix (`/case<i>/simple`), uv is handed this
interpreter (`--python`: the target is `--python-version`/`--python-platform` either way)
and one cache directory (its interpreter query is made once), and cases run `WORKERS` at a
time (uv is a subprocess; fdlenv's resolver waits on the loopback server): 300 cases in
about 20 s on 2 cores.
"""

from __future__ import annotations

import os
import random
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from helpers_pytorch_index import Index
from helpers_simple_index import Release, lay_out

from fdlenv.base.errors import Fail
from fdlenv.lock.closure import resolve_versions

pytestmark = pytest.mark.slow

CASES = int(os.environ.get("FDLENV_DIFF_CASES", "300"))
WORKERS = 4
SEED = os.environ.get("FDLENV_DIFF_SEED", "35")
VERSIONS = ["0.9", "1.0", "1.0.post1", "1.1.dev1", "1.1rc1", "1.1", "1.2", "2.0a1", "2.0", "2.0+cpu",
            "2.1", "3.0rc2", "1!0.5"]
SPECS = ["", ">=1.0", "<2", "==1.0", "!=1.1", "~=1.0", ">=2", "<1.1", "==2.*", ">0.9,<2.1",
         "==1.1", "===1.2", ">=1!0"]
MARKERS = ["", "", "", '; python_version < "3.12"', '; python_version >= "3.12"', '; sys_platform == "win32"',
           '; platform_machine == "x86_64"', '; platform_machine == "aarch64"',
           '; implementation_version >= "3.12"', '; python_full_version < "3.11.5"']
PYTHONS = [None] * 6 + [">=3.13", ">=3.8", ">=3.12", ">=3.13"]
ADMITS_312 = {None, ">=3.8", ">=3.12"}


def generate(rng: random.Random) -> tuple[dict[str, list[Release]], list[str]]:
    names = [f"p{i}" for i in range(rng.randint(2, 6))]
    projects: dict[str, list[Release]] = {}
    for i, name in enumerate(names):
        releases = []
        for v in sorted(rng.sample(VERSIONS, rng.randint(1, 5))):
            later = names[i + 1:]
            requires = []
            for dep in rng.sample(later, min(len(later), rng.randint(0, 2))):
                extra = "[x]" if rng.random() < 0.2 else ""
                requires.append(f"{dep}{extra}{rng.choice(SPECS)}{rng.choice(MARKERS)}")
            if later and rng.random() < 0.3:
                requires.append(f'{rng.choice(later)}{rng.choice(SPECS)}; extra == "x"')
            python = rng.choice(PYTHONS)
            on_page = rng.random() < 0.5 or python not in ADMITS_312
            releases.append(Release(v, tuple(requires), python, on_page=on_page,
                                    yanked=rng.random() < 0.1))
        projects[name] = releases
    roots = [f"{n}{rng.choice(SPECS)}" for n in rng.sample(names[:3], rng.randint(1, min(3, len(names))))]
    return unyank_transitive_pins(projects), roots


def unyank_transitive_pins(projects: dict[str, list[Release]]) -> dict[str, list[Release]]:
    """No yanked release that a requirement of another release pins exactly (`==1.0`, `===1.2`):
    uv admits a yanked release only under an exact pin among the roots, pip (and fdlenv) under any
    exact pin (pip's factory: PEP 592's "pins a version that only a yanked release satisfies")."""
    import dataclasses

    from packaging.requirements import Requirement

    pinned: dict[str, list] = {}
    for releases in projects.values():
        for r in releases:
            for raw in r.requires:
                req = Requirement(raw)
                if any(s.operator == "===" or (s.operator == "==" and "*" not in s.version) for s in req.specifier):
                    pinned.setdefault(req.name, []).append(req.specifier)
    return {name: [dataclasses.replace(r, yanked=False)
                   if r.yanked and any(spec.contains(r.version, prereleases=True) for spec in pinned.get(name, []))
                   else r for r in releases] for name, releases in projects.items()}


def uv_compile(cache: Path, url: str, roots: list[str]) -> dict[str, str] | None:
    cmd = [shutil.which("uv") or "uv", "pip", "compile", "--no-config", "--cache-dir", str(cache),
           "--python", sys.executable, "--index-url", url, "--python-version", "3.12",
           "--python-platform", "x86_64-manylinux_2_28", "--no-header", "--no-annotate", "--no-build", "-"]
    env = dict(os.environ, UV_PYTHON_DOWNLOADS="never", NO_COLOR="1")
    out = subprocess.run(cmd, input="\n".join(roots), capture_output=True, text=True, timeout=60, env=env)
    if out.returncode:
        assert "No solution found" in out.stderr, out.stderr
        return None
    return dict(line.split("==", 1) for line in out.stdout.split() if "==" in line)


def fdlenv_lock(url: str, roots: list[str]) -> dict[str, str] | Fail:
    from packaging.version import Version

    try:
        found = resolve_versions(roots, url, "linux-64")
    except Fail as e:
        return e
    return {n: str(Version(m.version)) for n, (_, m) in found.items()}


def accepted(cache: Path, url: str, roots: list[str], mine: dict[str, str]) -> bool:
    """Whether uv resolves `roots` with fdlenv's picks pinned to exactly those picks."""
    from packaging.version import Version

    pinned = uv_compile(cache, url, roots + [f"{n}=={v}" for n, v in mine.items()])
    return pinned is not None and {n: str(Version(v)) for n, v in pinned.items()} == mine


def one_case(root: Path, base: str, i: int) -> tuple[str, tuple | None]:
    """Case `i` laid out under `root/case<i>` (served at `base/case<i>/simple`), locked by both:
    (solved | other | failed, the disagreement or None)."""
    from packaging.version import Version

    projects, roots = generate(random.Random(f"{SEED}-{i}"))
    lay_out(root / f"case{i}", projects)
    url, cache = f"{base}/case{i}/simple", root / "uv-cache"
    theirs = uv_compile(cache, url, roots)
    mine = fdlenv_lock(url, roots)
    if theirs is None:
        bad = not isinstance(mine, Fail) or mine.transient or "\n" in mine.message
        return "failed", (i, roots, "uv: no solution", mine) if bad else None
    theirs = {n: str(Version(v)) for n, v in theirs.items()}
    if isinstance(mine, dict) and mine != theirs and accepted(cache, url, roots, mine):
        return "other", None   # two solutions: resolvelib backjumps where PubGrub downgrades the later pick
    return "solved", (i, roots, theirs, mine if isinstance(mine, dict) else mine.message) if mine != theirs else None


def test_fdlenv_picks_the_versions_uv_picks_on_generated_indexes(tmp_path):
    if shutil.which("uv") is None:
        pytest.skip("uv is in the test extra (pip install -e '.[test]')")
    started = time.monotonic()
    with Index(tmp_path) as index, ThreadPoolExecutor(WORKERS) as pool:
        base = index.simple.removesuffix("/simple")
        results = list(pool.map(lambda i: one_case(tmp_path, base, i), range(CASES)))
    kinds = [k for k, _ in results]
    disagree = [d for _, d in results if d is not None]
    print(f"{CASES} cases, seed {SEED}: {kinds.count('solved') + kinds.count('other')} solved "
          f"({kinds.count('other')} to another solution uv accepts), {kinds.count('failed')} unsatisfiable, "
          f"{time.monotonic() - started:.1f} s", file=sys.stderr)
    assert not disagree, "\n".join(map(repr, disagree))
