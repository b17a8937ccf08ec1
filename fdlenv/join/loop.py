"""One dial attempt, and the `--persist` loop around it.

Attempt order is load-bearing, and flodl's `fdl join`'s: prepare -> binary and cwd ->
signature probe (before the tunnel: admission starts a window deadline) ->
tunnel (ready before the agent starts) -> spec -> spawn -> wait -> teardown
(the tunnel is closed on every path). Preparation runs on every attempt, which
turns `--persist` into a provisioning loop.

The loop, as in `fdl join`: one-shot returns the agent's code (signal death -> 1),
a transient failure 1, a permanent one 2. Under persist, agent exits and
transient failures re-dial after a backoff of 5 s doubling to 60 s, reset to
5 s after a clean exit or an attempt that lasted over 120 s, with up to 25 %
jitter added so a fleet does not re-dial in lockstep; a permanent failure
still stops with 2. A stop signal (SIGTERM, SIGINT), at any moment, one-shot or
persist, ends the loop with 130 and one `error: stopped by SIGTERM ...` line, as
`env realize` does: during prepare, the probe or the tunnel the attempt unwinds
(`supervise.Interrupted`); while the agent runs the signal goes to its process
group and, once it has exited, whatever its code, join says the stop and returns
130 (the agent did not finish: it was stopped, and a unit or script reads that as
it reads Ctrl-C); during the re-dial wait the wait ends at once. Any
exception an attempt lets out is a failure too, classified by its cause
(`errors.classify`, named by the phase: `join (tunnel): ...`), never a traceback.
Clock, sleep, rng, prepare and the tunnel opener are injectable; so is `settle`, what the
settings still name to be read (the token file), read first by the first attempt that can.
"""

from __future__ import annotations

import functools
import random
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Protocol, TypedDict

from ..names import variants
from ..config.model import JoinSettings, SshConfig
from ..base.output import error_line
from ..base.errors import EXIT_INTERRUPTED, EXIT_PERMANENT, EXIT_TRANSIENT, Fail, classify
from ..base.progress import note
from .probe import ENV_PROBE, Prober
from .runnable import not_runnable
from .spec import ENV_AGENT_JSON, AgentSpec
from ..store import leases
from .supervise import Interrupted, Stopper, exit_code, spawn_agent, wait_agent

if TYPE_CHECKING:
    from typing_extensions import Unpack

BACKOFF_MIN = 5.0
BACKOFF_MAX = 60.0
BACKOFF_RESET_AFTER = 120.0
JITTER = 0.25
ENV_HOST_NAME = "FLODL_HOST_NAME"


def settle_backoff(current: float, clean: bool, elapsed: float) -> float:
    """After an attempt: back to the floor after a clean exit or a long stint."""
    return BACKOFF_MIN if clean or elapsed > BACKOFF_RESET_AFTER else current


def grow_backoff(current: float) -> float:
    return min(current * 2, BACKOFF_MAX)


def with_jitter(base: float, rng: random.Random) -> float:
    """base .. base*(1+JITTER), spread across a fleet, and never past BACKOFF_MAX: a wait that
    would pass it lands in the cap's top sixth instead (50 .. 60 s)."""
    wait = base * (1.0 + JITTER * rng.random())
    if wait > BACKOFF_MAX:
        return BACKOFF_MAX * (1.0 - rng.random() / 6)
    return wait


def flodl_label(variant: str | None) -> str:
    if not variant:
        return ""
    try:
        return variants.get(variant).flodl_label
    except Fail:
        return ""


def _signame(signum: int | None) -> str:
    import signal
    return signal.Signals(signum).name if signum is not None else "a signal"


class _EnvLike(Protocol):
    @property
    def path(self) -> Path: ...


class Prepared(Protocol):
    """What a dial reads of `fdlenv.app.prepare.Prepared`: prepare is handed to the runner
    (`Runner.prepare`), never imported by join."""

    variant: str | None
    label: str
    bin: str | None
    cwd: str | None
    data_path: str | None
    args: list[str] | None
    run_id: str | None
    notes: list[str]
    environ: dict[str, str]

    @property
    def env(self) -> _EnvLike | None: ...   # read only: prepare's is a store Env


class _Forward(Protocol):
    """What an attempt reads of the tunnel it opened (`join.tunnel.Tunnel`, or a test's)."""

    @property
    def local_port(self) -> int: ...

    def close(self) -> None: ...


class OpenTunnel(Protocol):
    """`join.tunnel.open_tunnel`'s shape, as an attempt calls it: the hop, the controller as the hop
    reaches it; an open tunnel, or a Fail."""

    def __call__(self, ssh: SshConfig, controller_host: str, controller_port: int, *,
                 say: Callable[[str], None]) -> _Forward: ...


