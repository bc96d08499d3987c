"""The records a report page is drawn from (`sections.build_report` fills them): benchmark
rows, the roofline, series, matrices, charts, facts, and the whole `Report`."""

from __future__ import annotations

from dataclasses import dataclass, field

from gpuaudit.model import Finding, Run
from gpuaudit.model.diagnosis import Diagnosis
from gpuaudit.model.economics import PricePerformance
from gpuaudit.report.format import NA


def fmt(value: float | None, digits: int = 4) -> str:
    if value is None:
        return NA
    return f"{value:.{digits}g}"


@dataclass(frozen=True)
class BenchRow:
    suite: str
    name: str
    gpu: str
    value: str  # "690.9 TFLOP/s" or "skipped"
    spec: str
    pct: float | None
    spread: str
    spread_pct: float | None  # the spread's width as % of the value
    spread_kind: str
    at: str
    notes: str
    skipped: bool
    wrong: bool
    noisy: bool

    @property
    def bar_pct(self) -> float:
        return max(0.0, min(100.0, self.pct or 0.0))


@dataclass(frozen=True)
class Roof:
    precision: str
    peak: float  # TFLOP/s (int8: TOP/s)


@dataclass(frozen=True)
class RoofPoint:
    precision: str
    gpu: int | None
    value: float
    intensity: float  # FLOP per byte of the shape's operands and result
    shape: str
    pct: float | None


@dataclass(frozen=True)
class Roofline:
    gpu_name: str
    bandwidth_spec_gbps: float | None
    bandwidth_measured_gbps: float | None
    roofs: tuple[Roof, ...]
    points: tuple[RoofPoint, ...]


@dataclass(frozen=True)
class Series:
    name: str
    x: tuple[float | str, ...]
    y: tuple[float | None, ...]
    dashed: bool = False
    group: str = ""  # series of one group share a colour (ours and nccl-tests' of one op)


@dataclass(frozen=True)
class Matrix:
    title: str
    unit: str
    rows: tuple[str, ...]
    cols: tuple[str, ...]
    values: tuple[tuple[float | None, ...], ...]
    texts: tuple[tuple[str, ...], ...]


@dataclass(frozen=True)
class Chart:
    """One chart's data; `kind` says how to draw it (charts.py)."""

    id: str
    title: str
    kind: str  # "roofline", "lines", "bars", "heatmap"
    series: tuple[Series, ...] = ()
    matrix: Matrix | None = None
    roofline: Roofline | None = None
    x_title: str = ""
    y_title: str = ""
    log_x: bool = False
    log_y: bool = False
    caption: str = ""

    @property
    def trace_count(self) -> int:
        """How many series the drawn chart holds (the browser tests count them)."""
        if self.kind == "heatmap":
            return 1
        if self.roofline is not None:
            r = self.roofline
            gpus = {p.gpu for p in r.points}
            return len(r.roofs) + (r.bandwidth_measured_gbps is not None) + len(gpus)
        return len(self.series)


@dataclass(frozen=True)
class Fact:
    label: str
    value: str


@dataclass
class Report:
    run: Run
    title: str
    caveats: tuple[str, ...]
    facts: list[Fact]
    gpus: list[dict[str, str]]
    topology: Matrix | None
    findings: list[Finding]
    passed: list[Finding]
    bench_rows: list[BenchRow]
    charts: dict[str, list[Chart]] = field(default_factory=dict)  # section → charts
    diagnosis: Diagnosis | None = None
    qps_rows: list[BenchRow] = field(default_factory=list)
    cost: PricePerformance | None = None
    telemetry_note: str | None = None

    def section(self, name: str) -> list[Chart]:
        return self.charts.get(name, [])

    @property
    def all_charts(self) -> list[Chart]:
        return [c for charts in self.charts.values() for c in charts]
