"""The idle policy: find GPUs that burn money doing nothing, warn, then act.

A GPU is idle when its SM activity, its memory traffic and its PCIe traffic all stay under
their thresholds for a window. Once idle for the window the policy warns; if the GPU (or, by
default, every GPU of the host) is still idle after a grace period it runs the configured
action, once per idle episode: dry-run unless actions are enabled. docs/monitor-idle.md gives
the thresholds' reasons and the decision log's format.

Pure logic: time comes from the samples, never from a clock, and the action runner is
injected, so a replayed trace gives the same decisions every time.
"""

from __future__ import annotations

import logging
import os
import shlex
import subprocess
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Literal

from gpuaudit.errors import BadInputError
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import GpuSample, Sample
from gpuaudit.model.base import Record

from .metrics import IdleState

log = logging.getLogger(__name__)

Scope = Literal["host", "gpu"]
# idle: every reading there is under its threshold, activity among them;
# busy: some reading is at or over its threshold (one is enough);
# unknown: nothing over, but no activity reading; error: the GPU could not be read at all.
Verdict = Literal["idle", "busy", "unknown", "error"]
Kind = Literal["warn", "act", "cancel", "blind"]
Outcome = Literal["notified", "dry_run", "ok", "failed"]

# Placeholders an action's arguments may hold; {gpu} and {uuid} only make sense per GPU.
HOST_PLACEHOLDERS = ("{hostname}",)
GPU_PLACEHOLDERS = ("{gpu}", "{uuid}", "{hostname}")
OUTPUT_TAIL_CHARS = 2000


@dataclass(frozen=True)
class IdleConfig:
    # 5 % activity: above what NVML/GPM read on an idle GPU (0) and what a monitoring or
    # health-check kernel leaves, below any real job; docs/monitor-idle.md argues each figure.
    activity_max_pct: float = 5.0
    memory_traffic_max_pct: float = 5.0
    pcie_max_bytes_per_s: float = 50e6
    window_s: float = 600.0
    grace_s: float = 300.0
    # How long the activity reading may be missing inside an episode before the episode ends.
    max_gap_s: float = 120.0
    scope: Scope = "host"
    action: tuple[str, ...] = ()
    enable_actions: bool = False
    action_timeout_s: float = 120.0
    # After a failed action, the same episode tries again only this much later.
    retry_backoff_s: float = 3600.0
    price_per_gpu_hour: float | None = None
    currency: str = "USD"
    exclude_gpus: frozenset[int] = frozenset()

    def __post_init__(self) -> None:
        for name in ("activity_max_pct", "memory_traffic_max_pct", "pcie_max_bytes_per_s",
                     "window_s", "max_gap_s", "action_timeout_s", "retry_backoff_s"):
            if not getattr(self, name) > 0:
                raise BadInputError(f"idle policy: {name} must be > 0, not {getattr(self, name)}")
        if self.grace_s < 0:
            raise BadInputError(f"idle policy: grace_s must be >= 0, not {self.grace_s}")
        if self.scope not in ("host", "gpu"):
            raise BadInputError(f"idle policy: scope must be 'host' or 'gpu', not {self.scope!r}")
        if self.price_per_gpu_hour is not None and self.price_per_gpu_hour < 0:
            raise BadInputError("idle policy: price_per_gpu_hour must be >= 0")
        # A string would be a shell command line: refuse it rather than split it and guess.
        if isinstance(self.action, str) or not all(isinstance(a, str) for a in self.action):
            raise BadInputError("idle policy: the action is an argument list of strings, "
                                f"e.g. ['sudo', 'shutdown', '-h', 'now'], not {self.action!r}")
        object.__setattr__(self, "action", tuple(self.action))
        object.__setattr__(self, "exclude_gpus", frozenset(self.exclude_gpus))
        if self.action and not self.action[0]:
            raise BadInputError("idle policy: the action's program is empty")
        if self.scope == "host" and any(p in a for a in self.action
                                        for p in ("{gpu}", "{uuid}")):
            raise BadInputError("idle policy: {gpu} and {uuid} need scope 'gpu': the host "
                                "acts for all its GPUs at once")

    def thresholds(self) -> IdleThresholds:
        return IdleThresholds(activity_max_pct=self.activity_max_pct,
                              memory_traffic_max_pct=self.memory_traffic_max_pct,
                              pcie_max_bytes_per_s=self.pcie_max_bytes_per_s,
                              window_s=self.window_s, grace_s=self.grace_s,
                              max_gap_s=self.max_gap_s, scope=self.scope)