class _Attempt(TypedDict):
    attempt: int
    outcome: str                  # "agent exited", "failed" or "stopped"
    exit: int | None
    seconds: float
    persist: bool
    controller: str | None        # host:port, as dialed


class AttemptEnd(TypedDict, total=False):
    """What one outcome adds: a stop's signal; a failure's phase, class and message; an exit's status."""
    signal: str
    phase: str
    transient: bool
    error: str
    agent_status: int


class AttemptReport(_Attempt, AttemptEnd):
    """`join --json`'s object for one attempt (`Runner.reported`): what ended it, its exit class, how long it took."""


@dataclass
class Runner:
    settings: JoinSettings
    prepare: Callable[[JoinSettings], Prepared]        # fdlenv.app.prepare's, handed in
    open_tunnel: OpenTunnel | None = None              # default: join.tunnel.open_tunnel
    prober: Prober | None = None
    clock: Callable[[], float] = time.monotonic
    sleep: Callable[[float], None] | None = None       # default: stopper.sleep
    rng: random.Random = field(default_factory=random.Random)
    say: Callable[[str], None] = functools.partial(note, "join")
    stopper: Stopper = field(default_factory=Stopper)
    # What the settings still name to be read (the token file: config.token.read_chosen_file),
    # read at the start of the first attempt that can: a file not there yet is a transient failure
    settle: Callable[[JoinSettings], JoinSettings] | None = None
    attempts: int = 0
    phase: str = "prepare"                             # names the cause of an unclassified failure
    # `join --json`: one object per attempt (what ended it, its exit class, how long it took)
    report: Callable[[AttemptReport], None] | None = None

    def __post_init__(self) -> None:
        self.prober = self._prober = self.prober or Prober(enabled=self.settings.sig_probe, say=self.say)
        if self.open_tunnel is None:
            from .tunnel import open_tunnel
            self.open_tunnel = open_tunnel
        self._open_tunnel: OpenTunnel = self.open_tunnel
        self._sleep: Callable[[float], None] = self.sleep or self.stopper.sleep

    # ------------------------------------------------------------------ attempt
    def attempt(self) -> int:
        """One attempt; returns the agent's raw exit status, raises Fail/Interrupted."""
        self.attempts += 1
        if self.settle is not None:
            self.phase = "token"
            self.settings = self.settle(self.settings)
            self.settle = None
        s = self.settings
        self.phase = "prepare"
        try:
            prepared = self.prepare(s)
        except Fail as f:
            for n in f.notes:
                self.say(n)
            raise
        for n in prepared.notes or []:
            self.say(n)

        bin_path = prepared.bin or s.bin
        if not bin_path:
            raise Fail.permanent("internal: preparation settled no training binary "
                                 f"(bin={s.bin!r}, source={s.source!r})")
        cwd = prepared.cwd if s.source is not None or prepared.cwd else None

        args = list(s.args)
        if prepared.args is not None:
            if args and list(prepared.args) != args:
                self.say("probing with the published run's arguments rather than this box's "
                         f"({' '.join(args)} -> {' '.join(prepared.args)})")
            args = list(prepared.args)

        env = dict(prepared.environ)
        env.pop(ENV_PROBE, None)
        env.pop(ENV_AGENT_JSON, None)
        env[ENV_HOST_NAME] = s.host

        self.phase = "probe"
        lease = leases.take(prepared.env.path) if prepared.env is not None else None
        tunnel = None
        try:
            with self.stopper.spawning():   # a stop goes to the probe, then ends the attempt here
                probed = self._prober(bin_path, args, cwd=cwd, env=env, on_spawn=self.stopper.watch,
                                      stopped=lambda: self.stopper.stopped)
            if probed.error is not None:   # the binary cannot be executed: no tunnel, no re-dial
                raise not_runnable(bin_path, probed.error, cwd=cwd, path_var=env.get("PATH"))
            sig = probed.sig
            self.phase = "tunnel"
            assert s.controller_host is not None and s.controller_port is not None  # a dial's
            if s.ssh is not None:
                tunnel = self._open_tunnel(s.ssh, s.controller_host, s.controller_port,
                                          say=self.say)
                dial = ("127.0.0.1", tunnel.local_port)
            else:
                dial = (s.controller_host, s.controller_port)
            spec = AgentSpec(
                host=s.host, controller_host=dial[0], controller_port=dial[1],
                libtorch=prepared.label or flodl_label(prepared.variant), salt_hex=s.token,
                local_devices=s.devices,
                data_path=str(prepared.data_path) if prepared.data_path is not None else None,
                run_id=prepared.run_id, gpu_ram_share=s.gpu_ram_share, model_sig_hex=sig)
            env[ENV_AGENT_JSON] = spec.encode()
            self.phase = "agent"
            proc = spawn_agent([bin_path, *args], cwd=cwd, env=env, stopper=self.stopper,
                               keep_fds=(lease,) if lease is not None else ())
            return wait_agent(proc, self.stopper)
        finally:
            if tunnel is not None:
                tunnel.close()
            leases.release(lease)

    def reported(self) -> int:
        """`attempt`, and what ended it handed to `report` (when one is given) before the loop
        reads it: the agent's exit, a failure with its class and phase, or a stop."""
        if self.report is None:
            return self.attempt()
        started = self.clock()

        def tell(outcome: str, code: int | None, more: AttemptEnd) -> None:
            assert self.report is not None
            s = self.settings
            self.report({"attempt": self.attempts, "outcome": outcome, "exit": code,
                         "seconds": round(self.clock() - started, 3), "persist": s.persist,
                         "controller": None if s.controller_host is None
                         else f"{s.controller_host}:{s.controller_port}", **more})
        try:
            raw = self.attempt()
        except Interrupted as i:
            tell("stopped", 130, {"signal": _signame(i.signum)})
            raise
        except Exception as e:   # reported as the loop will classify it, then raised again
            f = classify(e, f"join ({self.phase})")
            tell("failed", EXIT_TRANSIENT if f.transient else EXIT_PERMANENT,
                 {"phase": self.phase, "transient": f.transient, "error": f.message})
            raise
        tell("agent exited", exit_code(raw), {"agent_status": raw})
        return raw

    # --------------------------------------------------------------------- loop
    def run(self) -> int:
        with self.stopper:
            return self._loop()

    def _loop(self) -> int:
        try:
            return self._dial()
        except Interrupted as i:
            return self._stopped(i.signum)

    # What was under way when a stop came, by `phase`
    _DOING = {"token": "reading the token file", "prepare": "preparation", "probe": "the signature probe",
              "tunnel": "the tunnel's set-up", "agent": "the agent's start"}

    def _stopped(self, signum: int | None, detail: str = "") -> int:
        """A stop: one `error:` line naming the signal and what it ended, and 130."""
        if not detail and self.phase == "wait":
            detail = "while waiting to re-dial"
        elif not detail:
            tunnel = self.settings.ssh is not None and self.phase in ("tunnel", "agent")
            detail = (f"during {self._DOING.get(self.phase, self.phase)}; nothing half-written was kept"
                      + ("; the tunnel was closed" if tunnel else ""))
        error_line(f"stopped by {_signame(signum)} {detail}; not re-dialing")
        return EXIT_INTERRUPTED

    def _dial(self) -> int:
        s = self.settings
        backoff = BACKOFF_MIN
        while True:
            started = self.clock()
            try:
                raw = self.reported()
            except Interrupted:
                raise
            except Exception as e:  # noqa: BLE001 - a Fail, or any other exception classified by its cause
                f = classify(e, f"join ({self.phase})")
                if self.stopper.stopped:   # what the stop broke: a note; the stop is the error
                    self.say(f"{f.message} (after the stop)")
                    return self._stopped(self.stopper.signum)
                error_line(f.message)
                if not f.transient:
                    self.say("not re-dialing — retrying cannot fix this (exit 2)")
                    return EXIT_PERMANENT
                if not s.persist:
                    return EXIT_TRANSIENT
                outcome, clean = "attempt failed", False
            else:
                code = exit_code(raw)
                if self.stopper.stopped:
                    ended = f"exited with code {raw}" if raw >= 0 else f"was killed by {_signame(-raw)}"
                    return self._stopped(self.stopper.signum, "while the agent ran: the signal went to its "
                                         f"process group and the agent {ended}"
                                         + ("; the tunnel was closed" if s.ssh is not None else ""))
                if not s.persist:
                    return code
                outcome = (f"agent exited with code {raw}" if raw >= 0
                           else f"agent killed by {_signame(-raw)}")
                clean = raw == 0
            elapsed = self.clock() - started
            backoff = settle_backoff(backoff, clean, elapsed)
            delay = with_jitter(backoff, self.rng)
            self.phase = "wait"
            self.say(f"{outcome} after {elapsed:.0f}s; re-dialing in {delay:.1f}s (--persist)")
            self._sleep(delay)
            self.stopper.check()
            backoff = grow_backoff(backoff)


class Injected(TypedDict, total=False):
    """Runner's injectables, as `run_join` takes them."""
    open_tunnel: OpenTunnel | None
    prober: Prober | None
    clock: Callable[[], float]
    sleep: Callable[[float], None] | None
    rng: random.Random
    say: Callable[[str], None]
    stopper: Stopper
    settle: Callable[[JoinSettings], JoinSettings] | None
    report: Callable[[AttemptReport], None] | None


def run_join(settings: JoinSettings, prepare: Callable[[JoinSettings], Prepared],
             **deps: Unpack[Injected]) -> int:
    """Run the loop with `settings`; `deps` override Runner's injectables."""
    return Runner(settings=settings, prepare=prepare, **deps).run()
