"""The import graph keeps the contract in docs/ARCHITECTURE.md's "Layers" table.

The table is the one statement of who may import whom: one row per unit (a
top-level module or a package), its layer and what it may import; this test
reads it from the doc, so the two cannot drift. The graph is read from the
source with `ast` (tests/helpers_layers.py): imports inside functions count (a lazy import is
still a dependency), and so do the calls of an import function naming an fdlenv module; a
dynamic import whose target the walk cannot read is a finding of its own, and so is a row
allowing what nothing in its unit imports.

Dynamic import machinery (`importlib`, `__import__`, `exec`/`eval`/`compile`, `runpy`, `pkgutil`,
`builtins`, `sys.modules`) is allowed only in the modules the doc's machinery table names, each
with its reason: every other use is a finding, whatever the walk makes of it, so a form the walk
cannot follow still cannot hide an import in a low module.

The checker is a function of a tree and a table (`findings`), so each way of
breaking the contract has a test below that breaks a copy of the tree.
"""

from __future__ import annotations

import ast
import re
import shutil
from pathlib import Path

import pytest
from helpers_layers import PKG, ROOT, graph, modules

DOC = ROOT / "docs" / "ARCHITECTURE.md"
EVERYTHING_BELOW = "every unit below layer"
ONLY = "only "   # a row that names all it may import, layer-0 units included (the memo's replay)


# ------------------------------------------------------------------ the table

def read_table(doc: Path = DOC, only: set[str] | None = None) -> dict[str, tuple[int, tuple[str, ...]]]:
    """{unit: (layer, allowed imports)} from the rows between the table's markers; the units whose
    row begins with `only` (no layer-0 unit beyond those it names) are added to `only`."""
    only = set() if only is None else only
    text = doc.read_text()
    body = text.split("<!-- units: read by tests/test_layers.py -->", 1)[1].split("<!-- end of units -->", 1)[0]
    table = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].isdigit():
            continue
        layer, unit, allowed = int(cells[0]), cells[1].strip("`"), cells[2]
        table[unit] = (layer, (EVERYTHING_BELOW,) if allowed.startswith(EVERYTHING_BELOW)
                       else tuple(re.findall(r"`([^`]+)`", allowed)))
        if allowed.startswith(ONLY):
            only.add(unit)
    assert table, f"{doc}: no rows between the units markers"
    return table


MACHINERY_START = "<!-- import machinery: read by tests/test_layers.py -->"


def read_machinery(doc: Path = DOC) -> dict[str, tuple[str, ...]]:
    """{module path under fdlenv/: the kinds of import machinery it may use} from the rows between
    the machinery table's markers; a row without a reason is refused."""
    text = doc.read_text()
    assert MACHINERY_START in text, f"{doc}: no machinery table"
    body = text.split(MACHINERY_START, 1)[1].split("<!-- end of machinery -->", 1)[0]
    rows = {}
    for line in body.splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 3 or not cells[0].startswith("`"):
            continue
        assert cells[2], f"{doc}: the machinery row of {cells[0]} gives no reason"
        rows[cells[0].strip("`")] = tuple(re.findall(r"`([^`]+)`", cells[1]))
    return rows


def machinery_findings(uses: dict[str, list[tuple[str, int]]], mods: dict[str, Path], pkg: Path,
                       doc: Path) -> list[str]:
    """Each use of import machinery its module's row does not allow, and each row that allows
    what its module does not use or names a module that is not there."""
    allowed = read_machinery(doc)
    out = []
    for mod, found in sorted(uses.items()):
        rel = mods[mod].relative_to(pkg).as_posix()
        may = allowed.get(rel, ())
        out += [f"fdlenv.{mod}:{line} uses `{kind}` (dynamic import machinery): only a module "
                f"{doc.name}'s machinery table names may, with why; import fdlenv modules by name"
                for kind, line in sorted(set(found), key=lambda u: (u[1], u[0])) if kind not in may]
    rels = {p.relative_to(pkg).as_posix(): m for m, p in mods.items()}
    for rel, kinds in sorted(allowed.items()):
        if rel not in rels:
            out.append(f"{doc.name}: the machinery table names `{rel}`, which is not in the tree")
            continue
        used = {k for k, _ in uses[rels[rel]]}
        out += [f"{doc.name}: `{rel}` may use `{k}`, which it does not: drop it from the machinery table"
                for k in kinds if k not in used]
    return out


# ------------------------------------------------------------------ the contract

COMMANDS = "front.commands."   # one module per command: none imports another


def unit_of(mod: str) -> str:
    return mod.split(".")[0] if mod else "fdlenv"


