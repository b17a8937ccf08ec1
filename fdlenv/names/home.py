"""Where fdlenv keeps things: the home layout (docs/ARCHITECTURE.md), each name spelled once.

All of it lives on one filesystem under one root, so that the package cache
can hard-link into every environment and every publish is a same-filesystem
rename. `Home` is a plain value; which root a command uses is settled by
`fdlenv.app.settings` (`--home` > `$FLODL_HOME` > fdl.yml's `fdlenv: home:` > `~/.flodl`).

Every path under the home is a member of `Home` (the parts the os-only replay reads too are
spelled in `names.roots`, the lease file in `names.leasefile`, and `Home` builds its members
from those), so no other module spells one. In order, what keeps it so:
1. `layout()`: each member's claim, the glob of what it names relative to the root (made by
   the member itself), and either `kept` (why `env gc` never takes it) or nothing (a sweep
   collects what is stale);
2. `Home.claims(path)`: the member that owns a path, or None: the home test walks a home after
   every command has run and fails on a path no member claims;
3. `Living` and `Sweep`: what `env gc` found alive, handed to each owner's sweep (`store.gc`
   runs the store's, the command hands in those of the layers above), and each sweep names
   the members it covers (`Sweeper.covers`), so a claim nobody sweeps nor keeps is a finding.
"""

from __future__ import annotations

from pathlib import Path

from ..base.record import Record
from . import roots
from .leasefile import lease_paths

TYPE_CHECKING = False
if TYPE_CHECKING:
    from collections.abc import Callable, Iterable


