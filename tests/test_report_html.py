"""The report's sections and charts from real H200 runs (the browser tests draw them)."""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest

from gpuaudit.bench.stats import measure
from gpuaudit.compare import compare_runs
from gpuaudit.model import Finding, RunStatus, Severity
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.report.charts import figure, figure_json
from gpuaudit.report.html import render_compare_html, render_run_html, render_run_markdown
from gpuaudit.report.sections import build_report, intensity
from tests.reportkit import NATIVE, ONE_GPU, TWO_GPU, contended, load, with_figure
from tests.support.reports import diagnosis


def charts_of(html: str) -> dict[str, int]:
    """chart id → the series count the page promises (data-series)."""
    return {m[0]: int(m[1]) for m in re.findall(
        r'id="chart-([\w-]+)" data-figure="[\w-]+"\s+data-series="(\d+)"', html)}


def test_roofline_intensity_is_flop_per_byte_of_the_shape():
    # bf16 8192³: 2·8192³ FLOP over (2·2·8192² read + 2·8192² written) bytes = 8192/3.
    assert intensity("bf16", 8192, 8192, 8192) == pytest.approx(8192 / 3)
    # int8 accumulates into int32: 4-byte outputs.
    assert intensity("int8", 4096, 4096, 4096) == pytest.approx(
        2 * 4096**3 / (2 * 4096**2 + 4 * 4096**2))


def test_roofline_has_a_roof_per_precision_and_the_measured_points():
    report = build_report(load(TWO_GPU))
    roof = report.section("compute")[0].roofline
    assert {r.precision: r.peak for r in roof.roofs} == {
        "fp64": 67.0, "fp32": 67.0, "tf32": 494.5, "bf16": 989.5, "fp16": 989.5,
        "fp8": 1979.0, "int8": 1979.0}  # the H200 SXM datasheet (specs/data/gpus.yaml)
    assert roof.bandwidth_spec_gbps == 4800
    assert {(p.precision, p.gpu) for p in roof.points} == {
        (p, g) for p in ("fp64", "fp32", "tf32", "bf16", "fp16", "fp8", "int8") for g in (0, 1)}
    bf16 = next(p for p in roof.points if p.precision == "bf16" and p.gpu == 0)
    assert bf16.value == pytest.approx(690.877, rel=1e-5) and bf16.shape == "8192×8192×8192"
    fig = figure(report.section("compute")[0])
    assert len(fig["data"]) == report.section("compute")[0].trace_count == 7 + 1 + 2


def test_sections_appear_only_with_their_data():
    one = render_run_html(load(ONE_GPU), telemetry_checked=False)
    assert set(charts_of(one)) == {"roofline", "transfer"}  # no p2p, no collectives: 1 GPU
    assert 'id="collectives"' not in one and 'id="training"' not in one
    assert 'id="telemetry"' not in one and 'id="cost"' not in one
    two = render_run_html(load(TWO_GPU))
    assert charts_of(two) == {"roofline": 10, "transfer": 1, "p2p-0": 1, "p2p-1": 1,
                              "collectives": 5}
    native = charts_of(render_run_html(load(NATIVE)))
    assert native == {"collectives": 10}  # ours and nccl-tests' for each of 5 operations


def test_collectives_beside_nccl_tests_share_colour_and_differ_in_dash():
    report = build_report(load(NATIVE))
    fig = figure(report.section("collectives")[0])
    traces = {t["name"]: t for t in fig["data"]}
    ours, theirs = traces["all_reduce (gpuaudit)"], traces["all_reduce (nccl-tests)"]
    assert ours["line"]["color"] == theirs["line"]["color"]
    assert (ours["line"]["dash"], theirs["line"]["dash"]) == ("solid", "dash")
    assert ours["x"][0] == 1 << 20 and ours["x"][-1] == 4 << 30 and len(ours["x"]) == 13
    # nccl-tests' 1 MiB all-reduce (README: 68.6 GB/s vs ours 51.8 out of place).
    assert theirs["y"][0] == pytest.approx(68.62)


def test_every_figure_is_valid_plotly():
    go = pytest.importorskip("plotly.graph_objects")
    report = build_report(load(TWO_GPU))
    for chart in report.all_charts:
        go.Figure(figure(chart))  # raises on an unknown property or a bad value


def test_caveats_and_verdict_at_the_top():
    html = render_run_html(contended(load(TWO_GPU)).model_copy(
        update={"status": RunStatus.PARTIAL}))
    top = html[:html.index('id="findings"')]
    assert 'id="caveats"' in top and "partial:" in top and "contended: another process" in top
    assert "Verdict: <span class=\"verdict WARN\">WARN</span>" in top
    clean = render_run_html(load(TWO_GPU))
    assert 'id="caveats"' not in clean


def test_the_file_needs_no_network():
    html = render_run_html(load(TWO_GPU))
    assert not re.search(r'<(script|link|img)[^>]+(src|href)="(https?:)?//', html)
    assert "Plotly.newPlot" in html and len(html) > 3_000_000  # plotly.js is inside
    for blob in re.findall(r'<script type="application/json" id="fig-[\w-]+">(.*?)</script>',
                           html, re.S):
        json.loads(blob)


def test_text_from_tools_is_escaped():
    run = load(ONE_GPU)
    bad = Finding(code="x.y", severity=Severity.WARN, message="<script>alert(1)</script>",
                  advice="</script><b>")
    html = render_run_html(run.model_copy(update={"findings": (bad,)}))
    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    chart_html = figure_json(build_report(run).all_charts[0])
    assert "</" not in chart_html


