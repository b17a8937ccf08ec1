"""Preparation: the ordered steps that make this box ready to run one training job.

`fdlenv join` runs it before every dial (which turns `--persist` into a
provisioning loop: a changed source or lock is picked up on the next
re-dial); `fdlenv prepare` runs it alone, to bake an image. Order is
flodl's own, cheap first, megabytes before gigabytes:

1. GPU gate: at least one usable device (skipped unless asked: a baking host
   usually has none), then each offered device id (`--devices`, `join.devices`)
   names one of them (`check_devices`; a box with no GPU fails the gate first);
2. dataset source root, 3. node-local dirs (`fdlenv.app.datasets`);
4. source: parse the spec (a typo fails before anything moves), claim the
   tree, fetch + digest, read the run manifest (and check its published
   digest), merge it over the box's recipe (a missing manifest waits before
   any env is fetched);
5. environment: realise the `--libtorch` variant (`auto` routes through the
   survey) and make it flodl's active one, or carry the active one through;
   then the arch-coverage gate over the offered devices;
6. build by content key in the env's child environment.

Steps 4-6 hold the source tree's claim, so no other process moves the tree
between the digest and the build it names. Notes are advisory and collected
in order; every fatal condition is a `Fail`, which leaves carrying the notes
gathered so far (`.notes`) so the caller prints them before the error. Any
other exception a step lets out (an OSError, unreadable content, a child that
timed out, a bug) becomes one there too, through `errors.classify`, its message
led by the step: `prepare (source): ...`.

Re-dial cost: with nothing changed this is stats, at most one rsync or
`git ls-remote`, and small JSON reads (the store's fast path, the cached
activation, the build key). Imports stay inside the steps: no YAML of the
lock, no rattler, conda-lock or gitpython on that path.
"""

from __future__ import annotations

import functools
import os
import time
from pathlib import Path
from types import MappingProxyType
from typing import TYPE_CHECKING, Any, NamedTuple
from collections.abc import Callable, Mapping

from . import datasets
from ..names import variants
from ..base.errors import Fail, classify
from ..config.grammar import has_strict_host_key_option
from ..names.home import Home
from ..store.env import Env

if TYPE_CHECKING:
    from ..config.model import JoinSettings, SourceSpec, SshConfig
    from ..names.variants import Libtorch
    from ..store.active import OwnLibtorch
    from ..hw.model import Survey
    from ..hw.routing import Route
    from ..source.build import Built, Recipe
    from ..source.fetch import Fetched
    from ..source.manifest import RunManifest
    from ..source.spec import Spec
    from ..store.active import Active

PROC_MOUNTS = Path("/proc/mounts")


class PrepareRequest(NamedTuple):
    """What preparation needs from the resolved settings (join's or prepare's).
    A NamedTuple: it is on the re-dial path (see variants)."""

    libtorch: Libtorch | None = None       # parsed once (the front, or joinsettings); None = carry the active one
    lock: str | None = None                # --lock, else fdl.yml's `fdlenv: lock:`
    mirrors: Mapping[str, str] = MappingProxyType({})
    bin: str | None = None                 # a given binary (absolute), run as is
    source: SourceSpec | None = None
    devices: tuple[int, ...] | None = None  # offered ids; None = all
    devices_field: str = "--devices"       # where they were named, for check_devices' error
    data_path: str | None = None
    data_source: str | None = None
    ssh: SshConfig | None = None           # identity and options for rsync:// and sshfs://
    project_root: str | None = None        # fdl.yml's directory (lock discovery)
    frozen: bool = False                   # never lock a variant on demand
    gpu_gate: bool = True
    build_only: bool = False               # `fdlenv build`: the source steps only (no data, no dirs)


def request_from_settings(settings: JoinSettings, *, gpu_gate: bool = True) -> PrepareRequest:
    return PrepareRequest(
        libtorch=settings.libtorch, lock=settings.lock, mirrors=dict(settings.mirrors),
        bin=settings.bin, source=settings.source, devices=settings.devices, devices_field=settings.devices_field,
        data_path=settings.data_path, data_source=settings.data_source, ssh=settings.ssh,
        project_root=settings.project_root, gpu_gate=gpu_gate, frozen=settings.frozen)