class Home(Record):
    """The home root (a Path) and its parts; a `Record` (a tuple at run time): it is on the
    re-dial path. `Home(path)` takes the root as given; `settings.resolve` makes it absolute."""

    root: Path

    # -- the store: envs, the package cache, downloads, staging
    @property
    def pkgs(self) -> Path:
        """rattler's package cache and fdlenv's entries in it (`wheel_entry`, `store.cudahome`'s
        templates), shared by every env through hard links."""
        return self.root / "pkgs"

    def wheel_entry(self, sha256: str) -> Path:
        """A wheel's package-cache entry (`store.wheels`), complete once it exists (published by
        rename). Here, not in the store's fetch modules: the link-only realise reads none."""
        return self.pkgs / f"whl-{sha256}"

    def wheel_temp(self, sha256: str, pid: int | str, thread: int | str) -> Path:
        """Where one thread extracts a wheel before publishing it as its `wheel_entry`."""
        return self.pkgs / f".whl-{sha256}.{pid}.{thread}"

    @property
    def archives(self) -> Path:
        return self.root / "archives"

    def archive(self, sha256: str, ext: str) -> Path:
        """A downloaded archive, by its sha256 and its file's extension (`.conda`, `.whl`)."""
        return self.archives / f"{sha256}{ext}"

    def partial(self, sha256: str) -> Path:
        """A wheel download under way (`store.wheelfile`: resumed after an interruption)."""
        return self.archives / f".{sha256}.part"

    @property
    def envs(self) -> Path:
        return self.root / roots.ENVS

    def env_dir(self, name: str) -> Path:
        """An env, `<variant>-<key16>` (`store.env.env_dirname`)."""
        return self.envs / name

    @property
    def staging(self) -> Path:
        """Build areas (`install`) and what a delete moved aside (`atomic.discard`)."""
        return self.root / "staging"

    def stage(self, name: str) -> Path:
        return self.staging / name

    # -- locks and leases
    @property
    def locks(self) -> Path:
        return self.root / roots.LOCKS

    @property
    def store_lock(self) -> Path:
        """Held shared by every realise, exclusively by `env gc` (`store.leases`)."""
        return self.root / roots.STORE_LOCK

    @property
    def pkgs_lock(self) -> Path:
        """Held shared by every install, so no cleaner removes a cache temp dir in use."""
        return self.locks / "pkgs.lock"

    def key_lock(self, key: str) -> Path:
        """One realise (or heal) of env key `key`; its holder file beside it (`base.flocks`)."""
        return self.locks / f"{key}.lock"

    def wheel_lock(self, sha256: str) -> Path:
        return self.locks / f"whl-{sha256}.lock"

    def build_lock(self, key: str) -> Path:
        return self.locks / f"build-{key}.lock"

    def source_lock(self, spec_hash: str) -> Path:
        """Held from a source's fetch through its build (`source.fetch.claimed`)."""
        return self.locks / f"source-{spec_hash}.lock"

    def ondemand_lock(self, variant: str) -> Path:
        return self.locks / f"ondemand-{variant}.lock"

    def lease(self, env_name: str) -> Path:
        """An env's lease in the home (`names.leasefile`, which also names the runtime dir's)."""
        return Path(lease_paths(str(self.root), env_name)[0])

    # -- pointers
    @property
    def roots(self) -> Path:
        """GC roots, `<variant>-<h12>` per (lock file path, variant) (`store.pointers`)."""
        return self.root / "roots"

    @property
    def libtorch(self) -> Path:
        """flodl's own: its downloads and builds, and the pointers fdlenv adds beside them."""
        return self.root / roots.LIBTORCH

    @property
    def precompiled(self) -> Path:
        return self.root / roots.PRECOMPILED

    @property
    def active_pointer(self) -> Path:
        """flodl's `.active`: `precompiled/<dir>` of the active libtorch."""
        return self.libtorch / ".active"

    # -- caches (each a memo: losing one costs time, never correctness)
    @property
    def cache(self) -> Path:
        return self.root / "cache"

    @property
    def fast(self) -> Path:
        """The re-dial answers and lock holdings (`store.fastpath`)."""
        return self.cache / "fast"

    @property
    def hot(self) -> Path:
        """The hot commands' memos (`hot.replay.memo_path`)."""
        return self.root / roots.HOT

    def activations(self, name: str = "") -> Path:
        """The envs' captured activations (`store.activation` names each by key and path);
        without a name, their directory (as every member taking a name below)."""
        return self.cache / "activation" / name

    def verified(self, name: str = "") -> Path:
        """`<sha256>`: the stat identity of a local archive already hashed (`store.archives`);
        `<sha256>.paths`: its layout, checked once (`store.install`)."""
        return self.cache / "verified" / name

    def sizes(self, entry: str = "") -> Path:
        """Bytes of package-cache entry `entry`, walked once (`store.sizes`)."""
        return self.cache / "sizes" / entry

    def notes(self, name: str = "") -> Path:
        """A note said once (`source.nvcc`'s cmake-toolkit note)."""
        return self.cache / "notes" / name

    @property
    def repodata(self) -> Path:
        """The channels' repodata a solve reads (`lock.make`)."""
        return self.cache / "repodata"

    @property
    def toolchain(self) -> Path:
        """The toolchain's hashes under their stat (`source.toolchain`)."""
        return self.cache / "toolchain.json"

    # -- what the commands above the store keep
    @property
    def lockfiles(self) -> Path:
        """Variants locked on demand (`lock.paths.home_lock`)."""
        return self.root / "lockfiles"

    @property
    def channel(self) -> Path:
        """The local channel `fdlenv pack` fills; its last path component is the channel alias
        `flodl` that envs/*.yml name, so `--mirror flodl=URL` maps it."""
        return self.channels / "flodl"

    @property
    def channels(self) -> Path:
        return self.root / "channels"

    @property
    def source(self) -> Path:
        return self.root / "source"

    def source_tree(self, spec_hash: str) -> Path:
        """A fetched training tree (`source.fetch`)."""
        return self.source / spec_hash

    def source_state(self, spec_hash: str) -> Path:
        """The tree's digest and manifest cache beside it (`source.state`)."""
        return self.source / f"{spec_hash}.state.json"

    @property
    def builds(self) -> Path:
        return self.root / "builds"

    def build(self, key: str) -> Path:
        """Built artifacts by content key (`source.build`)."""
        return self.builds / key

    def build_stage(self, key: str, pid: int | str) -> Path:
        """Where a build is assembled before its rename to `build(key)`."""
        return self.builds / f".staging-{key}-{pid}"

    @property
    def walkthrough(self) -> Path:
        """The walk-through's builds (`app.walkthrough`)."""
        return self.root / "walkthrough"

    @property
    def data(self) -> Path:
        """Datasets (flodl's `~/.flodl/data`): never touched."""
        return self.root / "data"

    def ensure(self, *dirs: Path) -> None:
        for d in dirs:
            d.mkdir(parents=True, exist_ok=True)

    def claims(self, path: Path | str) -> str | None:
        """The `Home` member that owns `path` (a path under the root), or None when no member
        claims it: the first claim of `layout()` whose glob matches it or one of its parents."""
        rel = Path(path).relative_to(self.root).as_posix()
        return next((c.owner for c in layout() if c.matches(rel)), None)


class Claim(Record):
    """What one `Home` member names: `pattern`, a glob relative to the root (`/**` ends one
    that takes a whole tree); `kept`: why `env gc` never takes it ("" when a sweep does)."""

    pattern: str
    owner: str
    kept: str = ""

    def matches(self, rel: str) -> bool:
        from fnmatch import fnmatchcase   # only gc and the tests ask: re stays off the re-dial

        if self.pattern.endswith("/**"):
            top = self.pattern[:-3]
            return fnmatchcase(rel, top) or any(fnmatchcase("/".join(rel.split("/")[:n]), top)
                                                for n in range(1, rel.count("/") + 1))
        return fnmatchcase(rel, self.pattern)


_DIR = "a directory of the layout"
_LAYOUT: list[tuple[Claim, ...]] = []