def _cycles(g: dict[str, set[str]]) -> list[str]:
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g.get(m, ())):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    return cycles


def _allows(table, unit: str, dep: str, only: set[str] = frozenset()) -> bool:
    layer, allowed = table[unit]
    dep_unit = unit_of(dep)
    if allowed == (EVERYTHING_BELOW,):
        return table[dep_unit][0] < layer
    if layer > 0 and table[dep_unit][0] == 0 and unit not in only:
        return True
    return any(dep_unit == a or dep == a or dep.startswith(a + ".") for a in allowed)


def findings(pkg: Path = PKG, doc: Path = DOC) -> list[str]:
    """Every way the tree at `pkg` breaks the table in `doc`, one line each."""
    only: set[str] = set()
    table = read_table(doc, only)
    g, out, uses = graph(pkg)
    out += machinery_findings(uses, modules(pkg), pkg, doc)
    units = {unit_of(m) for m in g}
    out += [f"fdlenv.{m} is in no unit: give `{unit_of(m)}` a row in {doc.name}'s Layers table"
            for m in sorted(g) if unit_of(m) not in table]
    out += [f"{doc.name}: unit `{u}` is not in the tree" for u in sorted(set(table) - units)]
    for unit, (layer, allowed) in sorted(table.items()):
        for a in allowed:
            if a == EVERYTHING_BELOW:
                continue
            if unit_of(a) not in table:
                out.append(f"{doc.name}: `{unit}` may import `{a}`, which has no row")
            elif table[unit_of(a)][0] > layer:
                out.append(f"{doc.name}: `{unit}` (layer {layer}) may import `{a}` "
                           f"(layer {table[unit_of(a)][0]}): rows only point down")
    rows = {u: {unit_of(a) for a in allowed if a != EVERYTHING_BELOW} for u, (_, allowed) in table.items()}
    out += [f"{doc.name}: the rows allow a cycle: {c}" for c in _cycles(rows)]
    for mod, deps in sorted(g.items()):
        u = unit_of(mod)
        for dep in sorted(deps):
            d = unit_of(dep)
            if u not in table or d not in table:
                continue
            if u == d:
                if mod.startswith(COMMANDS) and dep.startswith(COMMANDS):
                    out.append(f"fdlenv.{mod} imports fdlenv.{dep}: a command never imports another")
            elif not _allows(table, u, dep, only):
                out.append(f"fdlenv.{mod} imports fdlenv.{dep}: the `{u}` row (layer {table[u][0]}) "
                           f"does not allow `{d}` (layer {table[d][0]})")
    for unit, (_, allowed) in sorted(table.items()):
        used = {dep for mod, deps in g.items() if unit_of(mod) == unit for dep in deps}
        out += [f"{doc.name}: `{unit}` may import `{a}`, which nothing in it imports: drop it from the row"
                for a in allowed if a != EVERYTHING_BELOW and unit_of(a) in table
                and not any(unit_of(d) == a or d == a or d.startswith(a + ".") for d in used)]
    out += [f"import cycle: {c}" for c in _cycles(g)]
    return out


# ------------------------------------------------------------------ the tree as it is

def test_the_tree_keeps_every_row_of_the_layers_table():
    problems = findings()
    assert not problems, "\n".join(problems)


def test_the_table_has_a_row_for_every_unit_and_layers_0_to_5():
    table = read_table()
    assert {layer for layer, _ in table.values()} == set(range(6))
    assert {"base", "names", "index", "store", "lock", "config", "hot", "app", "front"} <= set(table)


# ------------------------------------------------------------------ each break a test of its own

def _copy(tmp_path: Path) -> Path:
    dst = tmp_path / "fdlenv"
    shutil.copytree(PKG, dst, ignore=shutil.ignore_patterns("__pycache__", "data"))
    return dst


def _add(pkg: Path, rel: str, code: str) -> None:
    p = pkg / rel
    p.write_text(p.read_text() + "\n\n" + code + "\n")


def _broken(tmp_path: Path, rel: str, code: str) -> list[str]:
    pkg = _copy(tmp_path)
    _add(pkg, rel, code)
    return findings(pkg)


