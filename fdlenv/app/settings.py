"""One resolver for the store's settings: home, mirrors, lock and platform.

Every command that touches the store (env, run, shell-hook, build, lock,
pack, walkthrough, prepare, join) asks this module, so a setting means the
same everywhere. For each: flags > environment > fdl.yml's `fdlenv:` block >
defaults.
- home: `--home` > `$FLODL_HOME` > `fdlenv: home:` (relative to fdl.yml) > `~/.flodl`; where
  it came from is recorded for the errors (`errors.record_home`), so a
  permission failure inside the home names it, its origin, its owner and the way out;
- mirrors: `fdlenv: mirrors:`, then each `--mirror NAME=URL` over it;
- locks: one view, a variant from the first that holds it: `--lock` >
  `fdlenv: lock:` > `conda-lock.yml` beside fdl.yml > at the fetched source
  tree's root > the home's on-demand locks > the lock shipped with fdlenv
  (`lockview.LockView`);
- frozen (never lock on demand): `--frozen` > `FDLENV_FROZEN=1` > `fdlenv: frozen: true`;
- platform: this machine's (`linux-64`, `linux-aarch64`, ...).

fdl.yml is read only when discovery finds one, so the re-dial path without a
project pays for no YAML. `resolve` is pure when `project` and `environ` are
given (the join resolver passes both).
"""

from __future__ import annotations

import os
from pathlib import Path

from ..base.record import Record
from ..index import mirrors as _mirrors
from ..base.errors import Fail, record_home
from ..names.home import Home
from ..names.roots import home_root
from .lockview import LockView

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Mapping

    from ..config.model import Project
    from ..names.variants import Libtorch


class _Discover:
    """The type of `_LOAD`: `project` not given, so fdl.yml is discovered from the cwd and loaded."""


_LOAD = _Discover()


class Settings(Record):
    """What `resolve` settled: the Home, the mirrors (NAME -> URL), `lock_given` (--lock, else
    `fdlenv: lock:` anchored at fdl.yml; None: discover), `project` (the loaded fdl.yml, a
    `config.model.Project`, or None) and `frozen` (never lock on demand). Where the home came
    from is recorded for the errors that name it (`errors.record_home`). A Record: it is
    on the re-dial path."""

    home: Home
    mirrors: dict[str, str]
    lock_given: str | None
    project: Project | None
    frozen: bool = False

    def view(self, source_root: Path | None = None) -> LockView:
        """Every lock this command sees, in order (`lockview.LockView`)."""
        return LockView(self.home, self.lock_given, self.project_root, source_root)

    @property
    def project_root(self) -> Path | None:
        return self.project.root if self.project is not None else None

    @property
    def platform(self) -> str:
        from ..names.platforms import this_platform
        return this_platform()


class StoreAsk(Record):
    """What a store command (env realize/use, run, shell-hook) asks, as its front read it: the
    variant (parsed once; None: the active one), --home, --lock, each --mirror, --frozen."""
    libtorch: Libtorch | None = None
    home: str | None = None
    lock: str | None = None
    mirrors: tuple[str, ...] = ()
    frozen: bool = False

    @property
    def variant(self) -> str | None:
        """The canonical variant named (None: none, or `auto`, which only routing settles)."""
        return None if self.libtorch is None or self.libtorch.auto else self.libtorch.name


def settings_for(ask: StoreAsk) -> Settings:
    """`resolve` of a store command's flags."""
    return resolve(ask.home, list(ask.mirrors), ask.lock, frozen=ask.frozen)


def resolve(home: str | None = None, mirrors: list[str] | None = None, lock: str | None = None, *,
            project: Project | None | _Discover = _LOAD, environ: Mapping[str, str] | None = None,
            frozen: bool = False) -> Settings:
    """Settle home, mirrors and lock from flags (`--home`, `--mirror`, `--lock`), the environment
    and fdl.yml's `fdlenv:` block. `project`: a loaded fdl.yml, None for none, default: discover."""
    env = os.environ if environ is None else environ
    if isinstance(project, _Discover):
        project = load_project_if_any()
    block = project.fdlenv if project is not None else None
    # (value, the field a bad value is blamed on, where the home came from for `record_home`)
    given = ((home, "--home", "--home"),
             ((env.get("FLODL_HOME") or "").strip(), "$FLODL_HOME", "$FLODL_HOME"),
             (block.home if block else None, "fdl.yml's fdlenv.home",
              f"fdl.yml's `fdlenv: home:` ({project.path if project is not None else ''})"))
    raw, field, origin = next((g for g in given if g[0]), (None, "the default home", "the default home (~/.flodl)"))
    root = Path(home_root(raw, env))
    check_home_root(root, field)
    record_home(str(root.absolute()), origin)
    return Settings(
        home=Home(root.absolute()),
        mirrors=_mirrors.parse(mirrors, dict(block.mirrors) if block else {}),
        lock_given=lock or (block.lock if block else None),
        project=project,
        frozen=bool(frozen) or _env_true(env.get("FDLENV_FROZEN")) or bool(block and block.frozen),
    )


def check_home_root(root: Path, field: str) -> None:
    """A home that cannot be one is an error naming it, not an empty listing: a file, a path
    under a file (`/etc/passwd/x`), or a directory this user may not read. A missing one is
    fine (made when first written)."""
    accepted = "accepted: a directory fdlenv may write (made when missing)"
    try:
        st = os.stat(root)
    except NotADirectoryError:
        up = next((p for p in root.parents if p.exists() and not p.is_dir()), root.parent)
        raise Fail.permanent(f"{field}: {root} cannot be a home: {up} is a file, not a directory; "
                             f"{accepted}") from None
    except PermissionError:
        raise Fail.permanent(f"{field}: {root} cannot be read (permission denied on a directory "
                             f"above it); {accepted}") from None
    except FileNotFoundError:
        return
    import stat
    if not stat.S_ISDIR(st.st_mode):
        raise Fail.permanent(f"{field}: {root} is not a directory; {accepted}")
    if not os.access(root, os.R_OK | os.X_OK):
        raise Fail.permanent(f"{field}: {root} cannot be read by this user (mode "
                             f"{stat.S_IMODE(st.st_mode):o}); {accepted}")


def _env_true(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "on")


def load_project_if_any() -> Project | None:
    """fdl.yml from the cwd up, or None; the config loader is imported only when one exists."""
    from ..config.fdlfile import find_config

    if find_config() is None:
        return None
    from ..config.load import load_project
    return load_project()
