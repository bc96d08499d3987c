"""`gpuaudit cost job|tco|work|idle` as a user runs them: a subprocess, a catalog file, a real
SQLite store; JSON figures checked exactly, bad input as one line and exit 2."""

from __future__ import annotations

import json
import os
from datetime import datetime, timedelta, timezone

import pytest

from gpuaudit.cost.pricing import daly_interval_s, expected_wall_time_s
from gpuaudit.model import GpuSample, Measurement, Sample, load_run
from gpuaudit.store import Store
from tests.support.cli import assert_one_line_error, gpuaudit

from .conftest import FIXTURES

CATALOG = """\
provider,instance_type,region,gpu_model,gpu_count,currency,on_demand_price_per_hour,\
spot_price_per_hour,reserved_1y_price_per_hour,reserved_3y_price_per_hour,billing,\
billing_minimum_s,source,price_date
testcloud,h200x8,east,h200-sxm,8,USD,40,16,25,18,second,60,https://example.test/p,2025-06-01
testcloud,h200x8,west,h200-sxm,8,USD,44,15,,,second,60,https://example.test/p,2025-06-01
testcloud,hourly1,east,h100-sxm,1,EUR,4,,,,hour,0,https://example.test/p,2025-05-01
"""


@pytest.fixture
def cat(tmp_path):
    path = tmp_path / "catalog.csv"
    path.write_text(CATALOG)
    return str(path)


def cost(*args: str):
    return gpuaudit("cost", *args, env={"GPUAUDIT_USER_CATALOG": os.devnull}, columns=200)


def doc(proc) -> dict:
    assert proc.returncode == 0, proc.stderr
    return json.loads(proc.stdout)


def test_job_json_exact_and_cheapest_region(cat):
    d = doc(cost("job", "--instance", "testcloud/h200x8", "--catalog", cat, "--gpu-hours", "320",
                 "--mtbi", "6h", "--checkpoint", "5m", "--restart", "10m", "--json"))
    assert d["kind"] == "cost.job" and d["schema_version"] >= 1
    assert d["offer"] == "testcloud/h200x8@east"  # 40 < 44 on-demand
    assert d["on_demand"]["cost"] == pytest.approx(40 * 40)
    wall = expected_wall_time_s(40 * 3600, daly_interval_s(300, 21600), 300, 600, 21600)
    assert d["spot"]["expected_wall_hours"] == pytest.approx(wall / 3600)
    assert d["spot"]["expected_cost"] == pytest.approx(round(wall + 0.5) / 3600 * 16, rel=1e-6)
    assert d["reserved_1y"]["break_even_utilization"] == pytest.approx(25 / 40)
    assert d["cheapest"] == "spot" and d["currency"] == "USD"
    assert d["price_source"] == "https://example.test/p" and d["price_date"] == "2025-06-01"


def test_job_deadline_in_the_terminal_view(cat):
    proc = cost("job", "--instance", "testcloud/h200x8@east", "--catalog", cat, "--gpu-hours",
                "320", "--interruption-rate", "0.15", "--deadline", "41h")
    assert proc.returncode == 0, proc.stderr
    assert "on-demand is cheapest within the 41 h deadline: 1,600.00 USD" in proc.stdout
    assert "misses" in proc.stdout and "Daly" in proc.stdout
    assert "prices: https://example.test/p, 2025-06-01" in proc.stdout


def test_job_hourly_billing_and_currency(cat):
    d = doc(cost("job", "--instance", "testcloud/hourly1@east", "--catalog", cat,
                 "--wall-hours", "2.1", "--json"))
    assert d["on_demand"]["billed_hours"] == 3 and d["on_demand"]["cost"] == 12
    assert d["currency"] == "EUR"
    assert {u["name"] for u in d["unpriced"]} == {"spot", "reserved_1y", "reserved_3y"}


def test_job_with_prices_on_the_command_line():
    d = doc(cost("job", "--price", "10", "--gpus", "4", "--gpu-hours", "8", "--json"))
    assert d["on_demand"]["cost"] == pytest.approx(20)  # 8 / 4 = 2 h × 10
    assert d["price_source"].startswith("user")


@pytest.mark.parametrize(("args", "needle"), [
    (("--gpu-hours", "10", "--interruption-rate", "1.0"), "interruption rate"),
    (("--gpu-hours", "0"), "--gpu-hours"),
    (("--gpu-hours", "10", "--checkpoint", "soon"), "--checkpoint"),
    (("--gpu-hours", "10", "--reserved-utilization", "1.5"), "utilization"),
    (("--gpu-hours", "10", "--deadline", "0h"), "--deadline"),
])
def test_job_bad_input_is_one_line_exit_2(cat, args, needle):
    assert_one_line_error(cost("job", "--instance", "testcloud/h200x8", "--catalog", cat, *args),
                          needle)


def test_unknown_instance_and_negative_price(cat):
    assert_one_line_error(cost("job", "--instance", "testcloud/nope", "--catalog", cat,
                               "--gpu-hours", "1"), "no offer")
    assert_one_line_error(cost("job", "--price", "-3", "--gpu-hours", "1"), "--price")


