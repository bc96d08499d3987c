"""What a report shows, as data (`report.records`): pulled out of a Run (and the telemetry and
prices beside it) once, then drawn as HTML, Markdown or charts. Each section is None when its
data is not there, so the templates show only what exists.
"""

from __future__ import annotations

import statistics
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime

from gpuaudit.compare import caveats, figure_label
from gpuaudit.model import Machine, Measurement, Run, Severity
from gpuaudit.model.diagnosis import Diagnosis
from gpuaudit.model.economics import PricePerformance
from gpuaudit.model.history import HistoryPoint
from gpuaudit.parse import human_bytes
from gpuaudit.report.format import NA, gib, ranges
from gpuaudit.report.records import (
    BenchRow,
    Chart,
    Fact,
    Matrix,
    Report,
    Roof,
    Roofline,
    RoofPoint,
    Series,
    fmt,
)

# Matmul precisions and the bytes of one input and one output element (fp8 writes bf16,
# int8 accumulates into int32), for the arithmetic intensity of a measured shape.
ELEMENT_BYTES = {"fp64": (8, 8), "fp32": (4, 4), "tf32": (4, 4), "bf16": (2, 2),
                 "fp16": (2, 2), "fp8": (1, 2), "int8": (1, 4)}
# The datasheet field each matmul precision is judged against (bench/matmul.py's spec_key).
ROOF_FIELDS = {"fp64": "fp64_tensor", "fp32": "fp32", "tf32": "tf32", "bf16": "bf16",
               "fp16": "fp16", "fp8": "fp8", "int8": "int8"}
TRANSFER_ORDER = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable",
                  "h2d_pinned_all", "d2h_pinned_all")
TELEMETRY_METRICS = (
    ("power_w", "Power", "W"),
    ("sm_clock_mhz", "SM clock", "MHz"),
    ("sm_activity_pct", "SM activity (GPM)", "%"),
    ("tensor_activity_pct", "Tensor activity (GPM)", "%"),
    ("utilization_gpu_pct", "NVML utilization", "%"),
    ("temperature_gpu_c", "Temperature", "°C"),
)


# -- machine --------------------------------------------------------------------------------


def machine_facts(run: Run) -> list[Fact]:
    facts = [Fact("run", f"{run.id} ({run.kind}, {run.status.value})"),
             Fact("started", f"{run.started_at:%Y-%m-%d %H:%M:%S %Z}"),
             Fact("gpuaudit", run.tool_version)]
    if run.finished_at is not None:
        took = (run.finished_at - run.started_at).total_seconds()
        facts.append(Fact("took", f"{took:.1f} s"))
    m = run.machine
    if m is None:
        return [*facts, Fact("machine", "not recorded in this run")]
    h = m.host
    cores = f"{h.cpu_cores_physical or '?'} cores / {h.cpu_threads or '?'} threads"
    facts += [
        Fact("host", h.hostname),
        Fact("CPU", f"{h.cpu_model or NA} ({cores}, {h.numa_nodes or '?'} NUMA nodes)"),
        Fact("memory", gib(h.memory_total_bytes)),
        Fact("OS", f"{h.os_name or NA}, kernel {h.kernel or NA}"),
        Fact("isolation", ", ".join(x for x in (
            f"container {h.container}" if h.container else "",
            f"hypervisor {h.hypervisor}" if h.hypervisor else "") if x) or "bare metal"),
        Fact("driver", f"{m.driver_version or NA} (CUDA {m.cuda_driver_version or NA})"),
        Fact("software", f"Python {h.python_version}, torch {h.torch_version or 'not installed'}"
                         + (f" (CUDA {h.torch_cuda_version})" if h.torch_cuda_version else "")),
    ]
    return facts