class Prepared:
    """What a dial needs: the variant, its env and child environment, the binary, the data root.
    A plain class with slots (`prepare` fills it in step by step; no dataclass on the re-dial path)."""

    __slots__ = ("variant", "env", "label", "bin", "cwd", "data_path", "args", "run_id", "notes",
                 "environ", "seconds", "build_key", "built", "auto")

    def __init__(self, variant: str | None, env: Env | None, bin: str | None = None,
                 cwd: str | None = None, data_path: str | None = None, args: list[str] | None = None,
                 run_id: str | None = None, notes: list[str] | None = None,
                 environ: dict[str, str] | None = None, seconds: dict[str, float] | None = None):
        self.variant = variant             # canonical variant; None = no libtorch settled
        self.env = env                     # the fdlenv env; None also for flodl's own libtorch
        self.label = ""                    # flodl's variant id (precompiled/cu128, builds/sm90)
        self.bin = bin                     # built artifact (source) or the given path
        self.cwd = cwd                     # project dir inside the fetched tree; None = inherit
        self.data_path = data_path         # absolute dataset root to ship; None = ship nothing
        self.args = args                   # the run manifest's args when a manifest existed
        self.run_id = run_id               # the run manifest's `run` nonce
        self.notes = [] if notes is None else notes
        self.environ = {} if environ is None else environ   # the complete child environment
        self.seconds = {} if seconds is None else seconds
        self.build_key: str | None = None  # the source's build key (None without a source)
        self.built = False                 # the recipe ran in this call
        self.auto: dict[str, object] | None = None   # `--libtorch auto`'s choice (hw.routing.Route.as_json)

    def to_json(self) -> dict[str, Any]:
        """`fdlenv prepare --json`'s object (its --help lists the keys)."""
        env = None if self.env is None else {
            "key": self.env.key, "path": str(self.env.path), "libtorch_root": str(self.env.libtorch_root)}
        return {"variant": self.variant, "libtorch": self.label, "env": env, "bin": self.bin, "cwd": self.cwd,
                "data_path": self.data_path, "args": self.args, "run_id": self.run_id,
                "notes": list(self.notes), "auto": self.auto,
                "seconds": {k: round(v, 4) for k, v in self.seconds.items()}}


# --------------------------------------------------------------------- step 1

def gpu_gate(s: Survey) -> None:
    """Any usable device of any vendor passes; findings only explain an empty list."""
    if s.devices:
        return
    why = "; ".join(f.message for f in s.findings)
    head = (f"no usable GPUs detected: {why}" if why
            else "no GPUs detected on this host (no NVIDIA or AMD device found)")
    raise Fail.permanent(f"{head}. This box has no rank to offer; `fdlenv detect` has the full "
                         "picture, and a driver still coming up belongs before `fdlenv join` "
                         "(order the unit after it)")


def _offered_vendor(libtorch: Libtorch | None, s: Survey) -> str | None:
    """The vendor whose ordinals the offered ids count: the named variant's, auto's (routing's
    vendor; a realised candidate never changes it), else None (carried, or cpu: any vendor)."""
    name = libtorch.name if libtorch is not None else None
    if libtorch is not None and libtorch.auto:
        from ..hw.routing import route
        name = route(s).variant
    vendor = variants.VARIANTS[name].vendor if name in variants.VARIANTS else "cpu"
    return vendor if vendor != "cpu" and s.of(vendor) else None


def check_devices(req: PrepareRequest, s: Survey) -> None:
    """Each offered id names a GPU found: of the vendor the libtorch uses (a device's index is
    its per-vendor ordinal as the runtime numbers it, after the visibility masks: `hw.masks`),
    or of any vendor when that is not known yet. Ids are distinct already
    (`config.grammar.check_distinct`)."""
    if not req.devices:
        return
    vendor = _offered_vendor(req.libtorch, s)
    pool = s.of(vendor) if vendor else s.devices
    ids = sorted({d.index for d in pool})
    if all(i in ids for i in req.devices):
        return
    from ..config.grammar import devices_shown

    n = len(pool)
    kind = f"{vendor} GPU" if vendor and len(pool) < len(s.devices) else "GPU"
    found = ", ".join(f"{d.vendor} {d.index}: {d.name}"
                      + (f", physical {d.physical}" if d.physical not in (None, d.index) else "") for d in pool)
    accepted = f"0..{ids[-1]}" if ids == list(range(len(ids))) else ", ".join(map(str, ids))
    masked = " visible after the visibility masks" if any(d.physical is not None for d in s.devices) else ""
    raise Fail.permanent(f"{devices_shown(req.devices_field, req.devices)}: this box has {n} {kind}"
                         f"{'' if n == 1 else 's'}{masked} ({found}); accepted: all, or distinct indices {accepted}")


# --------------------------------------------------------------------- step 4

def fetch_source(home: Home, spec: Spec, req: PrepareRequest,
                 notes: list[str]) -> tuple[Fetched, RunManifest | None, Recipe]:
    """Fetch + digest, the run manifest (its digest checked), and the recipe merged from
    it: what steps 5 (lock discovery in the tree) and 6 (the build) read. Hold the claim."""
    from ..source import build, digest, fetch, manifest

    src = req.source
    assert src is not None   # step 4 runs only with a source
    got = fetch.fetch(home, spec, req.ssh)
    notes.append(got.note)
    m = manifest.read(got.tree, got.state)
    got.state.save()
    if m is not None:
        notes.append(manifest.summary(m))
        if m.digest is not None:
            digest.verify(got.tree, m.digest.sha256, got.scan)
    return got, m, build.resolve(m, src.cwd, src.build, src.bin)


