"""Reading the YAML people write (fdl.yml, env files, run manifests, locks): strict and fast.

- libyaml's C parser when PyYAML has it (a 4 MB file in well under a second;
  the pure-Python one takes minutes), the same safe types either way;
- aliases (`*name`) are refused: a ten-line anchor bomb expands to gigabytes
  the moment anything walks or prints it, and no fdlenv file needs them;
- a key given twice in one mapping is refused (YAML says keys are unique;
  PyYAML would silently keep the last one);
- every refusal is a `YamlError` naming the file and the line, which callers
  turn into their own one-line `error:` (the field they were reading).
PyYAML is imported only when a file is read.
"""

from __future__ import annotations

from pathlib import Path

TYPE_CHECKING = False
if TYPE_CHECKING:
    from typing import Any

    from collections.abc import Hashable

    from yaml import MappingNode, Node, SafeLoader


class YamlError(ValueError):
    """A file that is not YAML fdlenv accepts; `str()` names the file and the line."""

    def __init__(self, source: object, line: int | None, problem: str):
        self.source, self.line, self.problem = str(source), line, problem
        super().__init__(f"{source}" + (f", line {line}" if line else "") + f": {problem}")

    @property
    def where(self) -> str:
        """`line N: problem` (for a caller that names the file itself)."""
        return (f"line {self.line}: " if self.line else "") + self.problem


_LOADER: type[SafeLoader] | None = None


def _loader() -> type[SafeLoader]:
    global _LOADER
    if _LOADER is None:
        import yaml
        from yaml.constructor import ConstructorError
        from yaml.nodes import ScalarNode

        if TYPE_CHECKING:
            from yaml import SafeLoader as Base
        else:
            Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

        class Strict(Base):
            def construct_object(self, node: Node, deep: bool = False) -> Any:
                if node in self.constructed_objects or node in self.recursive_objects:
                    raise ConstructorError(None, None, "an alias (*name) is not accepted", node.start_mark)
                return super().construct_object(node, deep)

            def construct_mapping(self, node: MappingNode, deep: bool = False) -> dict[Hashable, Any]:
                seen: set[object] = set()
                for key, _value in node.value:
                    if key.tag == "tag:yaml.org,2002:merge":
                        raise ConstructorError(None, None, "a merge key (<<) is not accepted", key.start_mark)
                    if isinstance(key, ScalarNode):
                        if key.value in seen:
                            raise ConstructorError(None, None, f"the key {key.value!r} is given twice",
                                                   key.start_mark)
                        seen.add(key.value)
                return super().construct_mapping(node, deep)

        _LOADER = Strict
    return _LOADER


def loads(text: str, source: str | Path = "<text>") -> Any:
    """The document in `text` (None when empty); YamlError names `source` and the line."""
    import yaml

    check_nesting(text, source)
    loader = _loader()(text)
    try:
        if "&" in text and "*" in text:   # may hold an alias: find where it is used, for the message
            for event in yaml.parse(text, Loader=loader.__class__.__mro__[1]):
                if isinstance(event, yaml.AliasEvent):
                    mark = event.start_mark
                    raise YamlError(source, mark.line + 1 if mark else None,
                                    f"an alias (*{event.anchor}) is not accepted; write the value out")
        return loader.get_single_data()
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None) or getattr(e, "context_mark", None)
        what = " ".join(str(getattr(e, "problem", None) or e).split())
        if mark is not None and (tab := tab_near(text, mark.line)) is not None:
            raise YamlError(source, tab[0], f"a tab at column {tab[1]}: YAML indents with spaces only; "
                            "replace the tab with spaces") from None
        raise YamlError(source, mark.line + 1 if mark is not None else None, what) from None
    finally:
        loader.dispose()


def tab_near(text: str, line0: int) -> tuple[int, int] | None:
    """(line, column), 1-based, of a tab outside quotes on the 0-based line `line0` a parse
    error marks, or the line before it (a tab-indented value is often reported where the next
    token starts). libyaml names a tab only as "a character that cannot start any token"."""
    lines = text.split("\n")
    for n in (line0, line0 - 1):
        if 0 <= n < len(lines):
            quote = ""
            for col, ch in enumerate(lines[n]):
                if quote:
                    quote = "" if ch == quote else quote
                elif ch in "'\"":
                    quote = ch
                elif ch == "#":
                    break
                elif ch == "\t":
                    return n + 1, col + 1
    return None


MAX_DEPTH = 256   # deeper than any config; libyaml's recursive composer overflows the C stack far below 100,000


def check_nesting(text: str, source: object) -> None:
    """Refuse flow collections nested deeper than MAX_DEPTH (`[[[[...`): libyaml would crash the
    interpreter, not raise. Counted only when there are that many brackets at all; quoted
    brackets count too, which only makes the bound stricter."""
    if text.count("[") + text.count("{") <= MAX_DEPTH:
        return
    depth, line = 0, 1
    for ch in text:
        if ch in "[{":
            depth += 1
            if depth > MAX_DEPTH:
                raise YamlError(source, line, f"collections nested more than {MAX_DEPTH} deep")
        elif ch in "]}":
            depth = max(depth - 1, 0)
        elif ch == "\n":
            line += 1


def load(path: str | Path) -> Any:
    """`loads` of a UTF-8 file."""
    try:
        text = Path(path).read_bytes().decode("utf-8")
    except UnicodeDecodeError as e:
        raise YamlError(path, None, f"not UTF-8 text (byte {e.start})") from None
    return loads(text, path)