def gpu_rows(m: Machine | None) -> list[dict[str, str]]:
    from gpuaudit.specs import lookup

    if m is None:
        return []
    rows = []
    for g in m.gpus:
        spec = lookup(nvml_name=g.name, pci_device_id=g.pci_device_id)
        p = g.pcie
        pcie = f"Gen{p.gen_current or '?'} x{p.width_current or '?'}"
        if (p.gen_current, p.width_current) != (p.gen_max, p.width_max):
            pcie += f" (max Gen{p.gen_max or '?'} x{p.width_max or '?'})"
        rows.append({
            "index": str(g.index), "model": g.name,
            "spec": spec.name if spec else "not in the spec catalog",
            "memory": gib(g.memory_total_bytes), "pcie": pcie,
            "clock": f"{g.clocks.sm_mhz or NA} / {g.clocks.sm_max_mhz or NA} MHz",
            "power": f"{fmt(g.power.draw_w, 3)} / {fmt(g.power.limit_w, 3)} W",
            "temp": f"{g.thermal.gpu_c if g.thermal.gpu_c is not None else NA} °C",
            "ecc": NA if g.ecc.enabled is None else ("on" if g.ecc.enabled else "off"),
            "nvlink": f"{g.nvlinks_active}/{len(g.nvlinks)} up" if g.nvlinks else "none",
            "numa": f"{g.numa_node if g.numa_node is not None else NA} / "
                    f"{ranges(g.cpu_affinity) if g.cpu_affinity else NA}",
        })
    return rows


def topology(m: Machine | None) -> Matrix | None:
    if m is None or len(m.gpus) < 2:
        return None
    names = tuple(f"GPU{g.index}" for g in m.gpus)
    texts = []
    for a in m.gpus:
        row = []
        for b in m.gpus:
            link = m.link(a.index, b.index) if a.index != b.index else None
            row.append("X" if a.index == b.index else (link.label if link else "?"))
        texts.append(tuple(row))
    return Matrix("Topology", "", names, names, (), tuple(texts))


# -- benchmarks -----------------------------------------------------------------------------


def bench_row(m: Measurement) -> BenchRow:
    gpu = "" if m.gpu_index is None else str(m.gpu_index)
    at = figure_label(m)
    if {"m", "n", "k"} <= m.params.keys():
        at = f"{m.params['m']}×{m.params['n']}×{m.params['k']}"
    elif not at and isinstance(m.params.get("buffer_bytes"), int):
        at = human_bytes(m.params["buffer_bytes"])
    if m.value is None:
        return BenchRow(m.suite, m.name, gpu, "skipped", "", None, "", None, "", at,
                        m.skipped_reason or "", True, False, False)
    spread, spread_pct = "", None
    if m.spread_low is not None and m.spread_high is not None:
        spread = f"{fmt(m.spread_low)}–{fmt(m.spread_high)}"
        if m.value:
            spread_pct = 100 * (m.spread_high - m.spread_low) / abs(m.value)
    noisy = any(n.startswith("noisy") for n in m.notes)
    return BenchRow(m.suite, m.name, gpu, f"{fmt(m.value)} {m.unit}",
                    fmt(m.spec_value) if m.spec_value else "", m.pct_of_spec, spread,
                    spread_pct, m.spread_kind or "", at, "; ".join(m.notes), False,
                    m.verified is False, noisy)


def _is_per_size(m: Measurement) -> bool:
    return "size_bytes" in m.params and not m.name.endswith("_peak")


def bench_rows(run: Run) -> list[BenchRow]:
    """Every figure but the per-size collective rows (the chart shows those)."""
    shown = [m for m in run.measurements if not (_is_per_size(m) and m.value is not None)]
    # One figure's GPUs side by side (the spread across the box), suites in the run's order.
    suites = {s: i for i, s in enumerate(dict.fromkeys(m.suite for m in shown))}
    names = {n: i for i, n in enumerate(dict.fromkeys((m.suite, m.name) for m in shown))}
    shown.sort(key=lambda m: (suites[m.suite], names[(m.suite, m.name)],
                              -1 if m.gpu_index is None else m.gpu_index))
    return [bench_row(m) for m in shown]


def _precision(m: Measurement) -> str | None:
    """The precision of a sustained matmul figure (the burst ones are left off the roofline)."""
    return m.name if m.suite == "matmul" and m.name in ELEMENT_BYTES else None


def intensity(precision: str, m: int, n: int, k: int) -> float:
    """FLOP per byte moved for C = A·B once: 2mnk over the operands read and C written."""
    ib, ob = ELEMENT_BYTES[precision]
    return 2 * m * n * k / (ib * (m * k + k * n) + ob * m * n)


