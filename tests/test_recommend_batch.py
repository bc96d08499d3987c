"""`recommend render` and `recommend simulate`: the speed ratios from the spec catalog (exact),
the ranking (a rendering user is not sent to an H200; an FP64 simulation is not sent to a
GeForce), instances for a deadline, idle GPUs, exclusions, and the command line with a real
store."""

from __future__ import annotations

import json
from datetime import date, datetime, timezone

import pytest
from typer.testing import CliRunner

from gpuaudit.cli import recommend as cli
from gpuaudit.cli import recommend_batch as cli_batch
from gpuaudit.cost.recommend import Constraints, speed
from gpuaudit.cost.recommend.batch import RenderTask, SimulateTask, recommend_batch
from gpuaudit.errors import BadInputError
from gpuaudit.model import Gpu, Host, Machine, Measurement, Run
from gpuaudit.model.cost import Offer
from gpuaudit.specs import load_catalog

CATALOG = load_catalog()
H200, H100, RTX4090 = (CATALOG.get(i) for i in ("h200-sxm", "h100-sxm", "rtx-4090"))


def offer(provider: str, gpu: str, count: int, od: float, mem_gib: float | None = None
          ) -> Offer:
    return Offer(provider=provider, instance_type=f"{gpu}x{count}", gpu_model=gpu,
                 gpu_count=count, on_demand_price_per_hour=od, gpu_memory_gib=mem_gib,
                 source="test", price_date=date(2025, 6, 1))


OFFERS = [offer("rent", "rtx-4090", 1, 0.40), offer("rent", "rtx-4090", 8, 3.20),
          offer("cloud", "l40s", 1, 1.80), offer("cloud", "h200-sxm", 1, 3.50),
          offer("cloud", "h100-sxm", 8, 24.0)]


def by_gpu(result):
    return {r.offer.key: r for r in result.ranked}


# --- the ratios ------------------------------------------------------------------------------


def test_raster_frames_are_bound_by_the_slowest_unit():
    # an H200 against an RTX 4090: 4.76× the bandwidth, but 16 of 528 texture units and 4 of
    # 132 SMs run graphics: texture fill 31.68 against 1290.24 GTexel/s binds
    s = speed.raster_ratio(H200, RTX4090)
    assert s.value == pytest.approx((528 * 4 / 132 * 1.98) / (512 * 2.52))
    assert "by texture fill" in s.basis
    assert speed.raster_ratio(RTX4090, RTX4090).value == pytest.approx(1.0)


def test_path_traced_frames_scale_by_fp32_and_rt_cores():
    s = speed.path_ratio(H200, RTX4090)
    assert s.value == pytest.approx(67 / (82.6 * 2))
    assert "no RT cores" in s.basis and "128 RT cores" in s.basis
    assert speed.path_ratio(H200, RTX4090, rt_speedup=1.0).value == pytest.approx(67 / 82.6)


def test_simulation_kernels_use_two_roofs_and_unpublished_fp64_is_a_64th():
    # n-body is compute-bound: FP64 34 TFLOP/s on an H100, 82.6/64 on an RTX 4090
    s = speed.sim_ratio(RTX4090, H100, "nbody", "fp64")
    assert s.value == pytest.approx(82.6 / 64 / 34)
    assert "1/64 of 82.6" in s.basis
    # an FP32 stencil is memory-bound on both
    assert speed.sim_ratio(RTX4090, H100, "stencil", "fp32").value == pytest.approx(1008 / 3350)
    # an FP64 FFT on the GeForce is compute-bound (1.29 TFLOP/s ÷ 120 flop a point)
    r = speed.sim_rate(RTX4090, "fft", "fp64")
    assert r.value == pytest.approx(82.6e12 / 64 / 120) and "compute-bound" in r.basis


# --- the ranking --------------------------------------------------------------------------------