# Each case the issue named, one test each: (the module changed, the code added, the finding).
FORBIDDEN = {
    "errors importing the cli through importlib": (
        "base/errors.py", "def f():\n    import importlib\n    importlib.import_module('fdlenv.front.cli')",
        "fdlenv.base.errors imports fdlenv.front.cli"),
    "hashing importing a command through __import__": (
        "base/hashing.py", "def f():\n    __import__('fdlenv.front.commands.env')", "fdlenv.base.hashing imports fdlenv.front.commands.env"),
    "the store importing datasets": (
        "store/gc.py", "def f():\n    from ..app import datasets", "fdlenv.store.gc imports fdlenv.app.datasets"),
    "the store importing pack": (
        "store/gc.py", "def f():\n    from ..pack import condapkg", "fdlenv.store.gc imports fdlenv.pack.condapkg"),
    "an app module reaching sideways into the memo": (
        "app/settings.py", "def f():\n    from ..hot.memo import start", "fdlenv.app.settings imports fdlenv.hot.memo"),
    "lock reaching sideways into the store": (
        "lock/make.py", "def f():\n    from ..store import envkey", "fdlenv.lock.make imports fdlenv.store.envkey"),
    "pack reaching sideways into lock": (
        "pack/libtorch.py", "def f():\n    from ..lock.solve import declared_virtual_packages",
        "fdlenv.pack.libtorch imports fdlenv.lock.solve"),
    # the four forms the walk once missed (issue 37)
    "errors importing the cli by a relative name and a package": (
        "base/errors.py", "def f():\n    import importlib\n    importlib.import_module('.front.cli', 'fdlenv')",
        "fdlenv.base.errors imports fdlenv.front.cli"),
    "the store importing datasets relative to __package__": (
        "store/gc.py", "def f():\n    from importlib import import_module\n"
        "    import_module('..app.datasets', package=__package__)", "fdlenv.store.gc imports fdlenv.app.datasets"),
    "hashing importing a command through an aliased import_module": (
        "base/hashing.py", "def f():\n    from importlib import import_module as load\n    again = load\n"
        "    again('fdlenv.front.commands.env')", "fdlenv.base.hashing imports fdlenv.front.commands.env"),
    "the store importing datasets through __import__'s fromlist": (
        "store/gc.py", "def f():\n    __import__('fdlenv.app', fromlist=['datasets'])",
        "fdlenv.store.gc imports fdlenv.app.datasets"),
    # the cycle the join resolver once closed: settings reads fdl.yml through config
    "config importing settings back": (
        "config/load.py", "def f():\n    from ..app.settings import resolve", "fdlenv.config.load imports fdlenv.app.settings"),
}


@pytest.mark.parametrize("case", FORBIDDEN, ids=lambda c: c.replace(" ", "_"))
def test_each_forbidden_import_is_a_finding(tmp_path, case):
    rel, code, finding = FORBIDDEN[case]
    got = _broken(tmp_path, rel, code)
    assert any(line.startswith(finding) for line in got), got


def test_a_row_that_allows_a_cycle_is_a_finding(tmp_path):
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(DOC.read_text().replace("| 1 | `config` | `names.roots`, `names.variants` |", "| 1 | `config` | `index`, `names.roots` |")
                   .replace("| 1 | `index` | — |", "| 1 | `index` | `config` |"))
    got = findings(PKG, doc)
    assert any("the rows allow a cycle" in line and "index" in line for line in got), got


def test_a_row_that_points_up_is_a_finding(tmp_path):
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(DOC.read_text().replace("| 1 | `hw` | — |", "| 1 | `hw` | `store` |"))
    got = findings(PKG, doc)
    assert any("`hw` (layer 1) may import `store` (layer 2)" in line for line in got), got


def test_an_only_row_allows_no_layer_0_module_it_does_not_name(tmp_path):
    got = _broken(tmp_path, "hot/replay.py", "def f():\n    from ..base import netread")
    assert any(line.startswith("fdlenv.hot.replay imports fdlenv.base.netread: the `hot` row") for line in got), got


def test_app_and_below_never_import_the_front_or_the_memo(tmp_path):
    for rel, code in (("app/libtorch.py", "def f():\n    from ..front import options"),
                      ("store/gc.py", "def f():\n    from ..hot import replay")):
        got = _broken(tmp_path / rel.replace("/", "-"), rel, code)
        assert any("does not allow" in line and ("`front`" in line or "`hot`" in line) for line in got), got


def test_a_row_that_allows_what_nothing_imports_is_a_finding(tmp_path):
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(DOC.read_text().replace("| 1 | `config` | `names.roots`, `names.variants` |", "| 1 | `config` | `hw`, `names.roots` |"))
    got = findings(PKG, doc)
    assert "ARCHITECTURE.md: `config` may import `hw`, which nothing in it imports: drop it from the row" \
        in got, got


def test_a_module_cycle_inside_one_unit_is_a_finding(tmp_path):
    pkg = _copy(tmp_path)
    _add(pkg, "store/fastpath.py", "def f():\n    from . import realise")
    got = findings(pkg)
    assert any(line.startswith("import cycle:") and "store.fastpath" in line for line in got), got


