"""How each shell says "set this variable" and "unset that one": `shell-hook`'s output.

bash, zsh and sh (dash, busybox) share the POSIX form (`export VAR='v'`,
`unset VAR`); fish has its own (`set -gx VAR 'v'`, `set -e VAR`; a variable
whose name ends in PATH is a path list there, and fish splits the colon
string itself). Values are quoted so the shell reads them back byte for
byte. Only exported variables are ever written: a prompt (PS1, fish's
fish_prompt) is the shell's own and is never touched.
"""

from __future__ import annotations

import shlex

SHELLS = ("bash", "zsh", "fish", "sh")


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render(shell: str, changes: dict[str, str | None]) -> str:
    """`changes`: VAR -> new value, or None to unset. Unsets first, then sets, by name."""
    lines = []
    for var in sorted(k for k, v in changes.items() if v is None):
        lines.append(f"set -e {var}" if shell == "fish" else f"unset {var}")
    for var in sorted(k for k, v in changes.items() if v is not None):
        value = changes[var]
        lines.append(f"set -gx {var} {_fish_quote(value)}" if shell == "fish"
                     else f"export {var}={shlex.quote(value)}")
    return "".join(line + "\n" for line in lines)