def roofline(run: Run) -> Roofline | None:
    from gpuaudit.specs import lookup

    matmuls = [m for m in run.measurements if m.value is not None and _precision(m)
               and m.params.get("device", "cuda") == "cuda"]
    spec = None
    if run.machine and run.machine.gpus:
        g = run.machine.gpus[0]
        spec = lookup(nvml_name=g.name, pci_device_id=g.pci_device_id)
    if not matmuls:  # a run of other suites: datasheet roofs alone say nothing about it
        return None
    roofs: dict[str, float] = {}
    for prec, fld in ROOF_FIELDS.items():
        peak = spec.peak(fld) if spec else None
        if peak is None:  # no catalog entry: the peak the figure was judged against
            peak = next((m.spec_value for m in matmuls if m.name == prec and m.spec_value),
                        None)
        if peak is not None:
            roofs[prec] = peak
    bw_spec = spec.memory_bandwidth_gbps if spec else next(
        (m.spec_value for m in run.measurements if m.suite == "memory" and m.spec_value), None)
    copies = [m.value for m in run.measurements if m.suite == "memory" and m.name == "copy"
              and m.value is not None and m.params.get("tool") is None]
    points = []
    for m in matmuls:
        p = m.params
        if not all(isinstance(p.get(x), int) for x in "mnk"):
            continue
        prec = m.name
        points.append(RoofPoint(prec, m.gpu_index, m.value,
                                intensity(prec, p["m"], p["n"], p["k"]),
                                f"{p['m']}×{p['n']}×{p['k']}", m.pct_of_spec))
    if not roofs and not points:
        return None
    name = spec.name if spec else (run.machine.gpus[0].name if run.machine and run.machine.gpus
                                   else "GPU")
    return Roofline(name, bw_spec, statistics.median(copies) if copies else None,
                    tuple(Roof(p, v) for p, v in roofs.items()), tuple(points))


def collective_series(run: Run) -> list[Series]:
    by: dict[tuple[str, str], list[tuple[int, float]]] = defaultdict(list)
    for m in run.measurements:
        if m.suite != "collectives" or m.value is None or not _is_per_size(m):
            continue
        size = m.params.get("size_bytes")
        if not isinstance(size, int):
            continue
        op = m.name.removesuffix("_busbw")
        by[(op, str(m.params.get("tool") or "gpuaudit"))].append((size, m.value))
    out = []
    for (op, tool), pts in sorted(by.items(), key=lambda kv: (kv[0][0], kv[0][1] != "gpuaudit")):
        pts.sort()
        out.append(Series(f"{op} ({tool})", tuple(p[0] for p in pts),
                          tuple(p[1] for p in pts), dashed=tool != "gpuaudit", group=op))
    return out


def transfer_matrix(run: Run) -> Matrix | None:
    cells: dict[tuple[int, str], Measurement] = {}
    for m in run.measurements:
        if m.suite == "transfer" and m.value is not None and m.gpu_index is not None \
                and m.name in TRANSFER_ORDER and not m.params.get("tool"):
            cells.setdefault((m.gpu_index, m.name), m)
    if not cells:
        return None
    gpus = sorted({g for g, _ in cells})
    cols = tuple(n for n in TRANSFER_ORDER if any(n == c for _, c in cells))
    values, texts = [], []
    for g in gpus:
        vs, ts = [], []
        for c in cols:
            m = cells.get((g, c))
            vs.append(m.value if m else None)
            pct = f" ({m.pct_of_spec:.0f}%)" if m and m.pct_of_spec is not None else ""
            ts.append(f"{m.value:.1f}{pct}" if m and m.value is not None else "")
        values.append(tuple(vs))
        texts.append(tuple(ts))
    return Matrix("Host ↔ GPU copies (GB/s, % of the PCIe link)", "GB/s",
                  tuple(f"GPU{g}" for g in gpus), cols, tuple(values), tuple(texts))