class IdleThresholds(Record):
    """The limits a decision was taken under (a copy of the config's, in each record)."""

    activity_max_pct: float
    memory_traffic_max_pct: float
    pcie_max_bytes_per_s: float
    window_s: float
    grace_s: float
    max_gap_s: float
    scope: Scope


class IdleEvidence(Record):
    """One GPU's readings at the decision's tick, which source each came from and what the
    policy made of them."""

    gpu: int
    uuid: str | None = None
    verdict: Verdict
    activity_pct: float | None = None
    activity_source: str | None = None  # "sm_activity" (GPM) or "utilization_gpu" (NVML)
    memory_traffic_pct: float | None = None
    memory_traffic_source: str | None = None  # "dram_bandwidth_util" or "utilization_memory"
    pcie_bytes_per_s: float | None = None  # receive + transmit
    pcie_source: str | None = None  # "pcie" (NVML) or "gpm_pcie"
    over: tuple[str, ...] = ()  # signals at or over their threshold
    missing: tuple[str, ...] = ()  # signals with no reading this tick
    error: str | None = None
    idle_since: datetime | None = None  # this GPU's episode, if it is in one


class IdleDecision(Record):
    """One thing the policy decided, with everything it looked at. The decision log is these
    records, one JSON object per line."""

    kind: Kind
    outcome: Outcome
    time: datetime
    hostname: str
    scope: Scope
    gpu: int | None = None  # None: the whole host
    idle_since: datetime | None = None
    idle_for_s: float = 0.0
    message: str
    evidence: tuple[IdleEvidence, ...] = ()
    left_out: tuple[int, ...] = ()  # GPUs the host decision did not wait for (and why: doc)
    thresholds: IdleThresholds
    command: tuple[str, ...] = ()  # what ran, or would have run
    returncode: int | None = None
    output: str | None = None  # the action's stdout+stderr, last OUTPUT_TAIL_CHARS
    next_attempt_at: datetime | None = None


class IdleUsage(Record):
    """Idle time so far, and what it cost where a price is known."""

    gpu_idle_seconds: dict[int, float]
    idle_gpu_hours: float
    price_per_gpu_hour: float | None = None
    currency: str = "USD"
    idle_cost: float | None = None


@dataclass(frozen=True)
class ActionResult:
    returncode: int | None  # None: it never ran or did not finish
    output: str = ""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.error is None


ActionRunner = Callable[[tuple[str, ...], float], ActionResult]


def run_action(argv: tuple[str, ...], timeout_s: float) -> ActionResult:
    """Run an action: an argument list, never a shell, with the environment every child of
    ours gets."""
    try:
        done = subprocess.run(list(argv), env=apply_safe_env(dict(os.environ)),
                              stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                              stderr=subprocess.STDOUT, text=True, timeout=timeout_s,
                              check=False)
    except subprocess.TimeoutExpired as e:
        out = e.output if isinstance(e.output, str) else ""
        return ActionResult(None, out[-OUTPUT_TAIL_CHARS:], f"timed out after {timeout_s:g} s")
    except OSError as e:
        return ActionResult(None, "", f"could not start {argv[0]!r}: {e.strerror or e}")
    err = None if done.returncode == 0 else f"exit status {done.returncode}"
    return ActionResult(done.returncode, (done.stdout or "")[-OUTPUT_TAIL_CHARS:], err)


