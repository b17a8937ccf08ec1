"""fdlenv's import graph, read from the source with `ast`: what tests/test_layers.py checks.

The walk never guesses: an import it cannot follow is a finding of its own. Per module, in
this order: the source is parsed once; the names bound to an import function are gathered
(`from importlib import import_module as load`, `load = importlib.import_module`, annotated
and walrus assignments, chains of them); then every node is read:
- import statements, relative ones resolved against the module's package;
- a call of an import function (`importlib.import_module`, `__import__` under any name,
  `importlib.__import__`, `runpy.run_module`, `pkgutil.resolve_name`): its target counted as an
  import, a relative name resolved against `package=`/`level=`, `__import__`'s `fromlist` as
  imports of those submodules, an f-string as every fdlenv module it can match;
- `exec`/`eval`/`compile` of a constant string: the string parsed and read the same way;
- any other reference to an import function (passed on, looked up by a string) is unreadable;
- every use of dynamic import machinery (the modules `importlib`, `runpy`, `pkgutil`,
  `builtins`; the builtins `__import__`, `exec`, `eval`, `compile`, `__builtins__`; `sys.modules`;
  an attribute or a string that names one of their import functions) is recorded with its kind,
  for the machinery table of docs/ARCHITECTURE.md: only the modules it names may use them.
"""

from __future__ import annotations

import ast
import functools
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PKG = ROOT / "fdlenv"

# What dynamic import machinery is, by the name that reaches it, and the kind a table row allows.
MACHINERY_MODULES = {"importlib": "importlib", "imp": "importlib", "zipimport": "importlib",
                     "runpy": "runpy", "pkgutil": "pkgutil", "builtins": "builtins"}
MACHINERY_NAMES = {"__import__": "__import__", "exec": "exec", "eval": "eval", "compile": "compile",
                   "__builtins__": "builtins", "__loader__": "importlib", "__spec__": "importlib"}
MACHINERY_ATTRS = {"__import__": "__import__", "import_module": "importlib", "__builtins__": "builtins",
                   "__loader__": "importlib", "__spec__": "importlib", "find_spec": "importlib",
                   "module_from_spec": "importlib", "spec_from_file_location": "importlib",
                   "exec_module": "importlib", "load_module": "importlib", "run_module": "runpy",
                   "run_path": "runpy", "resolve_name": "pkgutil"}
# strings that name machinery: `getattr(x, "import_module")`, `sys.modules["importlib"]`
MACHINERY_STRINGS = {**MACHINERY_MODULES, **MACHINERY_ATTRS, "__builtins__": "builtins"}
LOOKUPS = ("getattr", "hasattr", "setattr", "vars")
IMPORT_FUNCS = {"import_module", "__import__", "run_module", "resolve_name", "run_path"}
EXECS = {"exec", "eval", "compile"}
ANY_NAME = r"[A-Za-z0-9_.]+"
UNREADABLE = ("imports a module the walk cannot read; name it with a string constant, or an "
              "absolute f-string (every fdlenv module it can match counts as imported)")


def modules(pkg: Path = PKG) -> dict[str, Path]:
    """fdlenv's modules by dotted name relative to the package (`store.gc`; "" is fdlenv)."""
    out = {}
    for p in sorted(pkg.rglob("*.py")):
        parts = p.relative_to(pkg).with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = p
    return out


def _absolute(name: str) -> str | None:
    """`fdlenv.store.gc` -> `store.gc`, `fdlenv` -> ``; anything else None."""
    if name == "fdlenv":
        return ""
    return name[len("fdlenv."):] if name.startswith("fdlenv.") else None


def _str(node: ast.AST | None) -> str | None:
    return node.value if isinstance(node, ast.Constant) and isinstance(node.value, str) else None


def _arg(call: ast.Call, i: int, name: str) -> ast.AST | None:
    """The call's argument by position `i` or keyword `name`, else None."""
    if len(call.args) > i:
        return call.args[i]
    return next((k.value for k in call.keywords if k.arg == name), None)


def _relative(name: str, level: int, pkg: list[str]) -> str:
    """`name` at `level` dots below package `pkg` -> `fdlenv.`-rooted absolute name."""
    base = pkg[:len(pkg) - (level - 1)] if level > 1 else pkg
    return ".".join(["fdlenv", *base, *([name] if name else [])])


def _func_name(f: ast.AST) -> str | None:
    return f.attr if isinstance(f, ast.Attribute) else f.id if isinstance(f, ast.Name) else None


def _callee(call: ast.Call) -> ast.AST:
    """What a call calls, through walruses: `(load := importlib.import_module)(...)` calls the attribute."""
    f = call.func
    while isinstance(f, ast.NamedExpr):
        f = f.value
    return f


