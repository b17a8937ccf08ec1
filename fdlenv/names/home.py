"""Where fdlenv keeps things: the home layout (docs/ARCHITECTURE.md).

All of it lives on one filesystem under one root, so that the package cache
can hard-link into every environment and every publish is a same-filesystem
rename. `Home` is a plain value; which root a command uses is settled by
`fdlenv.app.settings` (`--home` > `$FLODL_HOME` > fdl.yml's `fdlenv: home:` > `~/.flodl`).
"""

from __future__ import annotations

from pathlib import Path

from ..base.record import Record


class Home(Record):
    """The home root (a Path) and its parts; a `Record` (a tuple at run time): it is on the
    re-dial path. `Home(path)` takes the root as given; `settings.resolve` makes it absolute."""

    root: Path

    @property
    def pkgs(self) -> Path:
        return self.root / "pkgs"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    @property
    def envs(self) -> Path:
        return self.root / "envs"

    @property
    def staging(self) -> Path:
        return self.root / "staging"

    @property
    def locks(self) -> Path:
        return self.root / "locks"

    @property
    def roots(self) -> Path:
        return self.root / "roots"

    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def libtorch(self) -> Path:
        return self.root / "libtorch"

    @property
    def source(self) -> Path:
        return self.root / "source"

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    @property
    def channel(self) -> Path:
        """The local channel `fdlenv pack` fills; its last path component is the channel alias
        `flodl` that envs/*.yml name, so `--mirror flodl=URL` maps it."""
        return self.root / "channels" / "flodl"

    def wheel_entry(self, sha256: str) -> Path:
        """A wheel's package-cache entry (`store.wheels`), complete once it exists (published by
        rename). Here, not in the store's fetch modules: the link-only realise reads none."""
        return self.pkgs / f"whl-{sha256}"

    def ensure(self, *dirs: Path) -> None:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)