def _workload_run():
    """Training and inference figures named and parametrised as `bench train|infer` write
    them (workloads/records.py, suite_infer.py, server.py)."""
    base = load(ONE_GPU)
    figures = []
    for mode, prec, rate in (("fp32", "fp32", 90.0), ("tf32", "tf32", 210.0),
                             ("amp_bf16+compile", "bf16", 520.0)):
        params = {"model": "gpt-124m", "mode": mode, "precision": prec, "batch": 32}
        figures.append(measure("train", f"gpt-124m/{mode}/throughput", "samples/s",
                               [rate] * 5, warmup=2, gpu_index=0, params=params))
        figures.append(measure("train", f"gpt-124m/{mode}/tokens", "tokens/s",
                               [rate * 1024] * 5, warmup=2, gpu_index=0, params=params))
    figures.append(measure("train", "gpt-124m/ddp/n2/throughput", "samples/s", [1000.0] * 3,
                           warmup=1, params={"model": "gpt-124m", "gpus": 2}))
    for mode in ("eager", "cudagraph"):
        for batch, p50 in ((1, 0.9), (8, 1.6), (64, 6.0), (256, 17.0)):
            p50 = p50 * (0.5 if mode == "cudagraph" and batch == 1 else 1.0)
            figures.append(measure(
                "infer", f"resnet50/bf16/{mode}/b{batch}/latency", "ms", [p50] * 5, warmup=3,
                gpu_index=0, params={"model": "resnet50", "precision": "bf16", "mode": mode,
                                     "batch": batch, "p50_ms": p50, "p99_ms": p50 * 1.3}))
    figures.append(measure("infer", "resnet50/bf16/serve/max_qps", "QPS", [4200.0],
                           warmup=0, gpu_index=0, params={"model": "resnet50", "slo_ms": 10.0}))
    return base.model_copy(update={"measurements": (*base.measurements, *figures)})


def test_workload_sections_appear_when_present():
    html = render_run_html(_workload_run())
    charts = charts_of(html)
    # samples/s and tokens/s per model; eager and cudagraph, p50 and p99 each.
    assert charts["train-0"] == 1 and charts["train-1"] == 1 and charts["infer-0"] == 4
    assert 'id="training"' in html and 'id="inference"' in html
    assert "resnet50/bf16/serve/max_qps" in html[html.index('id="inference"'):]
    report = build_report(_workload_run())
    bars = figure(report.section("train")[0])["data"][0]  # samples/s (sorted before tokens/s)
    assert bars["x"] == ["fp32", "tf32", "amp_bf16+compile"] and bars["y"] == [90.0, 210.0,
                                                                                520.0]
    lines = {t["name"]: t for t in figure(report.section("infer")[0])["data"]}
    assert lines["cudagraph p50"]["x"] == [1, 8, 64, 256]
    assert lines["cudagraph p50"]["y"][0] == pytest.approx(0.45)
    assert lines["eager p99"]["y"][-1] == pytest.approx(17.0 * 1.3)
    assert lines["eager p99"]["line"]["dash"] == "dash"


def test_diagnosis_section_appears_with_a_doctor_document():
    run = load(ONE_GPU)
    assert 'id="diagnosis"' not in render_run_html(run)
    html = render_run_html(run, diagnosis=diagnosis())
    section = html[html.index('id="diagnosis"'):]
    assert "input-bound" in section and "62%" in section
    assert "DataLoader(num_workers=8, pin_memory=True)" in section and "1.8–2.5× faster" in section
    md = render_run_markdown(run, diagnosis=diagnosis())
    assert "- **WARN `input-bound`** (62% of the time, high confidence)" in md


def test_telemetry_section_from_history_points():
    run = load(ONE_GPU)
    t0 = run.started_at
    points = [HistoryPoint(time=t0 + timedelta(seconds=i), hostname="vm", gpu=0,
                           resolution=Resolution.RAW, samples=1, error_samples=0,
                           power_w=600.0 + i, sm_clock_mhz=1980.0, sm_activity_pct=95.0,
                           tensor_activity_pct=None, utilization_gpu_pct=100.0)
              for i in range(5)]
    report = build_report(run, telemetry=points)
    ids = [c.id for c in report.section("telemetry")]
    # No tensor readings: no tensor chart (and no temperature either).
    assert ids == ["telemetry-power_w", "telemetry-sm_clock_mhz", "telemetry-sm_activity_pct",
                   "telemetry-utilization_gpu_pct"]
    assert report.section("telemetry")[0].series[0].y == (600.0, 601.0, 602.0, 603.0, 604.0)


def test_markdown_has_the_same_facts():
    md = render_run_markdown(contended(load(TWO_GPU)))
    assert md.startswith("# gpuaudit report: vm, 2× NVIDIA H200")
    assert "> **This run's figures need care:**" in md and "contended" in md
    assert "| matmul | bf16 | 0 | 690.9 TFLOP/s | 989.5 | 69.8% |" in md
    assert "### Collectives: bus bandwidth vs message size" in md
    assert "| GPU0 | X | NV18 |" in md
    # Every table row has as many cells as its header.
    for block in re.findall(r"((?:^\|.*\|\n)+)", md, re.M):
        rows = [r for r in block.splitlines() if r.strip()]
        widths = {len(re.split(r"(?<!\\)\|", r)) for r in rows}
        assert len(widths) == 1, block


def test_compare_page_lists_regressions_first():
    a = load(ONE_GPU)
    b = with_figure(a, "matmul", "bf16", 0.8)
    html = render_compare_html(compare_runs(a, b))
    assert "Regression beyond 5%" in html
    table = html[html.index('id="regressions-table"'):]
    assert table.index("matmul/bf16") < table.index("</table>")
    assert charts_of(html) == {"changes": 1}
