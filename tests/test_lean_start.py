"""A lean start: `detect` and the link-only realise import only what they use.

Read as tests/test_store_realise.py reads the re-dial path (its declared-modules test):
the command runs in a fresh interpreter (tests/helpers_imports.py) and what it imported is
compared with what it is declared to need. `detect` on a GPU-less box parses arch and
version strings with `str` methods (fdlenv/hw/coverage.py); a test here holds those to the
regular expressions they replaced. The link-only realise is bench/wheels.py's second env:
every wheel already in the package cache, the env, its fast-path entry, roots and pointers
gone, so only the lock is read and the entries linked.
"""

from __future__ import annotations

import json
import random
import re
import shutil

import pytest
from helpers_imports import imported, of_fdlenv
from test_store_realise import REDIAL_MODULES
from test_wheels_store import locked_world, make_wheels

from fdlenv.hw import coverage, gates, routing, spoof

DETECT_MODULES = {
    "fdlenv", "fdlenv.__main__", "fdlenv.front.cli", "fdlenv.base.errors", "fdlenv.base.output", "fdlenv.names.buildtree",
    "fdlenv.base.confine", "fdlenv.names.leasefile", "fdlenv.hot.replay", "fdlenv.front.commands", "fdlenv.front.commands.detect",
    "fdlenv.names.variants", "fdlenv.app.libtorch", "fdlenv.hw", "fdlenv.hw.survey", "fdlenv.hw.gates", "fdlenv.hw.masks",
    "fdlenv.hw.model", "fdlenv.hw.coverage", "fdlenv.hw.routing", "fdlenv.source", "fdlenv.source.nvcc",
    "fdlenv.base.memory", "fdlenv.names.roots", "fdlenv.store.statecodec",
    "fdlenv.front.table", "fdlenv.base.record", "fdlenv.base.shells",   # the front's option table
    # the packages those live in (each an __init__ of a docstring)
    "fdlenv.app", "fdlenv.base", "fdlenv.front", "fdlenv.hot", "fdlenv.names", "fdlenv.store",
}
NEVER_ON_DETECT = ("re", "pathlib", "fnmatch", "tempfile", "typing", "dataclasses", "argparse", "shutil",
                   "subprocess", "urllib.parse")


@pytest.mark.parametrize("argv", [["detect"], ["detect", "--json"]], ids=["detect", "detect --json"])
def test_detect_on_a_box_without_a_gpu_imports_its_declared_modules_and_never_re(argv, tmp_path):
    if gates.nvidia_driver("/dev", "/proc") or gates.amd_present("/sys"):
        pytest.skip("this box has a GPU driver: detect then loads the vendor's library")
    # No host toolkit in view (CUDACXX names a path with no nvcc), so the human report asks nothing.
    code, out, mods = imported(argv, env={"CUDACXX": str(tmp_path / "nvcc"), "FLODL_TESTING_GPU_JSON": ""})
    assert code == 0 and "auto" in out
    assert of_fdlenv(mods) <= DETECT_MODULES, of_fdlenv(mods) - DETECT_MODULES
    assert not mods & set(NEVER_ON_DETECT), mods & set(NEVER_ON_DETECT)
    assert ("json" in mods) is False and (("_json" in mods) == ("--json" in argv))


def _old_parse_cc(token: str):
    t = token.strip().lower()
    if t.endswith("+ptx"):
        t = t[:-4]
    m = re.fullmatch(r"(\d+)\.(\d+)", t) or re.fullmatch(r"sm_?(\d+)(\d)", t)
    return (int(m.group(1)), int(m.group(2))) if m else None


def _old_parse_gfx(token: str):
    t = token.strip().lower().split(":", 1)[0]
    return t if re.fullmatch(r"gfx[0-9a-f]+", t) else None