def test_tco_json_exact_and_against_an_instance(cat):
    d = doc(cost("tco", "--price-usd", "250000", "--gpus", "8", "--years", "5", "--power-w",
                 "10000", "--pue", "1.25", "--kwh-price", "0.10", "--colocation-per-month",
                 "1000", "--maintenance-pct", "5", "--utilization", "0.5",
                 "--rent-per-gpu-hour", "2", "--json"))
    assert d["annual_cost"] == pytest.approx(85_450)
    assert d["break_even_utilization"] == pytest.approx(85_450 / 140_160)
    assert d["cheaper"] == "rent" and d["currency"] == "USD"
    d = doc(cost("tco", "--capex", "250000", "--gpu-model", "h200-sxm", "--host-power-w",
                 "2400", "--instance", "testcloud/h200x8@east", "--catalog", cat, "--json"))
    assert d["power_w"] == 8 * 700 + 2400 and d["power_source"].startswith("TDP")
    assert d["rental_price_per_gpu_hour"] == 5.0
    proc = cost("tco", "--capex", "250000", "--power-w", "8000", "--rent-per-gpu-hour", "0.5")
    assert proc.returncode == 0, proc.stderr
    assert "owning never pays" in proc.stdout and "USD" in proc.stdout
    assert_one_line_error(cost("tco", "--capex", "1", "--power-w", "1", "--utilization", "2"),
                          "utilization")
    assert_one_line_error(cost("tco", "--capex", "1"), "--power-w")


def _store_with_run(tmp_path) -> tuple[str, str]:
    url = f"sqlite:///{tmp_path / 'runs.db'}"
    run = load_run((FIXTURES / "h200-2gpu" / "inspect.json").read_text(), origin="fixture")
    run = run.model_copy(update={"measurements": tuple(
        Measurement(suite="matmul", name="bf16", unit="TFLOP/s", value=v, gpu_index=i,
                    params={"device": "cuda"}) for i, v in enumerate((700.0, 720.0)))})
    with Store(url) as store:
        store.save(run)
    return url, run.id


def test_work_measured_and_estimated(cat, tmp_path):
    url, run_id = _store_with_run(tmp_path)
    d = doc(cost("work", "--instance", "testcloud/h200x8@east", "--catalog", cat, "--run",
                 run_id, "--db", url, "--params", "7B", "--json"))
    pflop = next(r for r in d["results"] if r["metric"] == "pflop_hour")
    assert pflop["basis"] == "measured" and pflop["run_id"] == run_id
    assert pflop["cost"] == pytest.approx(40 / 5.68)
    tokens = next(r for r in d["results"] if r["metric"] == "million_training_tokens")
    assert tokens["basis"] == "estimate"
    proc = cost("work", "--instance", "testcloud/h200x8@east", "--catalog", cat,
                "--price-kind", "spot")
    assert proc.returncode == 0, proc.stderr
    assert "estimate" in proc.stdout and "16.00 USD per hour" in proc.stdout
    assert_one_line_error(cost("work", "--instance", "testcloud/h200x8@east", "--catalog", cat,
                               "--mfu", "1.5"), "--mfu")
    assert_one_line_error(cost("work", "--instance", "testcloud/h200x8@east", "--catalog", cat,
                               "--precision", "fp4"), "precision")


def test_idle_from_the_store(tmp_path, cat):
    url = f"sqlite:///{tmp_path / 'h.db'}"
    t0 = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=1)
    with Store(url) as store:
        for i in range(0, 601, 10):  # 10 minutes, every 10 s: GPU 0 idle, GPU 1 busy
            store.save_sample(Sample(time=t0 + timedelta(seconds=i), hostname="n1",
                                     interval_s=10.0, gpus=(
                GpuSample(index=0, uuid="G0", utilization_gpu_pct=0),
                GpuSample(index=1, uuid="G1", utilization_gpu_pct=90))))
    d = doc(cost("idle", "--since", "2h", "--price-usd-per-gpu-hour", "3.6", "--db", url,
                 "--json"))
    assert d["idle_gpu_hours"] == pytest.approx(610 / 3600)
    assert d["idle_cost"] == pytest.approx(0.61)
    assert d["currency"] == "USD"
    d = doc(cost("idle", "--since", "2h", "--instance", "testcloud/h200x8@east", "--catalog",
                 cat, "--db", url, "--json"))
    assert d["price_per_gpu_hour"] == 5.0 and d["price_date"] == "2025-06-01"
    proc = cost("idle", "--since", "2h", "--price-usd-per-gpu-hour", "3.6", "--db", url)
    assert "0.61 USD at 3.60 USD per GPU-hour" in proc.stdout
    assert_one_line_error(cost("idle", "--db", url), "one price")
    assert_one_line_error(cost("idle", "--since", "yesterday-ish", "--db", url,
                               "--price-usd-per-gpu-hour", "1"), "--since")
