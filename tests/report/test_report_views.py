"""What each terminal view says, from records built by the library (not hand-written text):
the figures, their currency and basis, the reasons, what could not be read."""

from __future__ import annotations

import io
from datetime import date, datetime, timedelta, timezone
from pathlib import Path

import pytest
from rich.console import Console

from gpuaudit.cost.pricing import compare_job, make_job
from gpuaudit.cost.tco import tco
from gpuaudit.cost.work import idle_cost, price_performance
from gpuaudit.inspect import inspect_machine, read_snapshot
from gpuaudit.model import Finding, Severity
from gpuaudit.model.cost import Billing, Offer
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.report import cost_view, pricing_view, recommend_view, terminal
from gpuaudit.report.monitor_view import history_table, sample_line

FIX = Path(__file__).parents[1] / "fixtures"
T0 = datetime(2026, 1, 1, tzinfo=timezone.utc)


def render(renderable, width: int = 160) -> str:
    console = Console(record=True, width=width, file=io.StringIO(), color_system=None)
    console.print(renderable)
    text = console.export_text().translate({ord(c): " " for c in BOX})
    return " ".join(text.split())  # words as read, whatever the wrapping and the borders


BOX = "│┃━┏┓┗┛┡┩╇┳┻─└┘┌┐├┤┼╋┯┷┠┨╂"


OFFER = Offer(provider="testcloud", instance_type="h200x8", region="east",
              gpu_model="h200-sxm", gpu_count=8, currency="EUR", on_demand_price_per_hour=40.0,
              spot_price_per_hour=16.0, reserved_1y_price_per_hour=28.0,
              billing=Billing.HOUR, billing_minimum_s=60, source="test sheet",
              price_date=date(2026, 6, 1), vcpus=192, ram_gib=2048)


# -- cost ---------------------------------------------------------------------------------------

def test_job_view_prices_each_option_in_its_currency():
    result = compare_job(OFFER, make_job(OFFER, gpu_hours=80), mtbi_hours=24.0,
                         deadline_hours=20)
    text = render(pricing_view.job_view(result))
    assert "testcloud/h200x8@east: 80 GPU-hours on 1 × 8 GPUs = 10.00 h" in text
    assert "deadline 20.00 h" in text
    assert "400.00 EUR" in text  # on-demand: 10 h × 40 EUR
    assert "billed 10.00 h per instance (hour, 60 s minimum)" in text
    assert "interruptions" in text and "checkpoint every" in text  # the spot plan's basis
    assert result.verdict in text
    assert "prices: test sheet, 2026-06-01" in text


def test_tco_view_shows_each_part_and_the_break_even():
    t = tco(capex=250_000, gpu_count=8, amortization_years=5, power_w=10_000, pue=1.25,
            price_per_kwh=0.10, colocation_per_month=1000, maintenance_pct_per_year=5,
            utilization=0.5, rental_price_per_gpu_hour=2.0, currency="EUR")
    text = render(pricing_view.tco_view(t))
    assert "capital (per year) 50,000.00 EUR 250,000.00 EUR over 5 y" in text
    assert "energy (per year) 10,950.00 EUR 10,000 W (given) × PUE 1.25" in text
    assert "total (per year) 85,450.00 EUR 8 GPUs" in text
    assert f"owning is cheaper above {t.break_even_utilization:.1%} utilization" in text
    never = tco(capex=250_000, gpu_count=8, power_w=8000, rental_price_per_gpu_hour=0.5)
    assert "owning never pays" in render(pricing_view.tco_view(never))


def test_work_view_labels_estimates_and_names_the_price():
    p = price_performance(OFFER, model_params=7e9)
    text = render(pricing_view.work_view(p))
    assert "testcloud/h200x8@east (8 × h200-sxm), on-demand 40.00 EUR per hour" in text
    assert "PFLOP-hour" in text and "1M training tokens" in text
    assert "estimate" in text and "measured" not in text


def test_idle_view_counts_idle_hours_and_their_cost():
    points = [HistoryPoint(time=T0 + timedelta(seconds=10 * i), hostname="n1", gpu=g,
                           resolution=Resolution.RAW, samples=1, error_samples=0,
                           utilization_gpu_pct=0.0 if g == 0 else 90.0)
              for i in range(61) for g in (0, 1)]
    c = idle_cost(points, since=T0, until=T0 + timedelta(minutes=10), price_per_gpu_hour=3.6,
                  currency="USD")
    text = render(pricing_view.idle_view(c))
    assert f"{c.idle_gpu_hours:,.3g} idle GPU-hours" in text
    assert f"{pricing_view.money(c.idle_cost, 'USD')} at 3.60 USD per GPU-hour" in text
    assert "never idle" in text  # missing readings are unknown, and it says so
    empty = idle_cost([], since=T0, until=T0 + timedelta(hours=1), price_per_gpu_hour=1.0)
    assert "no telemetry in that range" in render(pricing_view.idle_view(empty))