def p2p_matrices(run: Run) -> list[Matrix]:
    groups: dict[tuple[str, str], dict[tuple[int, int], Measurement]] = defaultdict(dict)
    for m in run.measurements:
        src, dst = m.params.get("src"), m.params.get("dst")
        if m.value is None or not isinstance(src, int) or not isinstance(dst, int):
            continue
        if m.suite in ("p2p", "transfer") or m.params.get("tool") == "nvbandwidth":
            groups[(m.name, str(m.params.get("tool") or ""))].setdefault((src, dst), m)
    out = []
    for (name, tool), cells in sorted(groups.items()):
        if len(cells) < 2:  # one pair (p2p_bidir on 2 GPUs): the table says it better
            continue
        gpus = sorted({i for pair in cells for i in pair})
        unit = next(iter(cells.values())).unit
        values, texts = [], []
        for s in gpus:
            vs, ts = [], []
            for d in gpus:
                m = cells.get((s, d))
                vs.append(m.value if m else None)
                ts.append("" if m is None or m.value is None else f"{m.value:.4g}")
            values.append(tuple(vs))
            texts.append(tuple(ts))
        title = f"GPU → GPU {name}" + (f" ({tool})" if tool else "") + f", {unit}"
        labels = tuple(f"GPU{g}" for g in gpus)
        out.append(Matrix(title, unit, labels, labels, tuple(values), tuple(texts)))
    return out


# -- workloads ------------------------------------------------------------------------


def _workload_label(m: Measurement) -> str:
    p = m.params
    return str(p.get("mode") or p.get("precision") or m.name.rsplit("/", 2)[-2])


def train_charts(run: Run) -> list[Chart]:
    """Per model, the one-GPU training rate of each mode (precision, compile, ...): bench
    train's `<model>/<mode>/throughput` (samples/s) and `/tokens` (tokens/s) figures."""
    groups: dict[tuple[str, str], list[Measurement]] = defaultdict(list)
    for m in run.measurements:
        if m.suite != "train" or m.value is None or "/ddp/" in m.name \
                or not m.name.endswith(("/throughput", "/tokens")):
            continue
        model = str(m.params.get("model") or m.name.split("/")[0])
        groups[(model, m.unit)].append(m)
    charts = []
    for i, ((model, unit), ms) in enumerate(sorted(groups.items())):
        by_gpu: dict[int | None, list[Measurement]] = defaultdict(list)
        for m in ms:
            by_gpu[m.gpu_index].append(m)
        series = tuple(Series(model if len(by_gpu) == 1 else f"{model} GPU{g}",
                              tuple(_workload_label(m) for m in gms),
                              tuple(m.value for m in gms))
                       for g, gms in sorted(by_gpu.items(), key=lambda kv: kv[0] or 0))
        charts.append(Chart(f"train-{i}", f"Training throughput: {model} ({unit})", "bars",
                            series, x_title="mode", y_title=unit))
    return charts


def infer_charts(run: Run) -> list[Chart]:
    """Per model and precision, latency vs batch for each mode (eager, compiled, CUDA graph):
    bench infer's `<model>/<precision>/<mode>/b<batch>/latency` figures, p50 (the value) solid,
    p99 (from the params) dashed."""
    lat: dict[str, dict[str, list[tuple[float, float, float | None]]]] = defaultdict(
        lambda: defaultdict(list))
    for m in run.measurements:
        batch = m.params.get("batch_size", m.params.get("batch"))
        if m.suite != "infer" or m.value is None or not m.name.endswith("/latency") \
                or m.unit != "ms" or isinstance(batch, bool) \
                or not isinstance(batch, int | float):
            continue
        model = " ".join(str(m.params[k]) for k in ("model", "precision")
                         if m.params.get(k) is not None) or m.name.split("/")[0]
        p99 = m.params.get("p99_ms")
        lat[model][str(m.params.get("mode") or "")].append(
            (float(batch), m.value, float(p99) if isinstance(p99, int | float) else None))
    charts = []
    for i, (model, by_mode) in enumerate(sorted(lat.items())):
        series: list[Series] = []
        for mode, pts in sorted(by_mode.items()):
            pts.sort()
            name = mode or "latency"
            series.append(Series(f"{name} p50", tuple(x for x, _, _ in pts),
                                 tuple(y for _, y, _ in pts), group=name))
            if any(p is not None for _, _, p in pts):
                series.append(Series(f"{name} p99", tuple(x for x, _, _ in pts),
                                     tuple(p for _, _, p in pts), dashed=True, group=name))
        charts.append(Chart(f"infer-{i}", f"Inference latency vs batch: {model}", "lines",
                            tuple(series), x_title="batch size", y_title="ms", log_x=True,
                            log_y=True))
    return charts


