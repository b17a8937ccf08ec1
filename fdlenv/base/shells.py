"""How each shell says "set this variable" and "unset that one": `shell-hook`'s output.

bash, zsh and sh (dash, busybox) share the POSIX form (`export VAR='v'`,
`unset VAR`); fish has its own (`set -gx VAR 'v'`, `set -e VAR`; a variable
whose name ends in PATH is a path list there, and fish splits the colon
string itself). Values are quoted so the shell reads them back byte for
byte. Only exported variables are ever written: a prompt (PS1, fish's
fish_prompt) is the shell's own and is never touched. A name is data too: one
that is not `[A-Za-z_][A-Za-z0-9_]*` (from a hand-made `_FDLENV_STATE`, an
activate.d script, a foreign environment) is never printed.
"""

# What every shell here reads as is, unquoted: shlex.quote's set without `=` (zsh reads an
# unquoted word that begins with `=` as a command lookup, `=ls` -> /usr/bin/ls, and a
# `=nocmd` aborts the eval; `~` is not in the set either, so it is always quoted).
_PLAIN = frozenset("abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_@%+:,./-")


def valid_name(name: str) -> bool:
    """A name every shell reads as one variable name and nothing else: `[A-Za-z_][A-Za-z0-9_]*`."""
    return name.isascii() and name.isidentifier()


def quote(value: str) -> str:
    """`value` as bash, zsh and sh read it back byte for byte: shlex.quote's form, except that
    a value holding `=` is quoted too (zsh's `=word` expansion)."""
    if value and _PLAIN.issuperset(value):
        return value
    return "'" + value.replace("'", "'\"'\"'") + "'"


def _fish_quote(value: str) -> str:
    return "'" + value.replace("\\", "\\\\").replace("'", "\\'") + "'"


def render(shell: str, changes: dict[str, str | None]) -> str:
    """`changes`: VAR -> new value, or None to unset. Unsets first, then sets, by name."""
    lines = []
    changes = {k: v for k, v in changes.items() if valid_name(k)}
    for var in sorted(k for k, v in changes.items() if v is None):
        lines.append(f"set -e {var}" if shell == "fish" else f"unset {var}")
    for var, value in sorted((k, v) for k, v in changes.items() if v is not None):
        lines.append(f"set -gx {var} {_fish_quote(value)}" if shell == "fish"
                     else f"export {var}={quote(value)}")
    return "".join(line + "\n" for line in lines)
