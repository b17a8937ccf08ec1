"""docs/FAILURES.md's table of failure classes names, for every row, a test that exists.

The table is the one statement of how each failure is classed (exit 1 or 2) and what
fixes it; a row whose test is gone, renamed or misspelt would claim a coverage the
suite no longer has. This reads the rows between the table's markers, parses each
`tests/<file>.py::<name>` and checks, with `ast`, that the file defines a test
function of that name (a module-level `def`, or one in a class). A row names at least
one test, or `TODO(PART)` while another part of the work supplies it. The checker is a
function of a text and a tests directory, so the way it fails has a test of its own.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
DOC = ROOT / "docs" / "FAILURES.md"
BEGIN, END = "<!-- failure table: read by tests/test_failure_table.py -->", "<!-- end of failure table -->"
REF = re.compile(r"tests/([A-Za-z0-9_]+)\.py::([A-Za-z_][A-Za-z0-9_]*)")
TODO = re.compile(r"TODO\([A-Z]+\)")
COLUMNS = ("class", "example message", "exit", "what fixes it", "flodl", "fdlenv's addition", "test")


def rows(text: str) -> list[list[str]]:
    """The table's data rows, as cells (header and separator left out)."""
    assert BEGIN in text and END in text, "the failure table's markers are missing"
    body = text.split(BEGIN, 1)[1].split(END, 1)[0]
    out = []
    for line in body.strip().splitlines():
        cells = [c.strip() for c in re.split(r"(?<!\\)\|", line.strip().strip("|"))]
        if cells == list(COLUMNS) or set("".join(cells)) <= set("- "):
            continue
        out.append(cells)
    return out


def defined_tests(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name.startswith("test"):
            names.add(node.name)
    return names


def findings(text: str, tests: Path) -> list[str]:
    """What is wrong with the table: a row of the wrong width, a row naming no test, a test
    that is not defined where the row says."""
    out, seen = [], {}
    for cells in rows(text):
        if len(cells) != len(COLUMNS):
            out.append(f"row {cells[0]!r}: {len(cells)} cells, expected {len(COLUMNS)}")
            continue
        refs = REF.findall(cells[-1])
        if not refs and not TODO.search(cells[-1]):
            out.append(f"row {cells[0]!r}: names no test (tests/<file>.py::<name>) and no TODO(PART)")
        if not re.fullmatch(r"[0-9]+( \(.*\))?|the agent's (code|status; 1)", cells[2]):
            out.append(f"row {cells[0]!r}: exit {cells[2]!r} is not an exit code")
        for module, name in refs:
            path = tests / f"{module}.py"
            if not path.is_file():
                out.append(f"row {cells[0]!r}: tests/{module}.py does not exist")
                continue
            if path not in seen:
                seen[path] = defined_tests(path)
            if name not in seen[path]:
                out.append(f"row {cells[0]!r}: tests/{module}.py defines no {name}")
    return out


def test_every_row_of_the_failure_table_names_a_test_that_exists():
    text = DOC.read_text()
    assert len(rows(text)) >= 40             # the whole table was read, not an empty slice of it
    assert findings(text, ROOT / "tests") == []


def test_both_exit_classes_are_in_the_table():
    exits = {cells[2] for cells in rows(DOC.read_text())}
    assert {"1", "2"} <= exits


def test_a_row_naming_a_missing_test_or_none_is_a_finding(tmp_path):
    (tmp_path / "test_there.py").write_text("def test_present():\n    pass\n\n\nclass TestK:\n"
                                            "    def test_in_a_class(self):\n        pass\n")
    head = "| " + " | ".join(COLUMNS) + " |\n| " + " | ".join("---" for _ in COLUMNS) + " |\n"

    def table(*lines: str) -> str:
        return f"{BEGIN}\n{head}" + "".join(line + "\n" for line in lines) + END

    good = table("| a | `m` | 2 | x | permanent | — | `tests/test_there.py::test_present` |",
                 "| b | `m` | 1 | x | — | — | `tests/test_there.py::test_in_a_class` |",
                 "| c | `m` | 1 | x | — | — | TODO(INDEX) |")
    assert findings(good, tmp_path) == []
    bad = table("| a | `m` | 2 | x | permanent | — | `tests/test_there.py::test_absent` |",
                "| b | `m` | 2 | x | permanent | — | `tests/test_gone.py::test_present` |",
                "| c | `m` | 2 | x | permanent | — | nothing |",
                "| d | `m` | two | x | permanent | — | `tests/test_there.py::test_present` |",
                "| e | `m` | 2 | x |")
    got = findings(bad, tmp_path)
    assert got == ["row 'a': tests/test_there.py defines no test_absent",
                   "row 'b': tests/test_gone.py does not exist",
                   "row 'c': names no test (tests/<file>.py::<name>) and no TODO(PART)",
                   "row 'd': exit 'two' is not an exit code",
                   "row 'e': 4 cells, expected 7"]