def test_a_renderer_is_sent_to_the_geforce_not_the_h200():
    task = RenderTask(frames=2000, seconds_per_frame=45, base_gpu="rtx-4090", measured=True)
    res = recommend_batch(task, OFFERS, specs=CATALOG)
    ranked = [r.offer.key for r in res.ranked]
    assert ranked[0] == "rent/rtx-4090x8"  # 8 GPUs: 1/8 of the time at 8× the price
    rows = by_gpu(res)
    one = rows["rent/rtx-4090x1"]
    assert one.hours == pytest.approx(2000 * 45 / 3600) and one.measured
    h200 = rows["cloud/h200-sxmx1"]
    assert h200.hours == pytest.approx(25 / (67 / (82.6 * 2)))
    assert h200.cost > 10 * one.cost and not h200.measured
    assert ranked.index("cloud/h200-sxmx1") > ranked.index("rent/rtx-4090x1")
    assert rows["rent/rtx-4090x8"].hours == pytest.approx(25 / 8)


def test_raster_on_an_h200_costs_forty_times_more_per_frame():
    task = RenderTask(frames=1e5, seconds_per_frame=0.01, base_gpu="rtx-4090", scene="raster")
    rows = by_gpu(recommend_batch(task, OFFERS, specs=CATALOG))
    ratio = rows["cloud/h200-sxmx1"].hours / rows["rent/rtx-4090x1"].hours
    assert ratio == pytest.approx(1 / speed.raster_ratio(H200, RTX4090).value)
    assert ratio > 40


def test_an_fp64_simulation_is_not_sent_to_a_geforce():
    task = SimulateTask(kernel="nbody", precision="fp64", hours=12, base_gpu="h100-sxm")
    res = recommend_batch(task, OFFERS, specs=CATALOG, top=3)
    assert res.ranked[0].offer.key == "cloud/h200-sxmx1"
    rows = by_gpu(recommend_batch(task, OFFERS, specs=CATALOG))
    assert rows["rent/rtx-4090x1"].hours == pytest.approx(12 / (82.6 / 64 / 34))
    # one simulation on an 8-GPU node: 7 idle, no faster, eight times the price
    h100x8 = rows["cloud/h100-sxmx8"]
    assert h100x8.hours == pytest.approx(12) and any("7 of its 8 GPUs idle" in r
                                                     for r in h100x8.reasons)


def test_an_ensemble_fills_the_gpus_in_rounds():
    task = SimulateTask(kernel="stencil", precision="fp32", hours=2, base_gpu="h100-sxm",
                        jobs=12)
    rows = by_gpu(recommend_batch(task, OFFERS, specs=CATALOG))
    assert rows["cloud/h100-sxmx8"].hours == pytest.approx(2 * 2)  # 12 jobs on 8 GPUs: 2 rounds
    assert rows["rent/rtx-4090x8"].hours == pytest.approx(2 * 2 * 3350 / 1008)


def test_a_deadline_rents_more_instances_or_excludes():
    task = RenderTask(frames=2000, seconds_per_frame=45, base_gpu="rtx-4090")
    res = recommend_batch(task, OFFERS, constraints=Constraints(deadline_hours=10),
                          specs=CATALOG)
    one = by_gpu(res)["rent/rtx-4090x1"]
    assert one.nodes == 3 and one.hours == pytest.approx(25 / 3)
    tight = recommend_batch(task, [OFFERS[0]], constraints=Constraints(deadline_hours=0.1),
                            specs=CATALOG)
    assert not tight.ranked and tight.excluded[0].kind == "deadline"


def test_memory_and_unknown_gpus_are_exclusions_with_reasons():
    task = RenderTask(frames=100, seconds_per_frame=10, base_gpu="rtx-4090",
                      scene_memory_gb=30)
    res = recommend_batch(task, [*OFFERS, offer("x", "mystery", 1, 0.1)], specs=CATALOG)
    kinds = {e.offer_key: (e.kind, e.reason) for e in res.excluded}
    assert kinds["rent/rtx-4090x1"][0] == "memory" and "needs 30 GB" in kinds[
        "rent/rtx-4090x1"][1]
    assert kinds["x/mysteryx1"][0] == "spec"
    assert "cloud/l40sx1" in {r.offer.key for r in res.ranked}


def test_bad_tasks_are_bad_input():
    with pytest.raises(BadInputError, match="not in the spec catalog"):
        recommend_batch(RenderTask(frames=1, seconds_per_frame=1, base_gpu="voodoo2"), OFFERS)
    with pytest.raises(BadInputError, match="unknown scene"):
        RenderTask(frames=1, seconds_per_frame=1, base_gpu="rtx-4090", scene="toon")
    with pytest.raises(BadInputError, match="unknown kernel"):
        SimulateTask(kernel="lbm", precision="fp64", hours=1, base_gpu="h100-sxm")
    with pytest.raises(BadInputError, match="frames must be more than zero"):
        RenderTask(frames=0, seconds_per_frame=1, base_gpu="rtx-4090")