def qps_rows(run: Run) -> list[BenchRow]:
    return [bench_row(m) for m in run.measurements if m.suite == "infer"
            and (m.unit.lower() == "qps" or m.name.endswith(("/max_qps", "/gpus_needed")))]


# -- telemetry ------------------------------------------------------------------------------


def telemetry_charts(points: Sequence[HistoryPoint]) -> list[Chart]:
    by_gpu: dict[int, list[HistoryPoint]] = defaultdict(list)
    for p in points:
        by_gpu[p.gpu].append(p)
    charts = []
    for attr, title, unit in TELEMETRY_METRICS:
        series = []
        for gpu, pts in sorted(by_gpu.items()):
            pts = sorted(pts, key=lambda p: p.time)
            ys = tuple(getattr(p, attr) for p in pts)
            if all(y is None for y in ys):
                continue
            series.append(Series(f"GPU{gpu}", tuple(_iso(p.time) for p in pts), ys))
        if series:
            charts.append(Chart(f"telemetry-{attr}", f"{title} during the run", "lines",
                                tuple(series), x_title="time (UTC)", y_title=unit))
    return charts


def _iso(t: datetime) -> str:
    return t.isoformat()


# -- the whole report ----------------------------------------------------------------------


def build_report(run: Run, *, telemetry: Sequence[HistoryPoint] = (),
                 cost: PricePerformance | None = None,
                 diagnosis: Diagnosis | None = None) -> Report:
    m = run.machine
    title = "gpuaudit report"
    if m is not None:
        from collections import Counter

        gpus = ", ".join(f"{n}× {name}" for name, n in Counter(g.name for g in m.gpus).items())
        title += f": {m.host.hostname}" + (f", {gpus}" if gpus else ", no GPU")
    problems = sorted((f for f in run.findings if f.severity is not Severity.PASS),
                      key=lambda f: (-f.severity.rank, -1 if f.gpu_index is None else f.gpu_index,
                                     f.code))
    report = Report(
        run=run, title=title, caveats=caveats(run), facts=machine_facts(run),
        gpus=gpu_rows(m), topology=topology(m), findings=problems,
        passed=[f for f in run.findings if f.severity is Severity.PASS],
        bench_rows=bench_rows(run), diagnosis=diagnosis, qps_rows=qps_rows(run),
        cost=cost)
    charts = report.charts
    if (roof := roofline(run)) is not None:
        charts["compute"] = [Chart("roofline", f"Roofline: {roof.gpu_name}", "roofline",
                                   roofline=roof, x_title="arithmetic intensity (FLOP/byte)",
                                   y_title="TFLOP/s (int8: TOP/s)", log_x=True, log_y=True)]
    if series := collective_series(run):
        charts["collectives"] = [Chart(
            "collectives", "Collectives: bus bandwidth vs message size", "lines",
            tuple(series), x_title="message size (bytes)", y_title="busbw (GB/s)", log_x=True,
            caption="busbw by nccl-tests' factors (all-reduce 2(n−1)/n; all-gather, "
                    "reduce-scatter, all-to-all (n−1)/n; broadcast 1). Dashed: nccl-tests "
                    "in the same run.")]
    heat = []
    if (tm := transfer_matrix(run)) is not None:
        heat.append(Chart("transfer", tm.title, "heatmap", matrix=tm))
    for i, pm in enumerate(p2p_matrices(run)):
        heat.append(Chart(f"p2p-{i}", pm.title, "heatmap", matrix=pm,
                          x_title="destination", y_title="source"))
    if heat:
        charts["transfers"] = heat
    if train := train_charts(run):
        charts["train"] = train
    if infer := infer_charts(run):
        charts["infer"] = infer
    if telemetry:
        charts["telemetry"] = telemetry_charts(telemetry)
    return report