def test_a_command_importing_another_command_is_a_finding(tmp_path):
    got = _broken(tmp_path, "front/commands/run.py", "def f():\n    from . import env")
    assert "fdlenv.front.commands.run imports fdlenv.front.commands.env: a command never imports another" in got, got


def test_an_import_named_at_run_time_is_a_finding(tmp_path):
    got = _broken(tmp_path, "names/variants.py", "def f(name):\n    import importlib\n    importlib.import_module(name)")
    assert any(line.startswith("fdlenv.names.variants:") and "the walk cannot read" in line for line in got), got


def test_a_relative_import_against_a_package_named_at_run_time_is_a_finding(tmp_path):
    got = _broken(tmp_path, "names/variants.py", "def f(where):\n    import importlib\n"
                  "    importlib.import_module('.cli', where)")
    assert any(line.startswith("fdlenv.names.variants:") and "the walk cannot read" in line for line in got), got


# Import machinery planted in a low module: each form once slipped past the walk (issue 49), and
# each is a finding now because the module may not use the machinery at all.
HIDDEN = {
    "builtins.__import__": ("import builtins\n    builtins.__import__('fdlenv.app.datasets')", "builtins"),
    "importlib.__import__": ("import importlib\n    importlib.__import__('fdlenv.app.datasets')", "importlib"),
    "import_module of an f-string": (
        "from importlib import import_module\n    import_module(f'fdlenv.{x}.datasets')", "importlib"),
    "__import__ with a variable level": ("__import__('app.datasets', globals(), None, [], x)", "__import__"),
    "an annotated alias of import_module": (
        "import importlib\n    from typing import Callable\n    load: Callable = importlib.import_module\n"
        "    load('fdlenv.app.datasets')", "importlib"),
    "getattr of import_module": ("import importlib\n    getattr(importlib, 'import_module')('fdlenv.app.datasets')",
                                 "importlib"),
    "pkgutil.resolve_name": ("import pkgutil\n    pkgutil.resolve_name('fdlenv.app.datasets')", "pkgutil"),
    "runpy.run_module": ("import runpy\n    runpy.run_module('fdlenv.app.datasets')", "runpy"),
    "exec of an import": ("exec('from fdlenv.app import datasets')", "exec"),
}


@pytest.mark.parametrize("form", HIDDEN, ids=lambda c: c.replace(" ", "_"))
def test_import_machinery_in_a_module_the_table_does_not_name_is_a_finding(tmp_path, form):
    code, kind = HIDDEN[form]
    got = _broken(tmp_path, "store/gc.py", f"def f(x=None):\n    {code}")
    assert any(line.startswith("fdlenv.store.gc:") and f"uses `{kind}` (dynamic import machinery)" in line
               for line in got), got


# The same forms in a module the machinery table lets use importlib: the walk still sees the edge,
# or says it cannot read the import; the f-string form is the one its message recommends.
SEEN = {
    "importlib.__import__": ("importlib.__import__('fdlenv.app.datasets')", "fdlenv.lock.extra imports fdlenv.app.datasets"),
    "import_module of an f-string": ("importlib.import_module(f'fdlenv.{x}.datasets')",
                                     "fdlenv.lock.extra imports fdlenv.app.datasets"),
    "an annotated alias of import_module": ("load: object = importlib.import_module\n    load('fdlenv.app.datasets')",
                                            "fdlenv.lock.extra imports fdlenv.app.datasets"),
    "a walrus alias of import_module": ("(load := importlib.import_module)('fdlenv.app.datasets')",
                                        "fdlenv.lock.extra imports fdlenv.app.datasets"),
    "getattr of import_module": ("getattr(importlib, 'import_module')('fdlenv.app.datasets')",
                                 "fdlenv.lock.extra:"),
    "import_module handed on": ("list(map(importlib.import_module, ['fdlenv.app.datasets']))", "fdlenv.lock.extra:"),
    "__import__ with a variable level": ("__import__('app.datasets', globals(), None, [], x)", "fdlenv.lock.extra:"),
}


@pytest.mark.parametrize("form", SEEN, ids=lambda c: c.replace(" ", "_"))
def test_where_importlib_is_allowed_the_walk_still_sees_each_import_or_says_it_cannot(tmp_path, form):
    code, finding = SEEN[form]
    got = _broken(tmp_path, "lock/extra.py", f"def f(x=None):\n    {code}")
    if finding.endswith(":"):   # no edge to read: a finding that the walk cannot follow it
        assert any(line.startswith(finding) and "machinery" not in line for line in got), got
    else:
        assert any(line.startswith(finding) for line in got), got


