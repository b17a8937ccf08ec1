"""Where fdlenv keeps things: the home layout (docs/ARCHITECTURE.md).

All of it lives on one filesystem under one root, so that the package cache
can hard-link into every environment and every publish is a same-filesystem
rename. `Home` is a plain value; which root a command uses is settled by
`fdlenv.app.settings` (`--home` > `$FLODL_HOME` > fdl.yml's `fdlenv: home:` > `~/.flodl`).
"""

from __future__ import annotations

from collections import namedtuple
from pathlib import Path


class Home(namedtuple("Home", "root")):
    """The home root (a Path) and its parts; a namedtuple: it is on the re-dial path.
    `Home(path)` takes the root as given; `settings.resolve` makes it absolute."""

    __slots__ = ()

    pkgs = property(lambda self: self.root / "pkgs")
    archives = property(lambda self: self.root / "archives")
    envs = property(lambda self: self.root / "envs")
    staging = property(lambda self: self.root / "staging")
    locks = property(lambda self: self.root / "locks")
    roots = property(lambda self: self.root / "roots")
    cache = property(lambda self: self.root / "cache")
    libtorch = property(lambda self: self.root / "libtorch")
    source = property(lambda self: self.root / "source")
    builds = property(lambda self: self.root / "builds")
    # The local channel `fdlenv pack` fills; its last path component is the
    # channel alias `flodl` that envs/*.yml name, so `--mirror flodl=URL` maps it.
    channel = property(lambda self: self.root / "channels" / "flodl")

    def wheel_entry(self, sha256: str) -> Path:
        """A wheel's package-cache entry (`store.wheels`), complete once it exists (published by
        rename). Here, not in the store's fetch modules: the link-only realise reads none."""
        return self.pkgs / f"whl-{sha256}"

    def ensure(self, *dirs: Path) -> None:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