def _bindings(nodes: tuple[ast.AST, ...]) -> list[tuple[str, ast.AST]]:
    """(name, value) of every plain, annotated and walrus assignment to one name."""
    out = []
    for n in nodes:
        if isinstance(n, ast.Assign):
            out += [(t.id, n.value) for t in n.targets if isinstance(t, ast.Name)]
        elif isinstance(n, (ast.AnnAssign, ast.NamedExpr)) and isinstance(n.target, ast.Name) \
                and n.value is not None:
            out.append((n.target.id, n.value))
    return out


def _importers(nodes: tuple[ast.AST, ...]) -> tuple[dict[str, str], set[int]]:
    """({name: import function it is bound to}, ids of the nodes those bindings read): the
    functions' own names and every alias, followed through chains of aliases."""
    named = {f: f for f in IMPORT_FUNCS}
    for node in nodes:
        if isinstance(node, ast.ImportFrom) and node.module in ("importlib", "builtins", "runpy", "pkgutil"):
            named |= {a.asname or a.name: a.name for a in node.names if a.name in IMPORT_FUNCS}
    bindings, read = _bindings(nodes), set()
    grew = True
    while grew:
        before = len(named)
        for name, v in bindings:
            if isinstance(v, ast.Attribute) and v.attr in IMPORT_FUNCS:
                named[name] = v.attr
                read.add(id(v))
            elif isinstance(v, ast.Name) and v.id in named:
                named[name] = named[v.id]
                read.add(id(v))
        grew = len(named) != before
    return named, read


def _fstring(node: ast.JoinedStr) -> str | None:
    """An f-string as a pattern of the names it can make; None when it may be relative."""
    parts = [re.escape(str(_str(v))) if _str(v) is not None else ANY_NAME for v in node.values]
    return None if (_str(node.values[0]) or "").startswith(".") else "".join(parts)


def _call_targets(call: ast.Call, func: str, pkg: list[str]) -> list[str] | None:
    """Patterns of the absolute names an import function's call imports; None: unreadable."""
    if not call.args and not call.keywords:
        return None
    arg = _arg(call, 0, "mod_name" if func == "run_module" else "name")
    if func == "run_path" or arg is None:
        return None
    if isinstance(arg, ast.JoinedStr):
        base = _fstring(arg)
        level = _arg(call, 4, "level") if func == "__import__" else None
        if base is None or not (level is None or isinstance(level, ast.Constant) and level.value == 0):
            return None
        return _fromlist(call, base) if func == "__import__" else [base]
    target = _str(arg)
    if target is None:
        return None
    if func == "resolve_name":
        return [re.escape(target.split(":")[0])]
    if func == "__import__":
        level_node = _arg(call, 4, "level")
        if level_node is not None and not (isinstance(level_node, ast.Constant) and isinstance(level_node.value, int)):
            return None
        level = level_node.value if isinstance(level_node, ast.Constant) else 0
        return _fromlist(call, re.escape(_relative(target, level, pkg) if level else target))
    if not target.startswith("."):
        return [re.escape(target)]
    if func != "import_module":
        return None
    package = _arg(call, 1, "package")
    if isinstance(package, ast.Name) and package.id == "__package__":
        anchor = pkg
    elif _str(package) is not None and _absolute(str(_str(package))) is not None:
        anchor = [p for p in str(_absolute(str(_str(package)))).split(".") if p]
    else:
        return None
    dots = len(target) - len(target.lstrip("."))
    return [re.escape(_relative(target[dots:], dots, anchor))]


def _fromlist(call: ast.Call, base: str) -> list[str] | None:
    """`__import__`'s base and each submodule its `fromlist` names (a name made at run time:
    any submodule); a fromlist that is not a literal list is unreadable."""
    fromlist = _arg(call, 3, "fromlist")
    if fromlist is None:
        return [base]
    if not isinstance(fromlist, (ast.List, ast.Tuple)):
        return None
    return [base, *(f"{base}\\.{re.escape(str(_str(e)))}" if _str(e) is not None else f"{base}\\.\\w+"
                    for e in fromlist.elts)]


@functools.cache
def _nodes(source: str) -> tuple[ast.AST, ...]:
    """Each source parsed once per run (the break tests walk a copy of the same tree)."""
    return tuple(ast.walk(ast.parse(source)))