def evidence_of(g: GpuSample, cfg: IdleConfig) -> IdleEvidence:
    """The three signals of one GPU, each from the best source this GPU has, judged."""
    if g.error is not None:
        return IdleEvidence(gpu=g.index, uuid=g.uuid, verdict="error", error=g.error,
                            missing=("activity", "memory_traffic", "pcie"))
    if g.sm_activity_pct is not None:
        activity, act_src = g.sm_activity_pct, "sm_activity"
    elif g.utilization_gpu_pct is not None:
        activity, act_src = g.utilization_gpu_pct, "utilization_gpu"
    else:
        activity, act_src = None, None
    if g.dram_bandwidth_util_pct is not None:
        memory, mem_src = g.dram_bandwidth_util_pct, "dram_bandwidth_util"
    elif g.utilization_memory_pct is not None:
        memory, mem_src = g.utilization_memory_pct, "utilization_memory"
    else:
        memory, mem_src = None, None
    # Both directions from one source, or nothing: half a reading would understate traffic.
    if g.pcie_rx_bytes_per_s is not None and g.pcie_tx_bytes_per_s is not None:
        pcie, pcie_src = g.pcie_rx_bytes_per_s + g.pcie_tx_bytes_per_s, "pcie"
    elif g.gpm_pcie_rx_bytes_per_s is not None and g.gpm_pcie_tx_bytes_per_s is not None:
        pcie, pcie_src = g.gpm_pcie_rx_bytes_per_s + g.gpm_pcie_tx_bytes_per_s, "gpm_pcie"
    else:
        pcie, pcie_src = None, None
    signals = (("activity", activity, cfg.activity_max_pct),
               ("memory_traffic", memory, cfg.memory_traffic_max_pct),
               ("pcie", pcie, cfg.pcie_max_bytes_per_s))
    over = tuple(name for name, v, limit in signals if v is not None and v >= limit)
    missing = tuple(name for name, v, _ in signals if v is None)
    verdict: Verdict = "busy" if over else ("unknown" if activity is None else "idle")
    return IdleEvidence(gpu=g.index, uuid=g.uuid, verdict=verdict, activity_pct=activity,
                        activity_source=act_src, memory_traffic_pct=memory,
                        memory_traffic_source=mem_src, pcie_bytes_per_s=pcie,
                        pcie_source=pcie_src, over=over, missing=missing)


def describe(ev: IdleEvidence, cfg: IdleConfig) -> str:
    """'activity 0 % < 5 %, memory traffic 1 % < 5 %, PCIe n/a' for one GPU."""
    if ev.error is not None:
        return f"GPU {ev.gpu} could not be read: {ev.error}"

    def one(label: str, v: float | None, limit: float, unit: str, scale: float = 1.0) -> str:
        if v is None:
            return f"{label} n/a"
        rel = ">=" if v >= limit else "<"
        return f"{label} {v / scale:.3g} {unit} {rel} {limit / scale:.3g} {unit}"

    return ", ".join((
        one("activity", ev.activity_pct, cfg.activity_max_pct, "%"),
        one("memory traffic", ev.memory_traffic_pct, cfg.memory_traffic_max_pct, "%"),
        one("PCIe", ev.pcie_bytes_per_s, cfg.pcie_max_bytes_per_s, "MB/s", 1e6)))


def _minutes(seconds: float) -> str:
    return f"{seconds / 60:.3g} min"


@dataclass
class _Episode:
    """One actor's idle episode (a GPU's, or the host's) and its action bookkeeping."""

    since: datetime | None = None
    warned_at: datetime | None = None
    acted: bool = False  # ran, or dry-ran, in this episode: never again in it
    failed_at: datetime | None = None  # the last failed attempt in this episode


