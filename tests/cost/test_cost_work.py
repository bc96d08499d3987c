"""Price-performance from a measured run or from datasheet estimates; idle cost from the
monitor's history (synthetic points, and a real store round trip)."""

from __future__ import annotations

from datetime import date, datetime, timedelta, timezone

import pytest

from gpuaudit.cost.work import activity_pct, idle_cost, price_performance
from gpuaudit.errors import BadInputError
from gpuaudit.model import Billing, GpuSample, Measurement, Offer, Sample, load_run
from gpuaudit.model.history import HistoryPoint, Resolution
from gpuaudit.model.pricing import PriceKind
from gpuaudit.store import Store
from tests.conftest import FIXTURES

H200_BF16 = 989.5  # the packaged spec's dense bf16 peak
T0 = datetime(2025, 3, 1, 12, 0, tzinfo=timezone.utc)


def offer(**kw) -> Offer:
    base = dict(provider="test", instance_type="h200x8", gpu_model="h200-sxm", gpu_count=8,
                on_demand_price_per_hour=40.0, spot_price_per_hour=16.0,
                billing=Billing.SECOND, source="https://example.test/prices",
                price_date=date(2025, 6, 1))
    return Offer(**{**base, **kw})


def h200_run(*measurements: Measurement):
    """The real two-H200 inspect run, with benchmark figures planted."""
    run = load_run((FIXTURES / "h200-2gpu" / "inspect.json").read_text(), origin="fixture")
    return run.model_copy(update={"measurements": measurements})


def matmul(gpu: int, value: float | None, name: str = "bf16") -> Measurement:
    return Measurement(suite="matmul", name=name, unit="TFLOP/s", value=value, gpu_index=gpu,
                       params={"device": "cuda", "regime": "sustained"})


def by_metric(pp, metric):
    found = [r for r in pp.results if r.metric == metric]
    assert len(found) == 1, pp.results
    return found[0]


def test_pflop_hour_from_a_measured_run():
    run = h200_run(matmul(0, 700.0), matmul(1, 720.0), matmul(0, 800.0, "bf16_burst"),
                   matmul(1, None))
    pp = price_performance(offer(), run=run)
    r = by_metric(pp, "pflop_hour")
    # median(700, 720) = 710 TFLOP/s per GPU × 8 = 5.68 PFLOP/s; 40 / 5.68 per PFLOP-hour.
    assert r.basis == "measured" and r.run_id == run.id
    assert r.rate == pytest.approx(5.68)
    assert r.cost == pytest.approx(40 / 5.68)
    assert r.currency == "USD" and r.unit == "USD per PFLOP-hour"
    assert "72% of the 989.5" in r.assumptions[0]
    assert pp.price.source == "https://example.test/prices"
    assert pp.price.price_date == date(2025, 6, 1)
    assert pp.notes == ()  # the run's GPUs are the offer's model


def test_estimate_without_a_run_is_labelled_and_uses_the_datasheet_peak():
    pp = price_performance(offer(), kind=PriceKind.SPOT, model_params=7e9)
    r = by_metric(pp, "pflop_hour")
    assert r.basis == "estimate" and r.run_id is None
    assert r.cost == pytest.approx(16.0 / (H200_BF16 * 8 / 1000))
    t = by_metric(pp, "million_training_tokens")
    # tokens/s = 0.40 × 989.5e12 × 8 / (6 × 7e9) = 75,390.48
    rate = 0.4 * H200_BF16 * 1e12 * 8 / 42e9
    assert t.rate == pytest.approx(rate)
    assert t.cost == pytest.approx(16.0 / (rate * 3600) * 1e6)  # ≈ 0.0590 USD
    assert t.basis == "estimate" and "MFU 40% assumed" in t.assumptions[0]