def machinery(nodes: tuple[ast.AST, ...]) -> list[tuple[str, int]]:
    """(kind, line) of every use of dynamic import machinery among `nodes`."""
    sys_names = {"sys"}
    uses = []
    for n in nodes:
        line = getattr(n, "lineno", 0)
        if isinstance(n, ast.Import):
            uses += [(MACHINERY_MODULES[a.name.split(".")[0]], line) for a in n.names
                     if a.name.split(".")[0] in MACHINERY_MODULES]
            sys_names |= {a.asname for a in n.names if a.name == "sys" and a.asname}
        elif isinstance(n, ast.ImportFrom) and not n.level:
            root = (n.module or "").split(".")[0]
            if root in MACHINERY_MODULES:
                uses.append((MACHINERY_MODULES[root], line))
            elif root == "sys" and any(a.name == "modules" for a in n.names):
                uses.append(("sys.modules", line))
        elif isinstance(n, ast.Name) and n.id in MACHINERY_NAMES:
            uses.append((MACHINERY_NAMES[n.id], line))
        elif isinstance(n, ast.Attribute) and n.attr in MACHINERY_ATTRS:
            uses.append((MACHINERY_ATTRS[n.attr], line))
        elif isinstance(n, ast.Attribute) and n.attr == "modules" and isinstance(n.value, ast.Name) \
                and n.value.id in sys_names:
            uses.append(("sys.modules", line))
        elif isinstance(n, ast.Constant) and isinstance(n.value, str) and n.value in MACHINERY_STRINGS:
            uses.append((MACHINERY_STRINGS[n.value], line))
        elif isinstance(n, ast.Call) and _func_name(n.func) in LOOKUPS and len(n.args) > 1 \
                and _str(n.args[1]) in {*EXECS, "modules"}:
            s = str(_str(n.args[1]))
            uses.append(("sys.modules" if s == "modules" else s, line))
    return uses


def _read(nodes: tuple[ast.AST, ...], pkg: list[str], known: set[str]) -> tuple[set[str], list[tuple[int, str]]]:
    """(fdlenv modules the nodes import, (line, why) of each import the walk cannot read)."""
    found: set[str] = set()
    unreadable: list[tuple[int, str]] = []
    named, read = _importers(nodes)
    called = {id(_callee(n)) for n in nodes if isinstance(n, ast.Call)}
    names = {"fdlenv" + (f".{m}" if m else ""): m for m in known}

    def count(pattern: str) -> None:
        found.update(m for full, m in names.items() if re.fullmatch(pattern, full))

    for node in nodes:
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = pkg[:len(pkg) - (node.level - 1)] if node.level > 1 else pkg
                target = ".".join(base + (node.module.split(".") if node.module else []))
            else:
                absolute = _absolute(node.module or "")
                if absolute is None:
                    continue
                target = absolute
            for alias in node.names:
                sub = f"{target}.{alias.name}" if target else alias.name
                found.add(sub if sub in known else target)
        elif isinstance(node, ast.Import):
            found |= {t for t in (_absolute(a.name) for a in node.names) if t is not None}
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in EXECS:
            code = _str(_arg(node, 0, "source"))
            try:
                inner = _nodes(code) if code is not None else None
            except SyntaxError:
                inner = None
            if inner is None:
                unreadable.append((node.lineno, f"runs code made at run time ({node.func.id})"))
            else:
                deps, bad = _read(inner, pkg, known)
                found |= deps
                unreadable += [(node.lineno, why) for _, why in bad]
        elif isinstance(node, ast.Call):
            f = _callee(node)
            func = named.get(f.id) if isinstance(f, ast.Name) else \
                f.attr if isinstance(f, ast.Attribute) and f.attr in IMPORT_FUNCS else None
            if func is None:
                continue
            targets = _call_targets(node, func, pkg)
            if targets is None:
                unreadable.append((node.lineno, UNREADABLE))
            for t in targets or ():
                count(t)
        elif isinstance(node, ast.Constant) and node.value in IMPORT_FUNCS:
            unreadable.append((node.lineno, f"names an import function by a string ({node.value!r}); "
                                            "call it where it is named"))
        elif (isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load) and (node.id in named or node.id in EXECS)
              or isinstance(node, ast.Attribute) and node.attr in IMPORT_FUNCS) \
                and id(node) not in called and id(node) not in read:
            unreadable.append((node.lineno, f"passes an import function ({_func_name(node)}) where the walk "
                                            "cannot follow it; call it where it is named"))
    return found, unreadable


def imports(mod: str, path: Path, known: set[str]) -> tuple[set[str], list[str], list[tuple[str, int]]]:
    """(fdlenv modules `mod` imports, findings, (kind, line) of its import machinery)."""
    pkg = mod.split(".") if path.name == "__init__.py" else mod.split(".")[:-1]
    pkg = [p for p in pkg if p]
    nodes = _nodes(path.read_text())
    found, bad = _read(nodes, pkg, known)
    found.discard(mod)
    return found & known, [f"fdlenv.{mod}:{line} {why}" for line, why in bad], machinery(nodes)


def graph(pkg: Path = PKG) -> tuple[dict[str, set[str]], list[str], dict[str, list[tuple[str, int]]]]:
    """(the import graph, the walk's findings, each module's uses of import machinery)."""
    mods = modules(pkg)
    g, problems, uses = {}, [], {}
    for m, p in mods.items():
        g[m], bad, uses[m] = imports(m, p, set(mods))
        problems += bad
    return g, problems, uses