def layout() -> tuple[Claim, ...]:
    """Every member's claim, most specific first (the first match wins), each made from the
    member itself at a relative root with `*` for its arguments, so its glob is spelled only by
    the member. A directory claimed for itself is kept (gc sweeps what is in it); the trees
    fdlenv never collects are kept whole. Made on first use: the re-dial never asks."""
    if _LAYOUT:
        return _LAYOUT[0]
    h = Home(Path())

    def c(path: Path, owner: str, kept: str = "", tail: str = "") -> Claim:
        return Claim(path.as_posix() + tail, owner, kept)

    few = "a few bytes, one per {}"
    made = (
        c(h.wheel_entry("*"), "wheel_entry", tail="/**"),
        c(h.wheel_temp("*", "*", "*"), "wheel_temp", "a killed extraction's: the next install clears it", "/**"),
        c(h.pkgs, "pkgs", tail="/**"),              # rattler's entries, cudahome templates, their locks
        c(h.partial("*"), "partial"),
        c(h.archive("*", ""), "archive"),
        c(h.env_dir("*"), "env_dir", tail="/**"),
        c(h.stage("*"), "stage", tail="/**"),
        c(h.store_lock, "store_lock", "held by every realise: taken again at once", "*"),
        c(h.pkgs_lock, "pkgs_lock", "held by every install: taken again at once", "*"),
        c(h.lease("*"), "lease"),
        c(h.wheel_lock("*"), "wheel_lock", few.format("wheel fetched"), "*"),
        c(h.build_lock("*"), "build_lock", few.format("build key"), "*"),
        c(h.source_lock("*"), "source_lock", few.format("source"), "*"),
        c(h.ondemand_lock("*"), "ondemand_lock", few.format("variant"), "*"),
        c(h.key_lock("*"), "key_lock", tail="*"),   # and the holder file a killed holder left
        c(h.roots / "*", "roots"),
        c(h.active_pointer, "active_pointer", "flodl's pointer"),
        c(h.precompiled, "precompiled", "flodl's downloads and fdlenv's pointers", "/**"),
        c(h.libtorch, "libtorch", "flodl's own", "/**"),
        c(h.fast / "*", "fast"),
        c(h.hot / "*", "hot"),
        c(h.activations("*"), "activations"),
        c(h.verified("*"), "verified"),
        c(h.sizes("*"), "sizes"),
        c(h.notes("*"), "notes", few.format("env and note")),
        c(h.repodata, "repodata", "the channels' repodata, refreshed by each solve", "/**"),
        c(h.toolchain, "toolchain", "one file, the toolchain's hashes"),
        c(h.lockfiles, "lockfiles", "the variants locked on demand: a re-dial reads them", "/**"),
        c(h.channel, "channel", "what `fdlenv pack` made: the source of an air-gapped realise", "/**"),
        c(h.channels, "channels", "the local channels (`channel`)", "/**"),
        c(h.source_state("*"), "source_state"),
        c(h.source_tree("*"), "source_tree", tail="/**"),
        c(h.build_stage("*", "*"), "build_stage", tail="/**"),
        c(h.build("*"), "build", tail="/**"),
        c(h.walkthrough, "walkthrough", tail="/**"),
        c(h.data, "data", "datasets", "/**"),
        *(c(d, owner, _DIR) for d, owner in (
            (h.archives, "archives"), (h.envs, "envs"), (h.roots, "roots"), (h.staging, "staging"),
            (h.locks, "locks"), (h.cache, "cache"), (h.activations(), "activations"), (h.verified(), "verified"),
            (h.sizes(), "sizes"), (h.notes(), "notes"), (h.fast, "fast"), (h.hot, "hot"),
            (h.source, "source"), (h.builds, "builds"))),
    )
    _LAYOUT.append(made)
    return made


class Living(Record):
    """What `env gc` found alive, which every sweep reads: a sweep yields what of its own
    names points only at what is gone."""

    keys: frozenset[str]       # the kept envs' keys (their locks, activations, builds stay)
    gone: frozenset[str]       # the env dirs collected
    archives: frozenset[str]   # sha256 of every archive a kept env names
    gone_entries: frozenset[str]   # the package-cache entries collected
    asked: frozenset[str]      # `<variant>-<platform>` a kept env's re-dial asks the locks
    sources: bool = False      # `--sources`: fetched trees no join holds go too


if TYPE_CHECKING:
    Sweep = Callable[[Home, Living], Iterable[tuple[Path, str]]]


def listing(d: Path) -> list[Path]:
    """The entries of one of the layout's directories, sorted; none where it is not there."""
    return sorted(d.iterdir()) if d.is_dir() else []


class Sweeper(Record):
    """One owner's sweep and the `Home` members whose stale files it yields (path, why)."""

    covers: tuple[str, ...]
    sweep: Sweep