# --------------------------------------------------------------------- step 5

def read_archs(libtorch_root: Path) -> str:
    """The `archs=` value of the variant's `.arch` file; "" when there is none."""
    try:
        lines = (libtorch_root / ".arch").read_text().splitlines()
    except OSError:
        return ""
    return next((ln.split("=", 1)[1].strip() for ln in lines if ln.startswith("archs=")), "")


def arch_gate(libtorch: Active, survey: Callable[[], Survey], offered: tuple[int, ...] | None) -> None:
    """Refuse the settled libtorch (a `store.active.Active`) when it ships no kernel for an
    offered card of its vendor.

    Passes for a cpu variant, a variant without arch metadata (`fdlenv detect`
    owns that complaint), an explicitly empty offer, and no card of the vendor.
    """
    label, root, vendor = libtorch.label, Path(libtorch.dir), libtorch.vendor
    if vendor == "cpu" or (offered is not None and not offered):
        return
    archs = read_archs(root)
    if not archs:
        return
    from ..hw.coverage import covers
    cards = [d for d in survey().of(vendor) if offered is None or d.index in offered]
    bad = [d for d in cards if not covers(archs, d)]
    if bad:
        raise Fail.permanent(
            f"{label} ships kernels for {archs} only; no kernel image is available for "
            f"{', '.join(d.label for d in bad)}. Use --libtorch auto (join.libtorch: auto) to pick "
            "a variant that covers this box, or leave those cards out with --devices")


_NONE_SETTLED = ("no libtorch settled (no --libtorch and none active): the binary runs without "
                 "LIBTORCH_PATH; set --libtorch or join.libtorch")


def environment(home: Home, req: PrepareRequest, survey: Callable[[], Survey],
                source_root: Path | None, notes: list[str], fork: bool = False,
                routes: list[Route] | None = None) -> tuple[Active | None, dict[str, str]]:
    """The settled libtorch (a `store.active.Active`; None when there is none) and the complete
    child environment, through the one resolver (`libtorch.resolve_libtorch`): no --libtorch
    carries the box's active libtorch as flodl reads it (flodl's own download or build included)
    unless a near lock holds its variant; a variant is made flodl's active one. `auto`'s Route
    goes to `routes`."""
    from .libtorch import LibtorchRequest, resolve_libtorch
    from .lockview import LockView
    from ..names.platforms import this_platform

    project_root = Path(req.project_root) if req.project_root else None
    view = LockView(home, req.lock, project_root, source_root)
    act = resolve_libtorch(LibtorchRequest(
        home, req.libtorch, view, dict(req.mirrors), this_platform(), frozen=req.frozen, prefer_realised=True,
        project_root=project_root, survey=survey, activate=True, fork=fork, check=True), notes, routes)
    if act is None:
        notes.append(_NONE_SETTLED)
        return None, dict(os.environ)
    if act.env is None:
        notes.append(f"libtorch: {act.label} at {act.dir} (flodl's own, active)")
    elif req.libtorch is not None or act.env.created:   # the active env carried as it is: no note
        notes.append(f"libtorch: {act.label} at {act.env.libtorch_root}" + (" (realised)" if act.env.created else ""))
    if act.env is not None:   # said once per env, whichever command met it first
        from ..source.nvcc import note_once
        if (note := note_once(home, act.env, dict(os.environ))):
            notes.append(note)
    arch_gate(act, survey, req.devices)
    from ..store.activation import environ_for
    return act, environ_for(home, act)


# --------------------------------------------------------------------- step 6

# The build's env when no libtorch is settled: a build-key part of its own, and
# the cpu vendor, so a failed build stays transient (no toolkit to blame).
_UNSETTLED = Env("cpu", "no-libtorch", Path(os.devnull), Path(os.devnull))


def _rustc_note(m: RunManifest, tree: Path, environ: dict[str, str]) -> str | None:
    """The controller's rustc against this box's (in the tree: its toolchain file applies).

    Asked only after a build ran: a reused artifact needs no compiler, and the
    rustup proxy costs a re-dial tens of milliseconds."""
    import subprocess

    if m.rustc is None:
        return None
    try:
        res = subprocess.run(["rustc", "-V"], cwd=tree, env=environ, capture_output=True, text=True,
                             stdin=subprocess.DEVNULL, timeout=30)
    except (OSError, subprocess.SubprocessError):
        return None
    local = res.stdout.strip()
    if res.returncode != 0 or not local or local == m.rustc.strip():
        return None
    return f"the run was published with {m.rustc.strip()}, this box has {local} (advisory)"


