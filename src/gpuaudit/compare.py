"""Two runs side by side: each figure's change against its noise, findings that appeared or
cleared, and what differs between the machines and software that made them.

A figure's noise is its own spread in each run: half the range of A's repetitions plus half of
B's (the recorded spread where the samples are not kept). A change inside it is "no change";
only a change beyond it is a regression or an improvement, and a regression beyond the
threshold fails a CI gate. A figure measured on the CPU (the host's memory, a CPU matmul, gloo
collectives, a model trained on the CPU) also moves with whatever else the host runs between
the two runs, which no single run's spread shows: its change must also pass CPU_NOISE_PCT, and
one measured while other processes kept a quarter of the host's cores busy (in either run,
`bench.hostload`) is not judged at all ("host busy").
Nothing here prints: `compare_runs` returns a `Comparison` record.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterable
from datetime import datetime
from typing import Literal

from gpuaudit.bench.hostload import busy, on_cpu
from gpuaudit.model import Finding, Measurement, Run, RunStatus, Severity
from gpuaudit.model.base import SCHEMA_VERSION, Record

DEFAULT_THRESHOLD_PCT = 5.0
# The largest threshold taken: a latency may well double (+100 %), a rate only fall 100 %.
MAX_THRESHOLD_PCT = 1000.0
# Units where less is better; every other figure (rates, bandwidths, throughputs) is better high.
LOWER_IS_BETTER_UNITS = frozenset({"ns", "us", "µs", "ms", "s", "J", "W"})
# The parameters that say *which* figure a measurement is (a size, a pair of GPUs, the tool
# that measured it, a workload's setting). Others (the shape a search found, timings) are
# results and may differ between runs of the same figure.
IDENTITY_PARAMS = ("tool", "device", "op", "size_bytes", "src", "dst", "model", "precision",
                   "mode", "compile", "batch", "batch_size", "gpus", "ranks", "workers",
                   "slo_ms", "testcase")
# A CPU figure's change within this share of A is not judged: back-to-back runs on a shared
# host move by this much with the host's other load (the 2-core CI machine: the quick
# profile's CPU matmul, memory and JPEG figures moved 15-60 % between two runs minutes apart).
CPU_NOISE_PCT = 25.0
# Findings that say another job shared the GPU while the run measured.
CONTENTION_CODES = frozenset({"memory.in-use", "memory.in-use-unseen"})

Verdict = Literal["regression", "improvement", "no change", "only in A", "only in B",
                  "skipped", "host busy"]


class FigureChange(Record):
    """One figure in both runs (or in one of them)."""

    key: str  # suite/name[gpu][params]: stable, unique within a comparison
    suite: str
    name: str
    unit: str
    gpu_index: int | None
    label: str  # the identifying parameters, briefly ("1 MiB", "GPU0→GPU1", "nccl-tests")
    a_value: float | None
    b_value: float | None
    change_pct: float | None  # (B − A) / A, signed as measured
    gain_pct: float | None  # the same, signed so that positive is better
    noise_pct: float | None  # the combined half-spreads as % of A; None when neither has one
    better: Literal["higher", "lower"]
    verdict: Verdict
    beyond_threshold: bool  # a regression larger than the threshold


class FindingChange(Record):
    code: str
    gpu_index: int | None
    change: Literal["appeared", "cleared", "worse", "better"]
    severity_a: Severity | None
    severity_b: Severity | None
    message: str  # B's message where B has it, else A's


class Difference(Record):
    """A fact that differs between the two runs' machines or software."""

    what: str
    kind: Literal["machine", "software", "run"]
    a: str | None
    b: str | None


class RunRef(Record):
    id: str
    kind: str
    started_at: datetime
    hostname: str | None
    status: RunStatus
    caveats: tuple[str, ...]


class Comparison(Record):
    schema_version: int = SCHEMA_VERSION
    a: RunRef
    b: RunRef
    threshold_pct: float
    figures: tuple[FigureChange, ...]
    findings: tuple[FindingChange, ...]
    differences: tuple[Difference, ...]

    @property
    def regressions(self) -> list[FigureChange]:
        """Worst first."""
        found = [f for f in self.figures if f.verdict == "regression"]
        return sorted(found, key=lambda f: (f.gain_pct or 0.0, f.key))

    @property
    def improvements(self) -> list[FigureChange]:
        """Largest first."""
        found = [f for f in self.figures if f.verdict == "improvement"]
        return sorted(found, key=lambda f: (-(f.gain_pct or 0.0), f.key))

    @property
    def failed(self) -> bool:
        """A regression beyond the threshold: what `gpuaudit compare` exits 1 on."""
        return any(f.beyond_threshold for f in self.figures)

    def counts(self) -> dict[str, int]:
        out: dict[str, int] = {}
        for f in self.figures:
            out[f.verdict] = out.get(f.verdict, 0) + 1
        return out