# --- the command line ----------------------------------------------------------------------------


@pytest.fixture
def catalog(monkeypatch):
    monkeypatch.setattr(cli, "load_offers", lambda path: OFFERS)


def invoke(*args):
    return CliRunner().invoke(cli_batch.recommend_app, list(args))  # with render, simulate


def test_cli_render_json(catalog):
    res = invoke("render", "--frames", "2000", "--seconds-per-frame", "45", "--on",
                 "NVIDIA GeForce RTX 4090", "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["task"]["base_gpu"] == "NVIDIA GeForce RTX 4090"
    assert doc["ranked"][0]["offer"]["gpu_model"] == "rtx-4090"
    assert doc["ranked"][0]["rate_unit"] == "frames/h"


@pytest.mark.parametrize("args", [
    ["render", "--frames", "10"],
    ["render", "--frames", "10", "--on", "rtx-4090"],
    ["render", "--frames", "10", "--on", "rtx-4090", "--seconds-per-frame", "1", "--run", "x"],
    ["simulate", "--kernel", "nbody", "--on", "h100-sxm"],
    ["simulate", "--kernel", "nbody", "--on", "h100-sxm", "--hours", "1", "--steps", "5"],
    ["simulate", "--kernel", "warp", "--on", "h100-sxm", "--hours", "1"],
])
def test_cli_bad_input_exits_2_with_one_line(catalog, args):
    res = invoke(*args)
    assert res.exit_code == 2, res.output
    lines = res.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: ")


def _bench_run() -> Run:
    now = datetime(2026, 12, 1, tzinfo=timezone.utc)
    machine = Machine(captured_at=now, host=Host(hostname="box", python_version="3.12"),
                      gpus=(Gpu(index=0, name="NVIDIA H200", pci_device_id=0x2335),))
    ms = (Measurement(suite="render", name="scene_4k", unit="frames/s", value=50.0,
                      gpu_index=0, verified=True, params={"renderer": "NVIDIA H200/PCIe"}),
          Measurement(suite="science", name="nbody_fp64", unit="GFLOP/s", value=10_000.0,
                      gpu_index=0, verified=True, params={"bodies": 32768, "device": "cuda"}),
          Measurement(suite="science", name="fft3d_fp32", unit="GFLOP/s", value=1.0,
                      params={"device": "cpu", "points": 32768}))
    return Run(id="r3nd3r", kind="bench", started_at=now, tool_version="t", machine=machine,
               measurements=ms)


def test_cli_reads_measured_figures_from_the_store(catalog, tmp_path):
    from gpuaudit.store import Store

    db = f"sqlite:///{tmp_path / 's.db'}"
    with Store(db) as store:
        store.save(_bench_run())
    res = invoke("render", "--frames", "1e5", "--run", "r3nd3r", "--resolution", "4k",
                 "--scene", "raster", "--db", db, "--json")
    assert res.exit_code == 0, res.output
    doc = json.loads(res.stdout)
    assert doc["task"]["seconds_per_frame"] == pytest.approx(1 / 50)
    h200 = next(r for r in doc["ranked"] if r["offer"]["gpu_model"] == "h200-sxm")
    assert h200["measured"] and h200["hours"] == pytest.approx(1e5 / 50 / 3600)
    # 1e6 steps of 20·32768² flop at the measured 10 TFLOP/s
    res = invoke("simulate", "--kernel", "nbody", "--run", "r3nd3r", "--steps", "1e6", "--db",
                 db, "--json")
    assert res.exit_code == 0, res.output
    hours = 1e6 * 20 * 32768 ** 2 / 10_000e9 / 3600
    assert json.loads(res.stdout)["task"]["hours"] == pytest.approx(hours)
    bad = invoke("simulate", "--kernel", "fft", "--precision", "fp32", "--run", "r3nd3r",
                 "--steps", "10", "--db", db)
    assert bad.exit_code == 2 and "measured on the CPU" in bad.stderr
    bad = invoke("render", "--frames", "10", "--run", "r3nd3r", "--db", db)
    assert bad.exit_code == 2 and "--scene raster" in bad.stderr
