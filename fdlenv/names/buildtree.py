"""A build tree per variant for `fdlenv run` and `shell-hook`, as `fdlenv build` keeps one.

Why: flodl-sys's build script reruns when LIBTORCH_PATH changes, so one cargo
target dir shared by two variants rebuilds its C++ on every switch. In order:
`cargo_root` finds the workspace the cwd is in (as cargo does), `build_tree` sets
CARGO_TARGET_DIR to `<root>/target/fdlenv-<variant>` there (the dir `fdlenv build`
uses) unless the user chose one (`users_target_dir`: the environment, or
`target-dir` in a cargo config file). It depends on the cwd, so it is never part of a
memo: the slow path and `hot.replay` both call it (only `os` is imported).

A shell outlives the directory its hook ran in, so `shell_tree` names the trees
relative (`target/fdlenv-<variant>`, `build/fdlenv-<variant>`): cargo reads a relative
CARGO_TARGET_DIR from the environment against the directory it runs in, and
`cmake -B` its build dir likewise, so after `cd other-crate` the build lands in
other-crate's tree, never in the one of the crate (or `~`) where `.bashrc` ran.
`in_tree` is what `run` does with a path that is not there: `./target/release/train`
after a build into the variant's tree is `target/fdlenv-<variant>/release/train`.
"""

import os

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Iterator, Mapping

TARGET_DIR = "CARGO_TARGET_DIR"
BUILD_DIR = "FDLENV_BUILD_DIR"   # a CMake build dir per variant
_CONFIGS = ("config.toml", "config")   # cargo's config files in a `.cargo` dir


def _has_line(path: str, prefixes: tuple[str, ...]) -> bool:
    try:
        with open(path, encoding="utf-8", errors="replace") as f:
            return any(ln.strip().startswith(prefixes) for ln in f)
    except OSError:
        return False


def _ancestors(cwd: str) -> "Iterator[str]":
    d = cwd
    while True:
        yield d
        if (up := os.path.dirname(d)) == d:
            return
        d = up


def cargo_root(cwd: str) -> str | None:
    """The root of the cargo workspace `cwd` is in, as cargo finds it: the nearest Cargo.toml
    up from `cwd`, or an enclosing one with a `[workspace]` table; None outside any crate."""
    package: str | None = None
    for d in _ancestors(cwd):
        if os.path.isfile(manifest := os.path.join(d, "Cargo.toml")):
            package = package or d
            if _has_line(manifest, ("[workspace]", "[workspace.")):
                return d
    return package


def users_target_dir(base: "Mapping[str, str]", cwd: str) -> bool:
    """Whether the user chose cargo's target dir: CARGO_TARGET_DIR or CARGO_BUILD_TARGET_DIR in
    `base`, or `target-dir` in a cargo config file cargo reads from `cwd` (`.cargo/config.toml`
    in it or above, and in `$CARGO_HOME`, default `~/.cargo`)."""
    if TARGET_DIR in base or "CARGO_BUILD_TARGET_DIR" in base:
        return True
    home = base.get("CARGO_HOME") or os.path.join(base.get("HOME") or os.path.expanduser("~"), ".cargo")
    dirs = [os.path.join(d, ".cargo") for d in _ancestors(cwd)] + [home]
    return any(_has_line(os.path.join(d, name), ("target-dir", "build.target-dir"))
               for d in dirs for name in _CONFIGS)


def tree_dirs(root: str, variant: str) -> tuple[str, str]:
    """(cargo's target dir, the CMake build dir) of `variant` under a project's `root`: the one
    naming `fdlenv build`, `run` and `shell-hook` share."""
    return os.path.join(root, "target", f"fdlenv-{variant}"), os.path.join(root, "build", f"fdlenv-{variant}")


def build_tree(environ: dict[str, str], base: "Mapping[str, str]", variant: str | None, cwd: str) -> dict[str, str]:
    """`environ` with a tree per variant, as `fdlenv build` keeps: CARGO_TARGET_DIR =
    `<cargo_root>/target/fdlenv-<variant>`, unless the user chose a target dir
    (`users_target_dir`; `base` is the caller's environment, a shell activation undone), `cwd`
    is in no crate, or the variant is not fdlenv's; and BUILD_DIR (`cmake -B
    "$FDLENV_BUILD_DIR"`) = `<cargo_root or cwd>/build/fdlenv-<variant>` unless `base` sets it."""
    if not variant:
        return environ
    root = cargo_root(cwd)
    target, build = tree_dirs(root or cwd, variant)
    if BUILD_DIR not in base:
        environ[BUILD_DIR] = build
    if root is not None and not users_target_dir(base, cwd):
        environ[TARGET_DIR] = target
    return environ


def shell_tree(environ: dict[str, str], base: "Mapping[str, str]", variant: str | None) -> dict[str, str]:
    """`build_tree` for a shell: the same trees, named relative to wherever a build runs (cargo
    reads a relative CARGO_TARGET_DIR against its cwd), unless the user chose them (the
    environment, or `target-dir` in `$CARGO_HOME`'s config; a project's own `.cargo/config.toml`
    is not seen here, since the shell moves on: set CARGO_TARGET_DIR yourself to keep it)."""
    if not variant:
        return environ
    if BUILD_DIR not in base:
        environ[BUILD_DIR] = os.path.join("build", f"fdlenv-{variant}")
    if not users_target_dir(base, "/"):
        environ[TARGET_DIR] = os.path.join("target", f"fdlenv-{variant}")
    return environ


def in_tree(path: str, environ: "Mapping[str, str]", cwd: str) -> str | None:
    """Where `path` (`./target/release/train`, under the crate's default `target/`) is in the
    cargo target dir `environ` names (the variant's tree), when it is not where asked but is
    there as an executable file; None otherwise."""
    tree = environ.get(TARGET_DIR)
    if not tree or "/" not in path:
        return None
    root = cargo_root(cwd) or cwd
    wanted = os.path.normpath(os.path.join(cwd, path))
    default = os.path.join(root, "target")
    if not wanted.startswith(default + os.sep):
        return None
    found = os.path.join(os.path.join(cwd, tree), os.path.relpath(wanted, default))
    if os.path.normpath(found) != wanted and os.path.isfile(found) and os.access(found, os.X_OK):
        return found
    return None