def better_direction(m: Measurement) -> Literal["higher", "lower"]:
    return "lower" if m.unit in LOWER_IS_BETTER_UNITS or "latency" in m.name else "higher"


def figure_key(m: Measurement) -> str:
    # A peak's size is where it was found, a result: the peak is the same figure at any size.
    skip = {"size_bytes"} if m.name.endswith("_peak") else set()
    ident = ",".join(f"{k}={m.params[k]}" for k in IDENTITY_PARAMS
                     if k in m.params and k not in skip)
    gpu = "" if m.gpu_index is None else f"[gpu{m.gpu_index}]"
    return f"{m.suite}/{m.name}{gpu}" + (f"[{ident}]" if ident else "")


def figure_label(m: Measurement) -> str:
    from gpuaudit.parse import human_bytes

    p = m.params
    parts = []
    if "src" in p and "dst" in p:
        parts.append(f"GPU{p['src']}→GPU{p['dst']}")
    if isinstance(p.get("size_bytes"), int):
        parts.append(human_bytes(p["size_bytes"]))
    for k in ("model", "precision", "mode", "batch", "batch_size", "gpus"):
        if k in p and p[k] is not None:
            parts.append(f"{k} {p[k]}" if k in ("batch", "batch_size", "gpus") else str(p[k]))
    if p.get("tool"):
        parts.append(str(p["tool"]))
    if p.get("device") == "cpu":
        parts.append("CPU")
    return " ".join(parts)


def _half_spread(m: Measurement) -> float | None:
    """Half the range of the figure's own repetitions (its samples where kept, else the
    spread recorded with it)."""
    samples = [x for x in m.samples if x == x]  # NaN is not a repetition
    if len(samples) >= 2:
        return (max(samples) - min(samples)) / 2
    if m.spread_low is None or m.spread_high is None:
        return None
    return abs(m.spread_high - m.spread_low) / 2





def compare_figure(a: Measurement | None, b: Measurement | None,
                   threshold_pct: float) -> FigureChange:
    ref = b if b is not None else a
    assert ref is not None
    better = better_direction(ref)
    base = {"key": figure_key(ref), "suite": ref.suite, "name": ref.name, "unit": ref.unit,
            "gpu_index": ref.gpu_index, "label": figure_label(ref), "better": better,
            "a_value": a.value if a else None, "b_value": b.value if b else None}
    if a is None or b is None:
        return FigureChange(**base, change_pct=None, gain_pct=None, noise_pct=None,
                            verdict="only in B" if a is None else "only in A",
                            beyond_threshold=False)
    if a.value is None or b.value is None or a.value == 0:
        return FigureChange(**base, change_pct=None, gain_pct=None, noise_pct=None,
                            verdict="skipped", beyond_threshold=False)
    delta = b.value - a.value
    change = 100 * delta / abs(a.value)
    gain = change if better == "higher" else -change
    halves = [h for h in (_half_spread(a), _half_spread(b)) if h is not None]
    noise = sum(halves) if halves else None
    noise_pct = None if noise is None else 100 * noise / abs(a.value)
    if on_cpu(ref):
        noise_pct = max(noise_pct or 0.0, CPU_NOISE_PCT)
        noise = noise_pct * abs(a.value) / 100
        if busy(a) or busy(b):  # other processes held the host's cores: not judged
            return FigureChange(**base, change_pct=change, gain_pct=gain, noise_pct=noise_pct,
                                verdict="host busy", beyond_threshold=False)
    if abs(delta) <= (noise or 0.0):
        verdict: Verdict = "no change"
    else:
        verdict = "improvement" if gain > 0 else "regression"
    beyond = verdict == "regression" and -gain > threshold_pct
    return FigureChange(**base, change_pct=change, gain_pct=gain, noise_pct=noise_pct,
                        verdict=verdict, beyond_threshold=beyond)


def _by_key(measurements: Iterable[Measurement]) -> dict[str, Measurement]:
    out: dict[str, Measurement] = {}
    for m in measurements:
        out.setdefault(figure_key(m), m)  # a repeated figure: the first one stands
    return out


def _problems(findings: Iterable[Finding]) -> dict[tuple[str, int | None], Finding]:
    return {(f.code, f.gpu_index): f for f in findings if f.severity is not Severity.PASS}


