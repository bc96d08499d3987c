"""Running suites into a Run: GPU selection, progress, findings, interruption."""

from __future__ import annotations

import importlib
import sys
import time
import traceback
from collections.abc import Callable, Iterator, Sequence

from gpuaudit import interrupt
from gpuaudit._version import __version__
from gpuaudit.bench import contention, hostload
from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.stats import reason_of, skipped
from gpuaudit.bench.stragglers import find_stragglers
from gpuaudit.bench.suites import DEFAULT, SUITES, suite
from gpuaudit.errors import BadInputError
from gpuaudit.hw.torch_env import CudaDevice, cuda_devices, preload_torch
from gpuaudit.model import (
    Finding,
    Host,
    Machine,
    Measurement,
    Run,
    RunStatus,
    Severity,
    utc_now,
)
from gpuaudit.model.opprofile import OpProfile

# A suite shorter than this (latency, memory: a fraction of a second) gets no look of its own
# after it: its figures share the look after the next suite.
SHORT_SUITE_S = 1.0


def check_suites(names: Sequence[str]) -> list[str]:
    """The suites to run, in their canonical order (none named: all but the opt-in ones);
    unknown names are bad input."""
    unknown = [n for n in names if n not in SUITES]
    if unknown:
        raise BadInputError(f"unknown suite {', '.join(unknown)} (choose from "
                            f"{', '.join(SUITES)})")
    chosen = set(names) or set(DEFAULT)
    return [n for n in SUITES if n in chosen]


def select_devices(machine: Machine, gpus: Sequence[int] | None
                   ) -> tuple[tuple[CudaDevice, int], ...]:
    """CUDA devices paired with their NVML index (matched by UUID), limited to `gpus` (NVML
    indices, as `inspect` numbers them). A GPU that does not exist is bad input."""
    by_uuid = {g.uuid: g.index for g in machine.gpus if g.uuid}
    devices = cuda_devices()
    pairs = [(d, by_uuid.get(d.uuid, d.cuda_index)) for d in devices]
    if gpus is not None:
        present = {idx for _, idx in pairs} or {g.index for g in machine.gpus}
        missing = sorted(set(gpus) - present)
        if missing:
            have = ", ".join(map(str, sorted(present))) or "none"
            raise BadInputError(f"no GPU {', '.join(map(str, missing))} here (GPUs: {have})")
        pairs = [p for p in pairs if p[1] in set(gpus)]
    return tuple(sorted(pairs, key=lambda p: p[1]))


def _guarded(name: str, fn: Callable[[BenchContext], Iterator[Measurement | OpProfile]],
             ctx: BenchContext) -> Iterator[Measurement | OpProfile]:
    """A suite that crashes costs its own figures (recorded as skipped), not the run."""
    try:
        yield from fn(ctx)
    except (KeyboardInterrupt, BadInputError):
        raise
    except Exception as exc:
        where = traceback.extract_tb(exc.__traceback__)[-1]
        yield skipped(name, "suite", "", f"{reason_of(exc)} "
                      f"({where.filename.rsplit('/', 1)[-1]}:{where.lineno})")