def build_source(home: Home, fetched: Fetched, m: RunManifest | None, recipe: Recipe, env: Env | OwnLibtorch | None,
                 environ: dict[str, str], notes: list[str], claim: int | None = None) -> Built:
    """The artifact for this tree in this env, built only when its build key is new. `claim`:
    the source claim's descriptor, inherited by the recipe (see source.fetch.claimed)."""
    from ..source import build

    if env is None:
        notes.append("the build gets no LIBTORCH_PATH (no libtorch settled); set --libtorch")
    built = build.build(home, fetched.tree, fetched.digest.content, env or _UNSETTLED, environ, recipe,
                        keep_fds=(claim,) if claim is not None else ())
    if built.built and m is not None and m.rustc and (note := _rustc_note(m, fetched.tree, environ)):
        notes.append(note)
    return built


# ---------------------------------------------------------------------- order

def _default_survey() -> Survey:
    from ..hw.survey import survey
    return survey()


def prepare_saying(req: PrepareRequest, home: str, say: Callable[[str], None], *, fork: bool = False) -> Prepared:
    """`prepare(req)` for a command (prepare, build) in the home at `home`: its notes go through
    `say`, also before the error when a step fails."""
    try:
        out = prepare(req, Home(Path(home)), fork=fork)
    except Fail as f:
        for n in f.notes:
            say(n)
        raise
    for n in out.notes:
        say(n)
    return out


def prepare(req: PrepareRequest, home: Home, *, survey: Callable[[], Survey] | None = None,
            proc_mounts: Path = PROC_MOUNTS, user_home: str | None = None,
            stage: Path | None = None, cwd: Path | None = None,
            clock: Callable[[], float] = time.monotonic, fork: bool = False) -> Prepared:
    """Run the steps in order. `survey`, `proc_mounts`, `user_home` ($HOME), `stage`
    (the temp dir) and `cwd` (anchors a relative data_path) are injectable for tests;
    `fork`: the caller owns the process (the install worker may fork it)."""
    notes: list[str] = []
    seconds: dict[str, float] = {}
    routes: list[Route] = []   # `auto`'s Route, when the token is auto
    surveyed = functools.cache(survey or _default_survey)   # one survey, only when needed
    start = last = clock()
    step = "gpu"   # the step under way: it names the cause of a failure nothing classified

    def lap() -> None:
        nonlocal last
        now = clock()
        seconds[step] = now - last
        last = now

    try:
        if req.gpu_gate:
            gpu_gate(surveyed())
            check_devices(req, surveyed())
            lap()
        step = "data"
        root = None
        if not req.build_only:
            ssh_opts = list(req.ssh.options) if req.ssh else []
            if req.ssh and not has_strict_host_key_option(ssh_opts):   # sshfs's ssh: first use accepted, as before
                ssh_opts.append("StrictHostKeyChecking=accept-new")
            root = datasets.dataset_root(req.data_path, req.data_source, notes, ssh_options=ssh_opts,
                                     identity=req.ssh.identity_file if req.ssh else None,
                                     proc_mounts=proc_mounts, cwd=cwd)
            lap()
            step = "dirs"
            datasets.node_local_dirs(notes, home=user_home, stage=stage, proc_mounts=proc_mounts)
            lap()
        out = Prepared(variant=None, env=None, bin=req.bin, notes=notes, seconds=seconds,
                       data_path=str(root) if root is not None else None)
        if req.source is None:
            step = "env"
            act, out.environ = environment(home, req, surveyed, None, notes, fork, routes)
            lap()
        else:
            from ..source.fetch import claimed
            from ..source.spec import parse

            step = "source"
            spec = parse(req.source.from_, "source")
            with claimed(home, spec) as claim:
                fetched, m, recipe = fetch_source(home, spec, req, notes)
                lap()
                step = "env"
                act, out.environ = environment(home, req, surveyed, fetched.tree, notes, fork, routes)
                lap()
                step = "build"
                from ..store.active import build_env
                built = build_source(home, fetched, m, recipe, build_env(act), out.environ, notes,
                                     claim)
                lap()
            out.bin, out.cwd = str(built.bin), str(built.cwd)
            out.build_key, out.built = built.key, built.built
            if m is not None:
                out.args, out.run_id = list(m.args), m.run
        if act is not None:
            out.env, out.label, out.variant = act.env, act.label, act.variant
        out.auto = routes[0].as_json() if routes else None
    except Fail as f:
        raise f.with_notes(notes) from f
    except Exception as e:   # OSError by errors.os_failure's rule, anything else by its cause
        raise classify(e, f"prepare ({step})").with_notes(notes) from e
    seconds["total"] = clock() - start
    return out