def compare_findings(a: Run, b: Run) -> list[FindingChange]:
    fa, fb = _problems(a.findings), _problems(b.findings)
    out = []
    for key in sorted(set(fa) | set(fb), key=lambda k: (k[0], -1 if k[1] is None else k[1])):
        x, y = fa.get(key), fb.get(key)
        if x is None and y is not None:
            change = "appeared"
        elif y is None and x is not None:
            change = "cleared"
        elif x is not None and y is not None and x.severity is not y.severity:
            change = "worse" if y.severity.rank > x.severity.rank else "better"
        else:
            continue
        shown = y or x
        assert shown is not None
        out.append(FindingChange(code=key[0], gpu_index=key[1], change=change,  # type: ignore[arg-type]
                                 severity_a=x.severity if x else None,
                                 severity_b=y.severity if y else None, message=shown.message))
    return out


def _facts(run: Run) -> list[tuple[str, str, str | None]]:
    """(what, kind, value) for every fact worth flagging when it differs."""
    m = run.machine
    facts: list[tuple[str, str, str | None]] = [
        ("run kind", "run", run.kind),
        ("gpuaudit version", "software", run.tool_version),
    ]
    if m is None:
        return facts
    h = m.host
    uuids = ", ".join(sorted(g.uuid for g in m.gpus if g.uuid)) or None
    facts += [
        ("host", "machine", h.hostname),
        ("GPUs", "machine", ", ".join(f"{n}× {name}" for name, n in
                                      Counter(g.name for g in m.gpus).items()) or "no GPU"),
        ("GPU serials/UUIDs", "machine", uuids),
        ("CPU", "machine", h.cpu_model),
        ("VBIOS", "software", ", ".join(sorted({g.vbios_version or "?" for g in m.gpus}))
         if m.gpus else None),
        ("driver", "software", m.driver_version),
        ("CUDA (driver)", "software", m.cuda_driver_version),
        ("torch", "software", h.torch_version),
        ("torch CUDA", "software", h.torch_cuda_version),
        ("Python", "software", h.python_version),
        ("OS", "software", h.os_name),
        ("kernel", "software", h.kernel),
        ("isolation", "machine", " ".join(x for x in (h.container, h.hypervisor) if x) or None),
    ]
    return facts


def compare_machines(a: Run, b: Run) -> list[Difference]:
    fb = {what: (kind, value) for what, kind, value in _facts(b)}
    out = []
    for what, kind, value in _facts(a):
        if what in fb and fb[what][1] != value:
            out.append(Difference(what=what, kind=kind, a=value, b=fb[what][1]))  # type: ignore[arg-type]
    if (a.machine is None) != (b.machine is None):
        out.append(Difference(what="machine facts", kind="run",
                              a="recorded" if a.machine else "none",
                              b="recorded" if b.machine else "none"))
    return out


def caveats(run: Run) -> tuple[str, ...]:
    """What makes a run's figures less than a clean measurement: interrupted, another job on
    the GPU, noisy or wrong figures. The report says these at the top."""
    out = []
    if run.status is RunStatus.PARTIAL:
        out.append("partial: the run was interrupted; the figures shown were measured before "
                   "it stopped, the rest are missing")
    busy = sorted({f.gpu_index for f in run.findings if f.code in CONTENTION_CODES
                   and f.severity is not Severity.PASS}, key=lambda g: -1 if g is None else g)
    if busy:
        where = ", ".join("?" if g is None else str(g) for g in busy)
        out.append(f"contended: another process held memory on GPU {where} while the run "
                   "measured; figures may be low")
    noisy = [m for m in run.measurements if any(n.startswith("noisy") for n in m.notes)]
    for where, group in (("the GPU", [m for m in noisy if not on_cpu(m)]),
                         ("the host's CPUs", [m for m in noisy if on_cpu(m)])):
        if group:
            names = ", ".join(sorted({f"{m.suite}/{m.name}" for m in group})[:6])
            out.append(f"noisy: {len(group)} figure(s) varied widely between repetitions "
                       f"({names}); something else may have used {where}")
    wrong = [m for m in run.measurements if m.verified is False]
    if wrong:
        out.append(f"wrong results: {len(wrong)} figure(s) failed their result check")
    return tuple(out)


def run_ref(run: Run) -> RunRef:
    return RunRef(id=run.id, kind=run.kind, started_at=run.started_at,
                  hostname=run.machine.host.hostname if run.machine else None,
                  status=run.status, caveats=caveats(run))


def compare_runs(a: Run, b: Run, threshold_pct: float = DEFAULT_THRESHOLD_PCT) -> Comparison:
    """B against A (A is the baseline)."""
    if threshold_pct < 0:
        raise ValueError("the threshold cannot be negative")
    ma, mb = _by_key(a.measurements), _by_key(b.measurements)
    keys = list(ma) + [k for k in mb if k not in ma]
    figures = tuple(compare_figure(ma.get(k), mb.get(k), threshold_pct) for k in keys)
    return Comparison(a=run_ref(a), b=run_ref(b), threshold_pct=threshold_pct,
                      figures=figures, findings=tuple(compare_findings(a, b)),
                      differences=tuple(compare_machines(a, b)))
