"""The docs name only what is in the tree: every module path and every dotted name of code.

What the docs say about the code drifts when the code moves and the prose does not. This test
reads README.md, docs/*.md and pyproject.toml's comments, in that order, and holds each name to
the tree:
- a path (`fdlenv/store/gc.py`, `store/gc.py`, `bench/wheels.py`, `tests/conftest.py`,
  `docs/LOCK.md`) must be a file of the checkout (a short module path is read under fdlenv/);
- a dotted name in backticks (`fdlenv.store.gc`, `store.gc.collect`, `gc.collect`,
  `Home.wheel_entry`, `helpers_source.wait_out_racy_window`) must resolve, read with `ast`
  (nothing is imported): its head is fdlenv, a unit, a module's own name (of fdlenv, tests/ or
  bench/) or a class's name, and each further part a module below it, a name
  the module binds at its top level, or a name a class binds in its body. A head that is none
  of these (an fdl.yml key, a file name, another program's API) is not the code's, and is left.
- the walks of docs/ARCHITECTURE.md ("Two walks through the tree") name, in their closing
  sentence, exactly the units their steps cross.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

from helpers_layers import PKG, ROOT, modules

DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
PYPROJECT = ROOT / "pyproject.toml"
UNITS = {p.name for p in PKG.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
PATH = re.compile(r"(?<![\w/.~$-])((?:[A-Za-z_][\w-]*/)*[\w-]+\.(?:py|md))\b")
DOTTED = re.compile(r"`([A-Za-z_]\w*(?:\.[A-Za-z_]\w*)+)(?=[`(\[ ])")
# Dotted names whose head is a name of the code but that are not the code's: fdl.yml's keys
# (`join.token`, the `join:` block) and the unit `join`'s name meet there.
NOT_CODE = re.compile(r"^(join|cluster)\.(token|libtorch|ssh|source|data|controller|gpu_ram_share|workers|"
                      r"bin|args|persist|env|identity|devices|max_attempts|backoff)\b"
                      r"|^fdlenv\.sizes$")   # a lock's metadata key (docs/LOCK.md)
FILES = {"py", "md", "yml", "yaml", "json", "toml", "txt", "profile", "conda", "whl", "sh", "service"}


def texts() -> list[tuple[str, str]]:
    """(where, text) of each doc, and of pyproject.toml's comments (a `#` to its line's end)."""
    out = [(p.relative_to(ROOT).as_posix(), p.read_text()) for p in DOCS]
    comments = [line.split("#", 1)[1] for line in PYPROJECT.read_text().splitlines() if "#" in line]
    return [*out, ("pyproject.toml", "\n".join(comments))]


def path_exists(name: str) -> bool:
    if "/" not in name and name.endswith(".py"):
        return any(PKG.rglob(name)) or (ROOT / name).exists()   # `yamlfile.py`: a module by its own name
    return any((base / name).exists() for base in (ROOT, PKG, ROOT / "docs"))


def is_ours(name: str) -> bool:
    """A path of this project's: under one of its folders, a unit's or a module's own name."""
    head = name.split("/")[0]
    return head in {"fdlenv", "bench", "tests", "docs", "examples", "scripts", *UNITS} or (
        "/" not in name and (name.endswith(".md") and name.isupper() is False and name[:-3].isupper()
                             or name.endswith(".py") and any(PKG.rglob(name))))


@functools.cache
def _tree(path: Path) -> ast.Module:
    return ast.parse(path.read_text())


def _bound(body: list[ast.stmt]) -> dict[str, ast.AST]:
    """The names a block binds at its own level (defs, classes, assignments, imports), through
    `if`/`try`/`with` blocks but not into functions."""
    out: dict[str, ast.AST] = {}
    for s in body:
        if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[s.name] = s
        elif isinstance(s, ast.Assign):
            for t in s.targets:
                for n in ast.walk(t):
                    if isinstance(n, ast.Name):
                        out[n.id] = s
        elif isinstance(s, ast.AnnAssign) and isinstance(s.target, ast.Name):
            out[s.target.id] = s
        elif isinstance(s, (ast.Import, ast.ImportFrom)):
            out.update({(a.asname or a.name).split(".")[0]: s for a in s.names})
        elif isinstance(s, (ast.If, ast.Try, ast.With)):
            for block in (getattr(s, f, []) for f in ("body", "orelse", "finalbody")):
                out.update(_bound(block))
            for h in getattr(s, "handlers", []):
                out.update(_bound(h.body))
    return out


MODS = modules()
BY_NAME: dict[str, list[str]] = {}
for _m in MODS:
    BY_NAME.setdefault(_m.split(".")[-1], []).append(_m)
