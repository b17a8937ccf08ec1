"""A build tree per variant for `fdlenv run` and `shell-hook`, as `fdlenv build` keeps one.

Why: flodl-sys's build script reruns when LIBTORCH_PATH changes, so one cargo
target dir shared by two variants rebuilds its C++ on every switch. In order:
`cargo_root` finds the workspace the cwd is in (as cargo does), `build_tree` sets
CARGO_TARGET_DIR to `<root>/target/fdlenv-<variant>` there (the dir `fdlenv build`
uses) unless the caller set one. It depends on the cwd, so it is never part of a
memo: the slow path and `hotpath`'s replay both call it (only `os` is imported).
"""

from __future__ import annotations

import os

TARGET_DIR = "CARGO_TARGET_DIR"


def cargo_root(cwd: str) -> str | None:
    """The root of the cargo workspace `cwd` is in, as cargo finds it: the nearest Cargo.toml
    up from `cwd`, or an enclosing one with a `[workspace]` table; None outside any crate."""
    d, package = cwd, None
    while True:
        if os.path.isfile(manifest := os.path.join(d, "Cargo.toml")):
            package = package or d
            try:
                with open(manifest, encoding="utf-8", errors="replace") as f:
                    if any(ln.strip().startswith(("[workspace]", "[workspace.")) for ln in f):
                        return d
            except OSError:
                pass
        if (up := os.path.dirname(d)) == d:
            return package
        d = up


def build_tree(environ: dict, base, variant: str | None, cwd: str) -> dict:
    """`environ` with cargo's tree per variant, as `fdlenv build` keeps: CARGO_TARGET_DIR =
    `<cargo_root>/target/fdlenv-<variant>`, unless `base` (the caller's environment, a shell
    activation undone) names one, `cwd` is in no crate, or the variant is not fdlenv's."""
    if variant and TARGET_DIR not in base and (root := cargo_root(cwd)) is not None:
        environ[TARGET_DIR] = os.path.join(root, "target", f"fdlenv-{variant}")
    return environ