def test_offer_view_and_documents():
    text = render(cost_view.offer_view(OFFER, "catalog.csv:7"))
    assert "on-demand 40.00 EUR/h (5.00 EUR per GPU-hour)" in text
    assert "reserved 3 years — (not published)" in text
    assert "billing per hour, first 60 s billed in full" in text
    assert "host 192 vCPUs, 2048 GiB RAM" in text and "from catalog.csv:7" in text
    doc = cost_view.offer_doc(OFFER, "catalog.csv:7")
    assert doc["on_demand_price_per_gpu_hour"] == 5.0 and doc["from"] == "catalog.csv:7"
    assert cost_view.offers_doc([OFFER])["offers"][0]["key"] == "testcloud/h200x8@east"
    assert cost_view.price(None) == "—" and cost_view.price(2.5) == "2.50"
    assert cost_view.price(1.81725) == "1.8172" or cost_view.price(1.81725) == "1.8173"


def test_catalog_findings_table_summary_and_document():
    findings = [Finding(code="catalog.stale", severity=Severity.WARN, message="old price",
                        evidence={"file": "c.csv", "line": 3}),
                Finding(code="catalog.load", severity=Severity.FAIL, message="bad row",
                        evidence={"file": "c.csv"})]
    text = render(cost_view.findings_table(findings))
    assert "stale c.csv:3 old price" in text and "load c.csv bad row" in text
    assert render(cost_view.findings_summary(findings, 12)) == \
        "12 offers checked: 1 errors, 1 warnings"
    doc = cost_view.findings_doc(findings, 12)
    assert (doc["errors"], doc["warnings"], doc["offers_checked"]) == (1, 1, 12)


def test_recommend_view_says_why_and_what_was_left_out():
    from gpuaudit.cost.recommend import TrainTask, recommend

    small = OFFER.model_copy(update={"instance_type": "t4x1", "gpu_model": "t4",
                                     "gpu_count": 1, "currency": "USD"})
    big = OFFER.model_copy(update={"currency": "USD"})
    result = recommend(TrainTask(params=7e9, tokens=1e11), [small, big], top=3)
    text = render(recommend_view.recommend_view(result))
    assert "Recommended offers (USD)" in text and "Prices in USD" in text
    assert f"#1 {result.ranked[0].offer.key}: " in text
    assert "Excluded (cheapest first)" in text and "testcloud/t4x1@east" in text
    assert "Assumptions: MFU 40%" in text
    assert f"{result.considered} offers considered, {result.feasible} feasible" in text
    none = recommend(TrainTask(params=7e9, tokens=1e11), [small], top=3)
    assert "No offer meets the task's constraints." in render(recommend_view.recommend_view(
        none))


# -- inspect and runs -----------------------------------------------------------------------------

@pytest.fixture(scope="module")
def run():
    return inspect_machine(read_snapshot(FIX / "h200-2gpu" / "inspect.json"))


def test_host_view_and_verdict(run):
    text = render(terminal.host_view(run.machine))
    h = run.machine.host
    assert f"host {h.hostname}" in text and "container: docker, hypervisor: firecracker" in text
    assert f"driver {run.machine.driver_version}" in text
    verdict = render(terminal.verdict_line(run))
    n = {sev: sum(f.severity is sev for f in run.findings) for sev in Severity}
    assert verdict == (f"verdict: {run.verdict.value} ({n[Severity.FAIL]} fail, "
                       f"{n[Severity.WARN]} warn, {n[Severity.INFO]} info, "
                       f"{n[Severity.PASS]} checks passed)")
    assert n[Severity.WARN] >= 1 and n[Severity.PASS] > 10
    from gpuaudit.model import RunStatus

    partial = run.model_copy(update={"status": RunStatus.PARTIAL})
    assert render(terminal.verdict_line(partial)).endswith("[partial]")


def test_topology_and_what_could_not_be_read(run):
    text = render(terminal.topology_table(run.machine))
    assert "GPU0 X NV18" in text and "GPU1 NV18 X" in text and "* = no peer access" in text
    unread = render(terminal.unavailable_table(run.machine))
    reasons = {r for g in run.machine.gpus for r in g.unavailable.values()}
    assert reasons and all(r in unread for r in reasons)


def test_inspect_view_hides_passes_unless_asked(run):
    brief, full = render(terminal.run_view(run)), render(terminal.run_view(run, show_all=True))
    assert any(f.severity is Severity.PASS for f in run.findings)
    assert "PASS" not in brief and "PASS" in full and "Not readable here" in full
    assert "nvlink" in full.split() and "nvlink" not in brief.split()


def test_history_table_and_sample_line():
    from gpuaudit.model import GpuSample, Sample

    p = HistoryPoint(time=T0, hostname="n1", gpu=0, resolution=Resolution.MINUTE, samples=60,
                     error_samples=0, utilization_gpu_pct=97.4, memory_used_bytes=1.3e11,
                     power_w=655.2, temperature_gpu_c=71.0, sm_clock_mhz=1980.0,
                     clock_event_reasons=("sw_power_cap",))
    text = render(history_table([p]))
    assert "2026-01-01 00:00:00 n1 0 1m 97" in text and "130.0 655 71 1980 sw_power_cap" in text
    line = sample_line(Sample(time=T0, hostname="n1", interval_s=1.0, gpus=(
        GpuSample(index=0, uuid="G", utilization_gpu_pct=50.0, power_w=300.0,
                  temperature_gpu_c=60.0, memory_used_bytes=2e10, memory_total_bytes=1.4e11),
        GpuSample(index=1, uuid="H", error="GPU is lost"))))
    assert line == "00:00:00  gpu0 act 50% mem 20.0/140GB 300W 60C  gpu1 ERROR GPU is lost"
