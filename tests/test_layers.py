"""The import graph: layers only point down, nothing imports in a circle.

Read from the source with `ast` (function-level imports count too: a lazy
import is still a dependency). The layers, top to bottom:

5 front:     cli, __main__, commands.*  (a command never imports another command or cli)
4 flags:     flags (what several commands share)
3 workflows: prepare, join.*, walkthrough, libtorch, export, recipes
2 parts:     store.*, source.*, lock.*, pack.*, data, config.{grammar,schema,load,resolve,token}, settings, lockview
1 names:     hw.*, variants, home, config.model, mirrors, pipindex, simpleapi, lockpath, filelocks, fdlfile
0 base:      errors, output, progress, hashing, atomic, groupguard, shells, netread, fdlenv itself (__version__)

Within one layer an import is allowed when it closes no cycle.
"""

from __future__ import annotations

import ast
from pathlib import Path

PKG = Path(__file__).resolve().parent.parent / "fdlenv"

LAYERS = {
    5: ("cli", "__main__", "commands"),
    4: ("flags",),
    3: ("prepare", "join", "walkthrough", "libtorch", "export", "recipes"),
    2: ("store", "source", "lock", "pack", "data", "config.grammar", "config.schema", "config.load",
        "config.resolve", "config.token", "settings", "lockview"),
    1: ("hw", "variants", "home", "config", "config.model", "mirrors", "pipindex", "simpleapi", "lockpath", "filelocks", "yamlfile",
        "fdlfile"),
    0: ("", "errors", "output", "progress", "hashing", "atomic", "groupguard", "shells", "netread"),
}


def layer_of(mod: str) -> int:
    """The layer of the longest prefix listed in LAYERS (`store.wheels` -> store -> 2)."""
    best, found = -1, None
    for layer, names in LAYERS.items():
        for n in names:
            if (mod == n or mod.startswith(n + ".")) and len(n) > best:
                best, found = len(n), layer
    assert found is not None, f"fdlenv.{mod} is in no layer: add it to LAYERS in {__file__}"
    return found


def modules() -> dict[str, Path]:
    out = {}
    for p in sorted(PKG.rglob("*.py")):
        parts = p.relative_to(PKG).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def imports(mod: str, path: Path, known: set[str]) -> set[str]:
    """fdlenv modules `mod` imports, relative names resolved (`from . import x` -> x's module)."""
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    pkg = [p for p in pkg if p]
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                target = ".".join(base + (node.module.split(".") if node.module else []))
            elif node.module and (node.module == "fdlenv" or node.module.startswith("fdlenv.")):
                target = node.module[len("fdlenv."):] if node.module != "fdlenv" else ""
            else:
                continue
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.startswith("fdlenv."):
                    found.add(alias.name[len("fdlenv."):])
    found.discard(mod)
    return {f for f in found if f in known}


def graph() -> dict[str, set[str]]:
    mods = modules()
    return {m: imports(m, p, set(mods)) for m, p in mods.items()}


def test_every_import_points_down_or_sideways():
    up = []
    for mod, deps in graph().items():
        for dep in deps:
            if layer_of(dep) > layer_of(mod):
                up.append(f"fdlenv.{mod} (layer {layer_of(mod)}) imports fdlenv.{dep} (layer {layer_of(dep)})")
    assert not up, "upward imports:\n" + "\n".join(sorted(up))


def test_commands_import_neither_each_other_nor_the_front():
    bad = [f"fdlenv.{m} imports fdlenv.{d}" for m, deps in graph().items() if m.startswith("commands.")
           for d in deps if d.startswith("commands") or d == "cli"]
    assert not bad, "\n".join(bad)


def test_the_import_graph_has_no_cycle():
    g = graph()
    state: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(m: str) -> None:
        state[m] = 1
        stack.append(m)
        for d in sorted(g[m]):
            if state.get(d) == 1:
                cycles.append(" -> ".join(stack[stack.index(d):] + [d]))
            elif d not in state:
                visit(d)
        stack.pop()
        state[m] = 2

    for m in sorted(g):
        if m not in state:
            visit(m)
    assert not cycles, "import cycles:\n" + "\n".join(cycles)


def test_the_checker_sees_a_lazy_upward_import_and_a_cycle(tmp_path):
    """The walk itself: a function-level import counts, `from . import x` names module x."""
    (tmp_path / "pkg").mkdir()
    src = tmp_path / "pkg" / "variants.py"
    src.write_text("def f():\n    from .store import pointers\n    from . import errors\n")
    got = imports("variants", src, {"variants", "store", "store.pointers", "errors"})
    assert got == {"store.pointers", "errors"} and layer_of("store.pointers") > layer_of("variants")
