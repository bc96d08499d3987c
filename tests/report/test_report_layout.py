"""The terminal views at 80 and 200 columns: every value shown whole (no '494…', no
'157.…'), in the layout that fits; and the layout helper's choices."""

from __future__ import annotations

import io
from datetime import date, datetime, timezone
from pathlib import Path

import pytest
from rich.console import Console
from rich.table import Table

from gpuaudit.bench.stats import measure, skipped
from gpuaudit.cost.catalog import load_catalog
from gpuaudit.inspect import inspect_machine, read_snapshot
from gpuaudit.model import GpuSample, Sample
from gpuaudit.model.cost import Offer
from gpuaudit.report.cost_view import offers_table, price
from gpuaudit.report.layout import Fit, stacked, transposed, without
from gpuaudit.report.monitor_view import monitor_view
from gpuaudit.report.recommend_view import recommend_view
from gpuaudit.report.terminal import PEAK_COLUMNS, measurements_table, run_view, runs_table
from gpuaudit.specs import lookup
from gpuaudit.telemetry.state import MonitorState

FIX = Path(__file__).parents[1] / "fixtures"
WIDTHS = (80, 200)
GIB = 1 << 30


def render(renderable, width: int) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    return console.export_text()


def assert_whole(text: str, values, width: int) -> None:
    missing = [v for v in values if v not in text]
    assert not missing, f"cut or lost at {width} columns: {missing}\n{text}"
    assert all(len(line) <= width for line in text.splitlines())
    assert "…" not in text


@pytest.fixture(scope="module")
def two_gpu_run():
    return inspect_machine(read_snapshot(FIX / "h200-2gpu" / "inspect.json"))


@pytest.mark.parametrize("width", WIDTHS)
def test_inspect_peaks_and_gpu_readings_whole(two_gpu_run, width):
    text = render(run_view(two_gpu_run), width)
    spec = lookup(nvml_name="NVIDIA H200", pci_device_id=two_gpu_run.machine.gpus[0]
                  .pci_device_id)
    peaks = [f"{spec.peak(p):.1f}" for p in PEAK_COLUMNS if spec.peak(p) is not None]
    assert "494.5" in peaks and "1979.0" in peaks
    gpu = two_gpu_run.machine.gpus[0]
    assert_whole(text, [*peaks, "ecc.uncorrectable-history", "140.4 GiB", "NV18",
                        f"{gpu.power.limit_w:.0f} W", "fabric ready"], width)
    assert text.count("ecc.uncorrectable-history") == 1


@pytest.mark.parametrize("width", WIDTHS)
def test_catalog_prices_whole(width):
    offers = sorted(load_catalog(FIX / "catalogs" / "user.csv").offers, key=lambda o: o.key)
    offers += [o for o in load_catalog().offers if o.provider in ("nebius", "aws")]
    text = render(offers_table(offers, title="offers"), width)
    values = [price(o.on_demand_price_per_hour) for o in offers]
    values += [price(o.spot_price_per_hour) for o in offers if o.spot_price_per_hour]
    values += [o.instance_type for o in offers]
    assert_whole(text, values, width)
    if width == 200:
        assert "billing" in text and "spot per GPU-h" in text  # all ten columns
    else:
        assert "catalog show OFFER" in text  # billing and date: where to find them


def _recommendation():
    from gpuaudit.cost.recommend import TrainTask, recommend

    def offer(provider, itype, gpu, n, od, spot):
        return Offer(provider=provider, instance_type=itype, region="us-east-1",
                     gpu_model=gpu, gpu_count=n, currency="USD", on_demand_price_per_hour=od,
                     spot_price_per_hour=spot, source="test", price_date=date(2026, 1, 1))

    offers = [offer("aws", "p6-b200.48xlarge", "b200", 8, 113.9, 13.03),
              offer("aws", "p5.48xlarge", "h100-sxm", 8, 98.32, 24.62),
              offer("gcp", "a3-highgpu-8g", "h100-sxm", 8, 88.25, None)]
    return recommend(TrainTask(params=7e9, tokens=1e12), offers, top=3)


@pytest.mark.parametrize("width", WIDTHS)
def test_recommend_costs_whole(width):
    result = _recommendation()
    text = render(recommend_view(result), width)
    costs = [f"{r.cost:,.2f}" for r in result.ranked]
    assert len(costs) == 3
    assert_whole(text, [*costs, *(f"{r.price_per_hour:,.2f}" for r in result.ranked),
                        "p6-b200.48xlarge", "a3-highgpu-8g"], width)