def run_bench(
    suites: Sequence[str] = (),
    *,
    machine: Machine | None = None,
    gpus: Sequence[int] | None = None,
    profile: Profile = Profile.QUICK,
    size_range: tuple[int, int] | None = None,
    timeout_s: float = 300.0,
    with_native: bool = False,
    step: Callable[[str], None] | None = None,
    on_measurement: Callable[[Measurement], None] | None = None,
    on_suite: Callable[[int, int], None] | None = None,
    options: dict[str, object] | None = None,
    exclusive: bool = False,
    watch: contention.Watch | None = None,
) -> Run:
    """Run the suites and return a Run with every figure (or why it was skipped) and the
    straggler findings. Ctrl-C stops early: what was measured is kept, the Run is PARTIAL.

    Between suites the GPUs are looked at (`contention`): figures measured while something
    else used a GPU are marked contended. `exclusive` refuses to start (BadInputError) when
    the GPUs are busy. `watch` replaces the live NVML look (tests replay traces through it)."""
    started = utc_now()
    names = check_suites(suites)
    preflight(names, profile=profile, timeout_s=timeout_s, options=options or {})
    loading = preload_torch(names)  # imported while NVML is read, done before any timing
    measured: list[tuple[int, Measurement]] = []  # (the last look before it, the figure)
    profiles: list[OpProfile] = []  # bench train --op-profile's records
    seconds: dict[str, float] = {}
    status = RunStatus.COMPLETE
    ctx: BenchContext | None = None
    owned = watch is None
    said = step or (lambda _: None)

    def stepping(text: str) -> None:
        interrupt.check()  # a Ctrl-C swallowed inside a library stops the run here
        said(text)

    try:
        if machine is None:
            from gpuaudit.hw import take_snapshot

            machine = take_snapshot()
        ctx = BenchContext(machine=machine, devices=select_devices(machine, gpus),
                           profile=profile, step=stepping, size_range=size_range,
                           timeout_s=timeout_s, options=dict(options or {}))
        watch = watch if watch is not None else _live_watch(ctx, exclusive)
        if loading is not None:
            stepping("loading torch")
            loading.join()  # no import may run beside a timing
        # A look costs half a second. None is taken where nothing was measured since the last
        # one (a suite that only skipped: p2p on one GPU, storage without a path), nor after a
        # suite that took under SHORT_SUITE_S: its figures share the look after the next suite
        # (they are then bracketed by the look before them and the next one taken).
        look_due, unlooked = True, False
        if exclusive and watch is not None and names:
            busy = watch.look(f"before {names[0]}")
            look_due = False
            if busy.busy_gpus():
                raise BadInputError(f"--exclusive: the GPUs are busy: "
                                    f"{contention.busy_line(busy)}")
        for done, name in enumerate(names):
            interrupt.check()
            if on_suite:
                on_suite(done, len(names))  # suites finished so far, of how many
            if watch is not None and look_due:
                ctx.step(f"looking for other work on the GPUs before {name}")
                watch.look(f"before {name}")
                look_due = unlooked = False
            before = len(watch.looks) - 1 if watch is not None else 0
            ctx.step(name)
            runs = [suite(name)]
            if with_native:
                runs += [importlib.import_module(m).run_native for m in SUITES[name].native]
            t0 = time.perf_counter()
            found = False
            first, load = len(measured), hostload.read()
            try:
                for fn in runs:
                    for m in _guarded(name, fn, ctx):
                        if isinstance(m, OpProfile):
                            profiles.append(m)
                            continue
                        measured.append((before, m))
                        found = found or m.value is not None
                        if on_measurement:
                            on_measurement(m)
                        interrupt.check()
            finally:  # an interrupted suite keeps the time it had run
                seconds[name] = round(time.perf_counter() - t0, 2)
                others = hostload.others_cores(load, hostload.read())
                measured[first:] = [(b, hostload.mark(m, others)) for b, m in measured[first:]]
            unlooked = unlooked or found
            look_due = look_due or (found and seconds[name] >= SHORT_SUITE_S)
        if watch is not None and names and unlooked:
            watch.look(f"after {names[-1]}")
    except KeyboardInterrupt:
        status = RunStatus.PARTIAL
        interrupt.clear()
        if machine is None:  # interrupted while the machine was read: nothing to keep
            raise
    finally:
        if owned and watch is not None:
            close = getattr(watch.src, "close", None)
            if close:
                close()
    assert machine is not None
    if ctx is None:
        ctx = BenchContext(machine=machine, devices=(), profile=profile,
                           timeout_s=timeout_s, options=dict(options or {}))
    final = contention.mark(measured, watch.looks, [i for _, i in ctx.devices]) \
        if watch is not None else [m for _, m in measured]
    return Run(kind="bench", started_at=started, finished_at=utc_now(),
               tool_version=__version__, status=status, command=tuple(sys.argv),
               source="live", machine=machine, measurements=tuple(final), suite_seconds=seconds,
               op_profiles=tuple(profiles),
               findings=tuple(bench_findings(final) + feed_findings(final, ctx)))