def test_the_walks_advice_names_a_form_the_walk_then_sees(tmp_path):
    got = _broken(tmp_path, "names/variants.py", "def f(name):\n    import importlib\n    importlib.import_module(name)")
    advice = next(line for line in got if "the walk cannot read" in line)
    assert "f-string (every fdlenv module it can match counts as imported)" in advice, advice
    got = _broken(tmp_path / "2", "lock/extra.py", "def f(x):\n    importlib.import_module(f'fdlenv.{x}.datasets')")
    assert any(line.startswith("fdlenv.lock.extra imports fdlenv.app.datasets") for line in got), got
    assert not [line for line in got if line.startswith("fdlenv.lock.extra:")], got


def test_a_machinery_row_for_what_the_module_does_not_use_is_a_finding(tmp_path):
    doc = tmp_path / "ARCHITECTURE.md"
    doc.write_text(DOC.read_text().replace("| `lock/extra.py` | `importlib` |", "| `lock/extra.py` | `importlib`, `runpy` |")
                   .replace("| `recipes/plan.py` |", "| `recipes/gone.py` | `importlib` | a module that left |\n"
                            "| `recipes/plan.py` |"))
    got = findings(PKG, doc)
    assert "ARCHITECTURE.md: `lock/extra.py` may use `runpy`, which it does not: drop it from the machinery table" \
        in got, got
    assert "ARCHITECTURE.md: the machinery table names `recipes/gone.py`, which is not in the tree" in got, got


def test_a_new_module_outside_every_unit_is_a_finding(tmp_path):
    pkg = _copy(tmp_path)
    (pkg / "stray.py").write_text('"""A module nobody placed."""\n')
    assert any(line.startswith("fdlenv.stray is in no unit") for line in findings(pkg))


def test_a_row_for_a_unit_that_is_gone_is_a_finding(tmp_path):
    pkg = _copy(tmp_path)
    shutil.rmtree(pkg / "recipes")
    assert any("unit `recipes` is not in the tree" in line for line in findings(pkg))



# ------------------------------------------------------------------ the doc's map of the tree

MAP_START = "<!-- map: generated from each module's docstring by `python tests/test_layers.py` -->"
MAP_END = "<!-- end of map -->"


def render_map(pkg: Path = PKG, doc: Path = DOC) -> str:
    """The Map: every module, by unit in the layers table's order, with its docstring's first
    paragraph (the docstrings are the one description; the doc only collects them)."""
    table = read_table(doc)
    order = {u: i for i, u in enumerate(sorted(table, key=lambda u: (-table[u][0], list(table).index(u))))}
    rows = []
    for mod, path in sorted(modules(pkg).items(), key=lambda kv: (order.get(unit_of(kv[0]), 99), kv[0])):
        doc_text = ast.get_docstring(ast.parse(path.read_text())) or ""
        first = " ".join(doc_text.strip().split("\n\n")[0].split()).replace("|", "\\|")
        rel = path.relative_to(pkg).as_posix()
        rows.append(f"| {table.get(unit_of(mod), ('?',))[0]} | `{rel}` | {first} |")
    return "\n".join([MAP_START, "| layer | module | what it is for |", "| --- | --- | --- |", *rows, MAP_END])


def test_the_architecture_map_is_the_tree_as_it_is():
    text = DOC.read_text()
    assert MAP_START in text and MAP_END in text, f"{DOC.name}: no generated Map"
    now = text[text.index(MAP_START):text.index(MAP_END) + len(MAP_END)]
    assert now == render_map(), f"{DOC.name}'s Map is stale: run `python tests/test_layers.py`"


def test_every_module_opens_with_a_docstring_that_says_why():
    bare = [m or "fdlenv" for m, p in modules().items() if not ast.get_docstring(ast.parse(p.read_text()))]
    assert not bare, f"modules without a docstring: {', '.join(bare)}"


def test_architecture_names_only_modules_that_exist():
    text = DOC.read_text()
    named = {m.removeprefix("fdlenv/") for m in
             re.findall(r"(?<![\w/.-])((?:fdlenv/)?(?:[a-z_]+/)*[a-z_]+\.py)\b", text)}
    gone = sorted(p for p in named if not (PKG / p).exists() and not (ROOT / p).exists())
    assert not gone, f"{DOC.name} names modules that are not in the tree: {', '.join(gone)}"


if __name__ == "__main__":   # rewrite the Map from the tree
    text = DOC.read_text()
    DOC.write_text(text[:text.index(MAP_START)] + render_map() + text[text.index(MAP_END) + len(MAP_END):])
    print(f"{DOC}: Map rewritten")