def _thermal_sample() -> MonitorState:
    hot = GpuSample(index=0, uuid="G0", name="NVIDIA H200", utilization_gpu_pct=100.0,
                    sm_activity_pct=97.0, memory_used_bytes=131 * GIB,
                    memory_total_bytes=140 * GIB, power_w=655.0, power_limit_w=700.0,
                    temperature_gpu_c=88.0, temperature_memory_c=91.0,
                    clock_event_reasons=("sw_thermal_slowdown", "hw_thermal_slowdown"),
                    ecc_uncorrected_volatile=2)
    cool = hot.model_copy(update={"index": 1, "uuid": "G1", "temperature_gpu_c": 41.0,
                                  "clock_event_reasons": (), "ecc_uncorrected_volatile": 0})
    return MonitorState(sample=Sample(time=datetime(2026, 1, 1, tzinfo=timezone.utc),
                                      hostname="h1", interval_s=1.0, gpus=(hot, cool)))


@pytest.mark.parametrize("width", WIDTHS)
def test_live_monitor_keeps_temperature_and_status(width):
    text = render(monitor_view(_thermal_sample()), width)
    assert_whole(text, ["88 °C", "41 °C", "HBM 91 °C", "sw_thermal_slowdown",
                        "hw_thermal_slowdown", "2 uncorrected ECC", "655/700 W"], width)
    assert "131/140 GiB" in text or "131.0/140.0 GiB" in text


@pytest.mark.parametrize("width", WIDTHS)
def test_runs_and_benchmarks_whole(width):
    from gpuaudit.store.store import RunSummary

    summary = RunSummary(id="0123456789ab", schema_version=1, kind="bench",
                         started_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                         finished_at=None, hostname="a-rather-long-host-name.example.com",
                         gpu_summary="8 × NVIDIA H200", verdict="WARN", status="partial",
                         tool_version="0", findings_fail=0, findings_warn=3)
    text = render(runs_table([summary]), width)
    assert_whole(text, ["0123456789ab", "2026-01-01 00:00:00", "(partial)"], width)
    figures = [measure("matmul", "bf16", "TFLOP/s", [812.345] * 5, warmup=1, spec_value=989.5),
               skipped("matmul", "fp8", "TFLOP/s", "torch built without fp8 support here")]
    text = render(measurements_table(figures), width)
    assert_whole(text, ["812.3 TFLOP/s", "989.5", "82.1%", "skipped"], width)


def test_runs_table_never_shows_an_enum_repr():
    from gpuaudit.model import RunStatus
    from gpuaudit.store.store import RunSummary

    summary = RunSummary(id="abc", schema_version=1, kind="run",
                         started_at=datetime(2026, 1, 1, tzinfo=timezone.utc),
                         finished_at=None, hostname="h", gpu_summary="", verdict="PASS",
                         status=RunStatus.PARTIAL, tool_version="0", findings_fail=0,
                         findings_warn=0)
    text = render(runs_table([summary]), 200)
    assert "(partial)" in text and "RunStatus" not in text


# -- the layout helper -----------------------------------------------------------------------------

def _wide() -> Table:
    t = Table(title="t")
    for h in ("name", "alpha", "beta", "gamma", "delta"):
        t.add_column(h)
    t.add_row("first-row-identifier", "1234567.891", "2234567.891", "3234567.891",
              "4234567.891")
    t.add_row("second-row-identifier", "5234567.891", "6234567.891", "7234567.891",
              "8234567.891")
    return t


def test_fit_keeps_the_table_when_it_fits():
    assert Fit(_wide()).choose(200) is not None
    assert "┃ name" in render(Fit(_wide()), 200)


def test_fit_drops_optional_columns_and_names_them():
    text = render(Fit(_wide(), optional=("delta", "gamma"), turn=False), 60)
    assert "delta, gamma: left out" in text and "4234567.891" not in text
    assert "1234567.891" in text and "2234567.891" in text


def test_fit_turns_few_rows_then_stacks():
    turned = render(Fit(_wide()), 60)
    assert "first-row-identifier" in turned and "┃ name" in turned  # rows became columns
    assert all(v in turned for v in ("1234567.891", "8234567.891"))
    stacked_text = render(Fit(_wide(), turn=False), 40)
    assert "alpha: 1234567.891" in " ".join(stacked_text.split()).replace(": ", ": ")
    assert "…" not in stacked_text


def test_without_and_transposed_keep_every_cell():
    narrow = without(_wide(), ["beta"])
    assert [str(c.header) for c in narrow.columns] == ["name", "alpha", "gamma", "delta"]
    assert list(narrow.columns[1].cells) == ["1234567.891", "5234567.891"]
    turned = transposed(_wide())
    assert [str(c.header) for c in turned.columns] == ["name", "first-row-identifier",
                                                       "second-row-identifier"]
    text = render(stacked(_wide()), 80)
    assert text.count("alpha:") == 2