@dataclass
class _GpuTrack:
    ep: _Episode = field(default_factory=_Episode)
    last_idle: datetime | None = None  # the last tick with idle readings
    error_since: datetime | None = None
    no_activity_since: datetime | None = None  # answers, but without an activity reading
    blind_told: bool = False
    done_idle_s: float = 0.0  # idle time of finished episodes that reached the window

    def current_idle_s(self) -> float:
        if self.ep.since is None or self.ep.warned_at is None or self.last_idle is None:
            return 0.0
        return (self.last_idle - self.ep.since).total_seconds()


class IdlePolicy:
    """Feed it every sample in time order; it answers with what it decided at that tick."""

    def __init__(self, config: IdleConfig | None = None,
                 runner: ActionRunner | None = None) -> None:
        self.config = config or IdleConfig()
        self._runner = runner or run_action
        self._thresholds = self.config.thresholds()
        self._gpus: dict[int, _GpuTrack] = {}
        self._host = _Episode()
        self._last_time: datetime | None = None

    # -- what the exporter and the live view read --------------------------------------------

    def states(self) -> dict[int, IdleState]:
        """Per GPU: idle by the policy (under the thresholds for the window) now, and idle
        time so far (episodes that reached the window, counted from their first idle tick)."""
        return {i: IdleState(idle=t.ep.warned_at is not None,
                             idle_seconds_total=t.done_idle_s + t.current_idle_s())
                for i, t in sorted(self._gpus.items())}

    def usage(self) -> IdleUsage:
        seconds = {i: s.idle_seconds_total for i, s in self.states().items()}
        hours = sum(seconds.values()) / 3600
        price = self.config.price_per_gpu_hour
        return IdleUsage(gpu_idle_seconds=seconds, idle_gpu_hours=hours,
                         price_per_gpu_hour=price, currency=self.config.currency,
                         idle_cost=None if price is None else hours * price)

    # -- the policy ---------------------------------------------------------------------------

    def observe(self, sample: Sample) -> list[IdleDecision]:
        t = sample.time
        if self._last_time is not None and t <= self._last_time:
            # A clock stepped back (or a replay repeats a frame): the durations would be wrong.
            log.warning("idle policy: sample at %s is not after %s; skipped", t, self._last_time)
            return []
        self._last_time = t
        out: list[IdleDecision] = []
        evidence: dict[int, IdleEvidence] = {}
        for g in sample.gpus:
            if g.index in self.config.exclude_gpus:
                continue
            track = self._gpus.setdefault(g.index, _GpuTrack())
            ev = evidence_of(g, self.config)
            out += self._step_gpu(sample, g, ev, track)
            evidence[g.index] = ev.model_copy(update={"idle_since": track.ep.since})
        if self.config.scope == "host":
            out += self._step_host(sample, evidence)
        return out

    def _decision(self, sample: Sample, kind: Kind, outcome: Outcome, gpu: int | None,
                  ep: _Episode, message: str, evidence: Sequence[IdleEvidence],
                  **extra: object) -> IdleDecision:
        since = ep.since
        return IdleDecision(
            kind=kind, outcome=outcome, time=sample.time, hostname=sample.hostname,
            scope=self.config.scope if gpu is None else "gpu", gpu=gpu, idle_since=since,
            idle_for_s=0.0 if since is None else (sample.time - since).total_seconds(),
            message=message, evidence=tuple(evidence), thresholds=self._thresholds,
            **extra)  # type: ignore[arg-type]

    def _step_gpu(self, sample: Sample, g: GpuSample, ev: IdleEvidence,
                  track: _GpuTrack) -> list[IdleDecision]:
        t, cfg, ep = sample.time, self.config, track.ep
        out: list[IdleDecision] = []
        if ev.verdict == "error":
            track.error_since = track.error_since or t
        else:
            track.error_since = None
        if ev.verdict != "error" and ev.activity_pct is None:
            track.no_activity_since = track.no_activity_since or t
        else:
            track.no_activity_since, track.blind_told = None, False

        if ev.verdict == "busy":
            out += self._end_gpu(sample, g.index, track, ev,
                                 f"busy again ({', '.join(ev.over)} over the threshold)")
        elif ev.verdict == "idle":
            if ep.since is None:
                ep.since = t
            track.last_idle = t
        elif ep.since is not None and track.last_idle is not None and \
                (t - track.last_idle).total_seconds() > cfg.max_gap_s:
            # Long blindness is not idleness: the episode restarts with the next idle reading.
            what = ev.error or "no activity reading"
            out += self._end_gpu(sample, g.index, track, ev,
                                 f"unreadable for over {cfg.max_gap_s:g} s ({what})")

        if (track.no_activity_since is not None and not track.blind_told
                and (t - track.no_activity_since).total_seconds() >= cfg.window_s):
            track.blind_told = True
            host = " and keeps the host from acting" if cfg.scope == "host" else ""
            out.append(self._decision(
                sample, "blind", "notified", g.index, ep,
                f"GPU {g.index} has given no activity reading for "
                f"{_minutes(cfg.window_s)}: it cannot be found idle{host}; "
                "leave it out with exclude_gpus if that is intended", [ev]))

        if ev.verdict != "idle" or ep.since is None:
            return out
        idle_for = (t - ep.since).total_seconds()
        if ep.warned_at is None and idle_for >= cfg.window_s:
            ep.warned_at = t
            then = (f"; the action follows in {_minutes(cfg.grace_s)} unless it is used"
                    if cfg.scope == "gpu" and cfg.action else "")
            out.append(self._decision(
                sample, "warn", "notified", g.index, ep,
                f"GPU {g.index} idle for {_minutes(idle_for)} since {ep.since:%H:%M:%S}: "
                f"{describe(ev, cfg)}{then}", [ev.model_copy(update={"idle_since": ep.since})]))
        if cfg.scope == "gpu" and ep.warned_at is not None \
                and (t - ep.warned_at).total_seconds() >= cfg.grace_s:
            out += self._act(sample, g.index, ep, [ev.model_copy(
                update={"idle_since": ep.since})], (), g.uuid)
        return out

    def _end_gpu(self, sample: Sample, gpu: int, track: _GpuTrack, ev: IdleEvidence,
                 why: str) -> list[IdleDecision]:
        ep = track.ep
        out = []
        if ep.since is not None and ep.warned_at is not None:
            what = ("after its action" if ep.acted else "before any action")
            out.append(self._decision(sample, "cancel", "notified", gpu, ep,
                                      f"GPU {gpu} {why}, {what}", [ev]))
        track.done_idle_s += track.current_idle_s()
        track.ep, track.last_idle = _Episode(), None
        return out

    def _step_host(self, sample: Sample,
                   evidence: dict[int, IdleEvidence]) -> list[IdleDecision]:
        t, cfg, ep = sample.time, self.config, self._host
        live: list[int] = []
        dead: list[int] = []
        for i, ev in evidence.items():
            err_since = self._gpus[i].error_since
            # A GPU unreadable for a whole window runs nothing of ours: it must not keep a
            # host whose other GPUs are idle running (and billing) forever.
            if ev.verdict == "error" and err_since is not None \
                    and (t - err_since).total_seconds() >= cfg.window_s:
                dead.append(i)
            else:
                live.append(i)
        starts = [self._gpus[i].ep.since for i in live]
        in_episode = bool(live) and all(s is not None for s in starts)
        since = None
        if in_episode:
            since = max([s for s in starts if s is not None]
                        + [e for i in dead if (e := self._gpus[i].error_since) is not None])
        out: list[IdleDecision] = []
        if since != ep.since:
            if ep.since is not None and ep.warned_at is not None:
                busy = [i for i in live if evidence[i].verdict != "idle"]
                what = "after its action" if ep.acted else "before any action"
                why = (f"GPU {', '.join(map(str, busy))} no longer idle" if busy
                       else "the set of GPUs changed")
                out.append(self._decision(sample, "cancel", "notified", None, ep,
                                          f"host {sample.hostname}: {why}, {what}",
                                          list(evidence.values()), left_out=self._left(dead)))
            self._host = ep = _Episode(since=since)
        # Decide only on a tick where every GPU waited for shows idle readings.
        if since is None or any(evidence[i].verdict != "idle" for i in live):
            return out
        idle_for = (t - since).total_seconds()
        if ep.warned_at is None and idle_for >= cfg.window_s:
            ep.warned_at = t
            then = (f"; the action follows in {_minutes(cfg.grace_s)} unless one is used"
                    if cfg.action else "")
            out.append(self._decision(
                sample, "warn", "notified", None, ep,
                f"host {sample.hostname}: all {len(live)} GPUs idle for "
                f"{_minutes(idle_for)} since {since:%H:%M:%S}{then}",
                list(evidence.values()), left_out=self._left(dead)))
        if ep.warned_at is not None and (t - ep.warned_at).total_seconds() >= cfg.grace_s:
            out += self._act(sample, None, ep, list(evidence.values()), self._left(dead), None)
        return out

    def _left(self, dead: Sequence[int]) -> tuple[int, ...]:
        return tuple(sorted({*dead, *self.config.exclude_gpus}))

    def _act(self, sample: Sample, gpu: int | None, ep: _Episode,
             evidence: Sequence[IdleEvidence], left_out: tuple[int, ...],
             uuid: str | None) -> list[IdleDecision]:
        cfg, t = self.config, sample.time
        if ep.acted or not cfg.action:
            return []  # one action per episode; with no action configured, warnings only
        if ep.failed_at is not None and (t - ep.failed_at).total_seconds() < cfg.retry_backoff_s:
            return []
        subs = {"{hostname}": sample.hostname, "{gpu}": "" if gpu is None else str(gpu),
                "{uuid}": uuid or ""}
        command = tuple(_substitute(a, subs) for a in cfg.action)
        who = f"GPU {gpu}" if gpu is not None else f"host {sample.hostname}"
        shown = shlex.join(command)
        if not cfg.enable_actions:
            ep.acted = True
            return [self._decision(sample, "act", "dry_run", gpu, ep,
                                   f"{who} still idle after the grace period; dry run, would "
                                   f"run: {shown} (enable actions to run it)", evidence,
                                   left_out=left_out, command=command)]
        try:
            result = self._runner(command, cfg.action_timeout_s)
        except Exception as e:  # an injected runner's bug must not stop the monitor
            result = ActionResult(None, "", f"{type(e).__name__}: {e}")
        if result.ok:
            ep.acted = True
            return [self._decision(sample, "act", "ok", gpu, ep, f"{who} idle: ran {shown}",
                                   evidence, left_out=left_out, command=command,
                                   returncode=result.returncode, output=result.output or None)]
        ep.failed_at = t
        retry = t + timedelta(seconds=cfg.retry_backoff_s)
        log.warning("idle action for %s failed (%s): %s; next attempt not before %s, or in a "
                    "new idle episode", who, result.error, shown, retry.isoformat())
        return [self._decision(sample, "act", "failed", gpu, ep,
                               f"{who} idle: {shown} failed ({result.error}); next attempt "
                               f"not before {retry:%H:%M:%S} or in a new idle episode",
                               evidence, left_out=left_out, command=command,
                               returncode=result.returncode, output=result.output or None,
                               next_attempt_at=retry)]


def _substitute(arg: str, subs: dict[str, str]) -> str:
    # Plain replacement, not str.format: other braces in an argument (JSON for a cloud CLI)
    # stay as written.
    for key, value in subs.items():
        arg = arg.replace(key, value)
    return arg