def preflight(names: Sequence[str], *, profile: Profile, timeout_s: float,
              options: dict[str, object]) -> None:
    """Refuse bad input to the chosen suites before the machine is even read: a missing or
    read-only path, no room for the test file, a peer that does not answer, a bad job."""
    if isinstance(options.get("job"), str):
        from gpuaudit.bench.feed.verdict import parse_job

        parse_job(str(options["job"]))  # bad text fails now, not after the measuring
    checks = [importlib.import_module(m).preflight for n in names
              if (m := SUITES[n].preflight) is not None]
    if not checks:
        return
    # The checks need the options and the profile only, not the machine.
    ctx = BenchContext(machine=Machine(captured_at=utc_now(), host=Host(
        hostname="", python_version="")), devices=(), profile=profile, timeout_s=timeout_s,
        options=dict(options))
    for check in checks:
        check(ctx)


def feed_findings(measured: Sequence[Measurement], ctx: BenchContext) -> list[Finding]:
    """Can this server feed a training job (`options["job"]`, or the train suite's rate)?"""
    from gpuaudit.bench.feed.verdict import FeedJob, parse_job
    from gpuaudit.bench.feed.verdict import feed_findings as verdict

    job = ctx.options.get("job")
    if isinstance(job, str):  # library callers may pass the command line's text
        job = parse_job(job)
    return verdict(measured, job if isinstance(job, FeedJob) else None,
                   gpus=max(1, len(ctx.devices)))


def _live_watch(ctx: BenchContext, exclusive: bool) -> contention.Watch | None:
    """A look at the chosen GPUs through NVML; None without GPUs. Without NVML there is no
    look, and --exclusive cannot promise anything: it refuses."""
    if not ctx.on_gpu:
        return None
    from gpuaudit.hw import LiveNvml, NvmlUnavailable

    try:
        src = LiveNvml()
    except NvmlUnavailable as exc:
        if exclusive:
            raise BadInputError(f"--exclusive: cannot tell whether the GPUs are free ({exc})"
                                ) from None
        return None
    return contention.Watch(src, [i for _, i in ctx.devices])


def bench_findings(measured: Sequence[Measurement]) -> list[Finding]:
    from gpuaudit.bench.workload_findings import workload_findings

    # a contended figure says nothing about the GPU's own speed: no straggler judgement
    findings = find_stragglers([m for m in measured if not m.contended])
    findings += contention.findings(measured)
    findings += workload_findings([m for m in measured if not m.contended])
    for m in measured:
        if m.verified is False and m.suite == "dcgm":
            findings.append(Finding(
                code="dcgm.test-failed", severity=Severity.FAIL, gpu_index=m.gpu_index,
                message=f"DCGM diagnostic {m.name.removeprefix('diag_')} failed"
                        + (f": {m.notes[0]}" if m.notes else ""),
                advice="Read dcgmi's message; `dcgmi diag -r 3` on an idle GPU gives the full "
                       "verdict. On a rented node, report it with the output.",
                evidence={"test": m.name, "tool": "dcgmi"}))
        elif m.verified is False:
            findings.append(Finding(
                code="bench.result-mismatch", severity=Severity.FAIL, gpu_index=m.gpu_index,
                message=f"{m.suite}/{m.name} computed a wrong result: the GPU (or its link) "
                        "may corrupt data",
                advice="Re-run; if it repeats, stop using this GPU and run DCGM diag level 3.",
                evidence={"suite": m.suite, "name": m.name, **{
                    k: v for k, v in m.params.items() if isinstance(v, str | int | float)}}))
    return findings