def test_measured_tokens_scale_to_the_offers_gpu_count_and_mismatches_are_noted():
    train = Measurement(suite="train", name="gpt-small", unit="tokens/s", value=10_000.0)
    run = h200_run(matmul(0, 700.0), matmul(1, 720.0), train)
    pp = price_performance(offer(gpu_model="h100-sxm"), run=run)
    t = by_metric(pp, "million_training_tokens")
    assert t.basis == "measured" and t.run_id == run.id
    assert t.rate == 40_000.0  # 10,000 on 2 GPUs → 8 GPUs
    assert t.cost == pytest.approx(40 / (40_000 * 3600) * 1e6)
    assert any("measured on h200-sxm" in n and "h100-sxm" in n for n in pp.notes)


def test_mfu_above_the_measured_matmul_ceiling_is_flagged():
    run = h200_run(matmul(0, 700.0), matmul(1, 720.0))
    pp = price_performance(offer(), run=run, model_params=7e9, mfu=0.8)
    assert any("above this server's measured bf16 matmul ceiling (72% of peak)" in n
               for n in pp.notes)
    fine = price_performance(offer(), run=run, model_params=7e9, mfu=0.4)
    assert fine.notes == ()


def test_inferences_and_epochs():
    pp = price_performance(offer(), inferences_per_s=500, samples_per_s=2500,
                           dataset_samples=1_281_167)
    inf = by_metric(pp, "thousand_inferences")
    assert inf.cost == pytest.approx(40 / (500 * 3600) * 1000)  # 0.0222 USD
    assert inf.basis == "given"
    ep = by_metric(pp, "epoch")
    assert ep.cost == pytest.approx(40 * 1_281_167 / 2500 / 3600)  # 5.694 USD
    tokens = price_performance(offer(), model_params=1e9, dataset_tokens=1e9)
    epoch = by_metric(tokens, "epoch")
    rate = 0.4 * 989.5e12 * 8 / 6e9
    assert epoch.cost == pytest.approx(40 * 1e9 / rate / 3600)
    assert epoch.basis == "estimate"


@pytest.mark.parametrize(("kw", "needle"), [
    ({"mfu": 1.2}, "MFU"),
    ({"mfu": 0}, "MFU"),
    ({"model_params": -1}, "model parameters"),
    ({"dataset_samples": 1000}, "samples/s"),
    ({"dataset_tokens": 1000}, "token rate"),
    ({"kind": PriceKind.RESERVED_1Y}, "reserved 1y"),
])
def test_price_performance_bad_inputs(kw, needle):
    with pytest.raises(BadInputError, match=needle):
        price_performance(offer(), **kw)


# -- idle cost -------------------------------------------------------------------------------


def point(t_s: float, gpu: int = 0, resolution=Resolution.RAW, **readings) -> HistoryPoint:
    return HistoryPoint(time=T0 + timedelta(seconds=t_s), hostname="node-a", gpu=gpu,
                        resolution=resolution, samples=1 if resolution is Resolution.RAW else 60,
                        error_samples=readings.pop("error_samples", 0), **readings)


def test_activity_prefers_sm_activity_over_utilization():
    assert activity_pct(point(0, sm_activity_pct=2.0, utilization_gpu_pct=100.0)) == 2.0
    assert activity_pct(point(0, utilization_gpu_pct=3.0)) == 3.0
    assert activity_pct(point(0)) is None