def _old_version(text: str):
    m = re.match(r"(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else None


# Digits and spaces of other scripts (Arabic-Indic, no-break, em space), a superscript two (a
# digit to `isdigit`, not to `re` or `isdecimal`), and what the spellings are made of.
ALPHABET = [*"0123456789.sm_gfxabcdefzSMGFX+PTXptx:;, \t\n-", "\u0660", "\u0663", "\u00b2", "\u00a0", "\u2003",
            "\u00e9", "\u0130"]


def test_the_str_parsers_answer_as_the_regular_expressions_they_replaced():
    rng = random.Random(38)
    prefixes = ("", "sm", "sm_", "gfx", "1.", "12.8", " 8.6+PTX")
    words = ["".join(rng.choice(ALPHABET) for _ in range(rng.randint(0, 8))) for _ in range(20000)]
    seen = set()
    for word in words:
        for text in (p + word for p in prefixes):
            seen.add(coverage.parse_cc(text))
            assert coverage.parse_cc(text) == _old_parse_cc(text), repr(text)
            assert coverage.parse_gfx(text) == _old_parse_gfx(text), repr(text)
            assert coverage.split_archs(text) == [t for t in re.split(r"[;,\s]+", text) if t], repr(text)
            assert routing._version(text) == _old_version(text), repr(text)
            assert spoof._is_version(text) == bool(re.fullmatch(r"\d+\.\d+[\w.+-]*", text)), repr(text)
    assert len(seen) > 50    # the words parse often enough to compare answers, not only refusals


# The link-only realise: the re-dial's modules plus the lock's reader (a new env's records come
# from the lock: YAML parsed, so yaml is imported), the install and the linker. No module of
# the fetch path (the index client, the zip streamer, the whole-file path, conda's worker).
LINK_ONLY_MODULES = REDIAL_MODULES | {
    "fdlenv.lock.file", "fdlenv.base.yamlfile", "fdlenv.store.install", "fdlenv.store.wheels", "fdlenv.store.linktree",
    "fdlenv.store.cudahome", "fdlenv.store.ownfiles", "fdlenv.store.sizes", "fdlenv.index.pipindex", "fdlenv.hw",
    "fdlenv.hw.model", "fdlenv.hw.coverage", "fdlenv.source", "fdlenv.source.nvcc",
    "fdlenv.base.deadlines",   # the fetcher joined in slices (a stop signal on another thread)
}
NEVER_LINK_ONLY = ("urllib.request", "http.client", "ssl", "socket", "concurrent.futures", "subprocess", "typing",
                   "tempfile", "shutil", "zipfile", "rattler", "conda_lock", "fdlenv.index.simpleapi", "fdlenv.base.netread",
                   "fdlenv.store.streamzip", "fdlenv.store.wheelfile", "fdlenv.store.fetchorder",
                   "fdlenv.store.wheelfetch", "fdlenv.store.archives", "fdlenv.store.install_worker")


def test_a_second_env_whose_wheels_are_all_cached_imports_no_module_of_the_fetch_path(tmp_path):
    home, lock, url, _ = locked_world(tmp_path, make_wheels(tmp_path / "built"))
    argv = ["env", "realize", "--libtorch", "cu128", "--lock", str(lock), "--home", str(home.root),
            "--mirror", f"pypi={url}", "--json"]
    code, out, _ = imported(argv)
    assert code == 0 and json.loads(out)["created"] is True
    entries = sorted(p.name for p in home.pkgs.glob("whl-*"))
    for d in (home.envs, home.cache / "fast", home.root / "roots", home.libtorch):
        shutil.rmtree(d)
    code, out, mods = imported(argv)
    assert code == 0 and json.loads(out)["created"] is True
    assert sorted(p.name for p in home.pkgs.glob("whl-*")) == entries       # nothing was fetched
    assert of_fdlenv(mods) <= LINK_ONLY_MODULES, of_fdlenv(mods) - LINK_ONLY_MODULES
    assert not mods & set(NEVER_LINK_ONLY), mods & set(NEVER_LINK_ONLY)
    assert "yaml" in mods      # the lock is parsed: a new env's records are read from it