SCRIPTS = {p.stem: p for d in ("tests", "bench") for p in (ROOT / d).glob("*.py")}   # `helpers_source.wait_...`
CLASSES: dict[str, list[ast.ClassDef]] = {}
for _p in MODS.values():
    for _n in ast.walk(_tree(_p)):
        if isinstance(_n, ast.ClassDef):
            CLASSES.setdefault(_n.name, []).append(_n)


def _in_class(cls: ast.ClassDef, rest: list[str]) -> bool:
    node: ast.AST = cls
    for part in rest:
        if not isinstance(node, ast.ClassDef) or part not in _bound(node.body):
            return False
        node = _bound(node.body)[part]
    return True


def _in_module(mod: str, rest: list[str]) -> bool:
    """`rest` resolves below module `mod`: submodules first, then its top-level names, then a
    class's body (one more level: `Home.wheel_entry`)."""
    while rest and f"{mod}.{rest[0]}".strip(".") in MODS:
        mod, rest = f"{mod}.{rest[0]}".strip("."), rest[1:]
    if not rest:
        return True
    bound = _bound(_tree(MODS[mod]).body)
    if rest[0] not in bound:
        return False
    node = bound[rest[0]]
    return len(rest) == 1 or (isinstance(node, ast.ClassDef) and _in_class(node, rest[1:])) or (
        isinstance(node, (ast.Import, ast.ImportFrom)))   # a module it imports: its own names are its own


def resolves(name: str) -> bool | None:
    """True or False for a name of the code; None for a name whose head is not the code's."""
    parts = name.split(".")
    if NOT_CODE.match(name) or parts[-1] in FILES:
        return None
    if parts[0] == "fdlenv":
        return _in_module("", parts[1:])
    if parts[0] in UNITS:
        return _in_module(parts[0], parts[1:])
    if parts[0] in BY_NAME:
        return any(_in_module(m, parts[1:]) for m in BY_NAME[parts[0]])
    if parts[0] in SCRIPTS and len(parts) == 2:
        return parts[1] in _bound(_tree(SCRIPTS[parts[0]]).body)
    if parts[0] in CLASSES:
        return any(_in_class(c, parts[1:]) for c in CLASSES[parts[0]])
    return None


def test_every_path_the_docs_name_is_in_the_tree():
    gone = sorted({f"{where}: {p}" for where, text in texts() for p in PATH.findall(text)
                   if is_ours(p) and not path_exists(p)})
    assert not gone, "the docs name files that are not in the tree:\n" + "\n".join(gone)


def test_every_dotted_name_of_the_code_the_docs_name_resolves():
    gone = sorted({f"{where}: {n}" for where, text in texts() for n in DOTTED.findall(text)
                   if resolves(n) is False})
    assert not gone, "the docs name code that is not in the tree:\n" + "\n".join(gone)


def test_the_checker_sees_a_name_that_left():
    assert resolves("fdlenv.store.gc.collect") is True
    assert resolves("gc.collect") is True and resolves("Home.wheel_entry") is True
    assert resolves("data.dataset_root") is None            # no module, unit or class is `data`
    assert resolves("store.gc.sweep_everything") is False
    assert resolves("Fail.never_defined") is False
    assert resolves("join.token") is None                   # fdl.yml's key, not the unit
    assert not path_exists("fdlenv/lock/provider.py") and is_ours("lock/provider.py")


WALKS = "## Two walks through the tree"
NUMBERS = {"Three": 3, "Four": 4, "Five": 5, "Six": 6, "Seven": 7, "Eight": 8, "Nine": 9}


def test_each_walk_names_exactly_the_units_its_steps_cross():
    text = (ROOT / "docs" / "ARCHITECTURE.md").read_text()
    section = text.split(WALKS, 1)[1].split("\n## ", 1)[0]
    walks = [w for w in section.split("\n\n") if "->" in w]
    assert len(walks) == 2, walks
    for walk in walks:
        said = re.search(r"(\w+) units \(([a-z,\s]+)\)|(\w+) units: ([a-z,\s]+)\.", walk)
        assert said, f"a walk says no units it crosses: {walk[:80]}"
        number, listed = (said.group(1), said.group(2)) if said.group(1) else (said.group(3), said.group(4))
        listed_units = {u.strip() for u in listed.split(",")}
        steps = walk[:said.start()]
        crossed = {n.split(".")[0] for n in DOTTED.findall(steps + " ") if n.split(".")[0] in UNITS}
        crossed |= {u for u in re.findall(r"`([a-z]+)`", steps) if u in UNITS}
        assert listed_units == crossed, f"the walk lists {sorted(listed_units)}; its steps cross {sorted(crossed)}"
        assert NUMBERS[number] == len(crossed), f"'{number} units' for {len(crossed)}"
        unresolved = [n for n in DOTTED.findall(steps + " ") if resolves(n) is False]
        assert not unresolved, unresolved