def test_idle_hours_from_raw_and_minute_points():
    pts = [
        # GPU 0: raw every 30 s for 10 minutes; idle (SM 1 %) the first 5 minutes, busy after.
        *[point(30 * i, sm_activity_pct=1.0 if i < 10 else 60.0, utilization_gpu_pct=100.0)
          for i in range(20)],
        # GPU 1: 1-minute rollups, utilization only: 3 idle minutes, 1 busy, 1 unreadable.
        point(0, gpu=1, resolution=Resolution.MINUTE, utilization_gpu_pct=0.0),
        point(60, gpu=1, resolution=Resolution.MINUTE, utilization_gpu_pct=4.9),
        point(120, gpu=1, resolution=Resolution.MINUTE, utilization_gpu_pct=4.0),
        point(180, gpu=1, resolution=Resolution.MINUTE, utilization_gpu_pct=5.0),
        point(240, gpu=1, resolution=Resolution.MINUTE, error_samples=60,
              error="GPU is lost"),
    ]
    c = idle_cost(pts, since=T0, until=T0 + timedelta(hours=1), price_per_gpu_hour=3.6)
    g0, g1 = c.gpus
    assert g0.observed_hours == pytest.approx(600 / 3600)  # the last sample covers one step
    assert g0.idle_hours == pytest.approx(300 / 3600)
    assert g1.observed_hours == pytest.approx(300 / 3600)
    assert g1.idle_hours == pytest.approx(180 / 3600)  # 5.0 % is not under 5 %
    assert g1.unknown_hours == pytest.approx(60 / 3600)
    assert c.idle_gpu_hours == pytest.approx(480 / 3600)
    assert c.idle_cost == pytest.approx(480 / 3600 * 3.6)  # 0.48 USD
    assert c.idle_fraction == pytest.approx(480 / 900)
    assert c.currency == "USD" and c.price_source == "user"


def test_gaps_and_the_time_range_clip_what_counts():
    pts = [point(0, sm_activity_pct=0.0), point(1000, sm_activity_pct=0.0),
           point(1010, sm_activity_pct=0.0)]
    # 0 → 1000: a gap; the first point counts for 120 s only.
    c = idle_cost(pts, since=T0, until=T0 + timedelta(hours=1), price_per_gpu_hour=1.0)
    assert c.idle_gpu_hours == pytest.approx((120 + 10 + 10) / 3600)
    clipped = idle_cost(pts, since=T0 + timedelta(seconds=60), until=T0 + timedelta(seconds=1005),
                        price_per_gpu_hour=1.0)
    assert clipped.idle_gpu_hours == pytest.approx((60 + 5) / 3600)


def test_idle_priced_from_an_offer_per_gpu():
    pts = [point(60 * i, resolution=Resolution.MINUTE, sm_activity_pct=0.0) for i in range(60)]
    c = idle_cost(pts, since=T0, until=T0 + timedelta(hours=2), offer=offer())
    assert c.price_per_gpu_hour == 5.0  # 40 / 8 GPUs
    assert c.idle_cost == pytest.approx(5.0)
    assert c.price_date == date(2025, 6, 1)
    with pytest.raises(BadInputError, match="one of them"):
        idle_cost(pts, since=T0, until=T0 + timedelta(hours=1))
    with pytest.raises(BadInputError, match="not before"):
        idle_cost(pts, since=T0, until=T0, price_per_gpu_hour=1.0)


def test_idle_cost_from_a_real_store(tmp_path):
    url = f"sqlite:///{tmp_path / 'h.db'}"
    with Store(url) as store:
        for i in range(121):  # 2 minutes at 1 s: GPU 0 idle, GPU 1 busy
            at = T0 + timedelta(seconds=i)
            store.save_sample(Sample(time=at, hostname="node-a", interval_s=1.0, gpus=(
                GpuSample(index=0, uuid="GPU-0", utilization_gpu_pct=0, sm_activity_pct=0.0),
                GpuSample(index=1, uuid="GPU-1", utilization_gpu_pct=100,
                          sm_activity_pct=88.0))))
        points = store.history(since=T0, until=T0 + timedelta(minutes=10))
    c = idle_cost(points, since=T0, until=T0 + timedelta(minutes=10), price_per_gpu_hour=3.5)
    assert [g.gpu for g in c.gpus] == [0, 1]
    assert c.gpus[0].idle_hours == pytest.approx(121 / 3600)
    assert c.gpus[1].idle_hours == 0
    assert c.idle_cost == pytest.approx(121 / 3600 * 3.5)
