"""`gpuaudit predict`: the model's arithmetic with exact values (waves, Habitat's γ, all-reduce
interpolation and overlap, calibration and each change), the machine's rates read from the
real H200 recordings, a recorded op profile read back, and the CLI's answers to bad input.
No torch needed here (test_predict_capture.py has the torch side)."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.model import load_run
from gpuaudit.predict import Change, load_profile, machine_rates, predict, workloads_in
from gpuaudit.predict.ddp import simulate
from gpuaudit.predict.engine import U_ALLREDUCE, U_PRECISION
from gpuaudit.predict.hardware import (
    Roofs,
    exp_rate,
    habitat_gamma,
    scaled_roofs,
    split_k,
    tiles,
    wave_efficiency,
    waves,
)
from gpuaudit.predict.ideal import model_rate
from gpuaudit.predict.profile import Gemm, OpWork, StepProfile, Timed
from gpuaudit.predict.rates import AllReduce, MachineRates
from gpuaudit.specs.catalog import load_catalog
from tests.support import cli
from tests.support.predict import CPU_PROFILE, H200_2GPU, PREDICT

SPECS = load_catalog()


def h200_rates_run():
    return load_run(H200_2GPU.read_text())


# --- waves, tiles, γ -------------------------------------------------------------------------


def test_waves_count_whole_waves_of_one_resident_block_per_sm():
    assert waves(132, 132) == 1 and waves(133, 132) == 2 and waves(264, 132, 2) == 1
    assert waves(864, 132) == 7  # 6.55 blocks per SM (the profiler's ratio): 7 waves
    assert tiles(4096, 4096, 1) == 1024 and tiles(4096, 4096, 1, (192, 192)) == 22 * 22


def test_split_k_weighs_the_waves_against_the_partial_sums():
    # 768 × 3072 in 128² tiles is 144 tiles: 2 waves on 132 SMs, 144/264 used. Without a
    # cost for the partial sums, splitting K in 11 fills 12 waves exactly.
    assert split_k(768, 3072, 32768, 1, 132) == (11, 1.0)
    # With it (ridge 170 FLOP/B: 720 TFLOP/s ÷ 4.22 TB/s): split s costs its waves
    # (ceil(144 s / 132) · 132 / (144 s)) + 2 · s · 768 · 3072 · 4 B × 170 ÷ (2 · 768 · 3072
    # · 32768) = … + s · 4 · 170 / 32768. s = 7: 8·132/1008 + 7·680/32768.
    split, cost = split_k(768, 3072, 32768, 1, 132, 170.0)
    assert split == 7 and cost == pytest.approx(8 * 132 / 1008 + 7 * 680 / 32768)
    # A slice keeps ≥ 512 of K: K = 512 cannot split.
    assert split_k(1024, 1024, 512, 1, 132) == (1, 132 / 64)
    # The best of the tiles: 192² makes 4 × 16 = 64 tiles of 768 × 3072, split in 2: 128
    # of 132 SMs, plus the partial sums' 2 · 2 · 4 · 170 / 32768.
    want = 1 / (132 / 128 + 2 * 4 * 170 / 32768)
    assert wave_efficiency(768, 3072, 32768, 1, 132, 170.0) == pytest.approx(want)
    # 4096³: 1024 tiles of 128² in 8 waves (1024/1056 used); 512 of 128×256 in 4 (512/528).
    assert wave_efficiency(4096, 4096, 4096, 1, 132, 170.0) == pytest.approx(1024 / 1056)
    assert wave_efficiency(4096, 4096, 4096, 1, None) == 1.0


def test_exponential_rate_is_sfus_times_sms_times_the_clock():
    h200 = SPECS.get("h200-sxm")
    assert exp_rate(h200, 132) == pytest.approx(132 * 16 * 1980e6)
    assert exp_rate(h200, None) is None


def test_habitat_gamma_follows_the_destination_ridge_point():
    ridge = 989.5e12 / 3350e9
    assert habitat_gamma(0, 1e9, 989.5, 3350) == 1.0  # no FLOPs: bandwidth-bound
    assert habitat_gamma(1e9, 0, 989.5, 3350) == 0.0
    assert habitat_gamma(ridge / 2 * 1e6, 1e6, 989.5, 3350) == pytest.approx(0.75)
    assert habitat_gamma(ridge * 2 * 1e6, 1e6, 989.5, 3350) == pytest.approx(0.25)


# --- all-reduce ------------------------------------------------------------------------------


def test_allreduce_interpolates_busbw_in_log_size_and_times_a_ring():
    ar = AllReduce((2**20, 2**22), (50.0, 100.0), 2, "test")
    assert ar.busbw(2**21) == pytest.approx(75.0)  # halfway in log(size)
    assert ar.busbw(2**10) == 50.0 and ar.busbw(2**30) == 100.0
    # 2 ranks: factor 2(n-1)/n = 1; 8 ranks: 1.75.
    assert ar.seconds(2**22, 2) == pytest.approx(2**22 / 100e9)
    assert ar.seconds(2**22, 8) == pytest.approx(2**22 * 1.75 / 100e9)
    # Below the smallest size: the smallest size's time is the floor.
    assert ar.seconds(1000, 2) == pytest.approx(2**20 / 50e9)
    assert ar.seconds(2**22, 1) == 0.0


def test_ddp_simulation_overlaps_buckets_with_the_backward():
    ar = AllReduce((2**20, 2**40), (100.0, 100.0), 2, "flat")
    # 1 ms each at 100 GB/s: the first starts at 5 ms (half the backward), the second when
    # the backward ends (10 ms): 1 ms runs past it.
    ov = simulate([(100_000_000, 0.5), (100_000_000, 1.0)], 10.0, 2, ar)
    assert ov.allreduce_ms == pytest.approx(2.0) and ov.exposed_ms == pytest.approx(1.0)
    # Buckets ready early but queued one after another: 3 × 1 ms from t = 0.
    ov = simulate([(100_000_000, 0.0)] * 3, 2.0, 2, ar)
    assert ov.exposed_ms == pytest.approx(1.0)
    assert simulate([(100_000_000, 1.0)], 10.0, 1, ar).exposed_ms == 0.0


# --- rates from the real H200 recordings ------------------------------------------------------


def _fixture_values(suite: str, name: str) -> list[float]:
    doc = json.loads(H200_2GPU.read_text())
    return [m["value"] for m in doc["measurements"]
            if m["suite"] == suite and m["name"] == name and m["value"]]


def test_machine_rates_of_the_real_two_h200_run():
    rates = machine_rates(h200_rates_run(), SPECS)
    assert rates is not None and rates.gpus == 2
    roofs = rates.roofs
    assert roofs.gpu.id == "h200-sxm" and roofs.sms == 132 and roofs.measured
    for p in ("fp32", "tf32", "bf16", "fp16", "fp8"):
        assert roofs.matmul_tflops[p] == pytest.approx(
            statistics.median(_fixture_values("matmul", p)))
    assert roofs.memory_gbps == pytest.approx(
        statistics.median(_fixture_values("memory", "copy")))
    assert roofs.efficiency["bf16"] == pytest.approx(roofs.matmul_tflops["bf16"] / 989.5)
    ar = rates.allreduce
    assert ar is not None and ar.ranks == 2
    doc = json.loads(H200_2GPU.read_text())
    ours = {m["params"]["size_bytes"]: m["value"] for m in doc["measurements"]
            if m["name"] == "all_reduce_busbw" and m["value"]}
    assert dict(zip(ar.sizes_bytes, ar.busbw_gbps, strict=True)) == ours


def test_another_gpu_gets_its_datasheet_times_the_efficiency_measured_here():
    here = machine_rates(h200_rates_run(), SPECS)
    assert here is not None
    h100 = scaled_roofs(SPECS.get("h100-sxm"), here.roofs)
    # Same bf16 peak: the same rate; memory: 3350 GB/s × the share of 4800 measured here.
    assert h100.matmul_tflops["bf16"] == pytest.approx(here.roofs.matmul_tflops["bf16"])
    assert h100.memory_gbps == pytest.approx(3350 * here.roofs.memory_gbps / 4800)
    a100 = scaled_roofs(SPECS.get("a100-sxm4-80gb"), here.roofs)
    assert a100.matmul_tflops["bf16"] == pytest.approx(312 * here.roofs.efficiency["bf16"])
    assert "fp8" not in a100.matmul_tflops  # the A100 publishes no fp8 peak
    assert a100.sms == 108 and not a100.measured
    assert "hopper → ampere" in a100.basis[0]


# --- the engine on a hand-made step ----------------------------------------------------------

N = 4096
GEMM_FLOPS = 2.0 * N**3


def roofs_h200(bf16: float = 700.0, fp32: float = 50.0, memory: float = 4000.0) -> Roofs:
    spec = SPECS.get("h200-sxm")
    return Roofs(gpu=spec, matmul_tflops={"bf16": bf16, "fp32": fp32}, memory_gbps=memory,
                 sms=132, measured=True,
                 efficiency={"bf16": bf16 / 989.5, "fp32": fp32 / 67.0,
                             "memory": memory / 4800})


def step(**over) -> StepProfile:
    gemm = OpWork(cls="gemm", ms=0.5, flops=GEMM_FLOPS, bytes=3 * N * N * 2,
                  shapes=(Gemm(N, N, N, 1, 2, 1, GEMM_FLOPS),),
                  timed=(Timed("gemm", (N, N, N, 1), "bf16", 500.0),
                         Timed("gemm", (N, N, N, 1), "fp32", 50.0)))
    elem = OpWork(cls="elementwise", ms=1.0, flops=0, bytes=1e9, alt_precision="fp32",
                  alt_bytes=2e9)
    base = dict(run_id="r1", workload="m/bf16", model="m", mode="bf16", precision="bf16",
                compiled=False, batch=8, tokens_per_sample=1024, step_ms=2.0, busy_ms=1.5,
                idle_ms=0.5, phases_ms={"forward": 0.5, "backward": 1.0, "optimizer": 0.0},
                grad_bytes=400_000_000, param_count=100_000_000, ops_per_step=100,
                buckets=((400_000_000, 1.0),), classes={"gemm": gemm, "elementwise": elem},
                model_params={}, device="cuda", kernel_source="cuda kernels")
    base.update(over)
    return StepProfile(**base)  # type: ignore[arg-type]


def rates_of(roofs: Roofs, allreduce: AllReduce | None = None) -> MachineRates:
    return MachineRates(run_id="rates", roofs=roofs, allreduce=allreduce, gpus=2)


# 4096³ on 132 SMs quantizes to 1024/1056 of the matmul rate (best tile: 128² in 8 waves).
QUANT = 1024 / 1056


def test_calibration_reads_the_share_of_the_ideal_the_class_achieved():
    p = predict(step(), rates_of(roofs_h200()), Change(gpus=1, precision="bf16"), SPECS)
    got = {c.op_class: c for c in p.classes}
    # gemm: 2·4096³ FLOPs at 700 TFLOP/s × 1024/1056 is 0.2025 ms of the measured 0.5 ms.
    # (The shapes timed alone at 500 TFLOP/s are not used.)
    assert got["gemm"].achieved_pct == pytest.approx(
        100 * GEMM_FLOPS / (700e12 * QUANT) * 1e3 / 0.5, abs=0.005)  # kept to 2 decimals
    # elementwise: 1 GB at 4000 GB/s = 0.25 ms of 1.0 ms.
    assert got["elementwise"].achieved_pct == pytest.approx(25.0)
    # Nothing changed: the step is the measured one.
    assert p.step_ms == pytest.approx(2.0) and p.idle_ms == pytest.approx(0.5)


def test_precision_change_moves_matmuls_by_the_measured_rates_and_uses_recorded_traffic():
    p = predict(step(), rates_of(roofs_h200()), Change(precision="fp32"), SPECS)
    got = {c.op_class: c for c in p.classes}
    # gemm: the same quantization in both precisions: 0.5 ms × 700/50; elementwise: 2 GB
    # instead of 1 at the same achieved share.
    assert got["gemm"].predicted_ms == pytest.approx(7.0)
    assert got["elementwise"].predicted_ms == pytest.approx(2.0)
    assert p.step_ms == pytest.approx(9.5)
    # Bands: matmuls U_PRECISION, recorded traffic 5 %; the host gaps exact.
    u = U_PRECISION
    assert p.step_ms_low == pytest.approx(7.0 * (1 - u) + 2.0 * 0.95 + 0.5)
    assert p.step_ms_high == pytest.approx(7.0 * (1 + u) + 2.0 * 1.05 + 0.5)
    assert p.samples_per_s == pytest.approx(8 * 1000 / 9.5)
    assert p.tokens_per_s == pytest.approx(8 * 1024 * 1000 / 9.5)
    assert p.target.precision == "fp32" and p.target.mode == "fp32"
    assert p.changes == ("precision",)
    g = Gemm(N, N, N, 1, 4, 1, GEMM_FLOPS)
    assert model_rate(g, roofs_h200(), "fp32") == pytest.approx(50 * QUANT)


def test_model_rate_is_capped_by_the_roofline_on_the_shapes_bytes():
    # 4096 × 4096 × 64: 2·4096²·64 FLOPs over (4096·64·2 + 64·4096·2 + 4096²·2) bytes.
    g = Gemm(N, N, 64, 1, 2, 1, 2.0 * N * N * 64)
    assert model_rate(g, roofs_h200(), "bf16") == pytest.approx(
        g.flops / g.bytes * 4000 / 1e3)


def test_gpu_change_scales_memory_traffic_by_bandwidth_and_keeps_equal_matmul_roofs():
    p = predict(step(), rates_of(roofs_h200()), Change(gpu="h100-sxm"), SPECS)
    got = {c.op_class: c for c in p.classes}
    # Same bf16 peak and SMs: the gemm keeps its time. The elementwise class's 1 GB takes
    # 0.25 of its 1.0 ms at 4000 GB/s: that share × 4800/3350 (γ = 1), the rest at the SMs'
    # rate, which the two GPUs share (67 TFLOP/s fp32).
    elem = 0.25 * 4800 / 3350 + 0.75
    assert got["gemm"].predicted_ms == pytest.approx(0.5)
    assert got["elementwise"].predicted_ms == pytest.approx(elem)
    assert p.step_ms == pytest.approx(0.5 + elem + 0.5)
    assert p.target.gpu == "h100-sxm" and any("host" in n for n in p.notes)


def test_gpu_change_moves_a_class_at_its_bandwidth_wholly_by_the_bandwidth():
    at_copy = step().classes["elementwise"].with_(bytes=4e9)  # 4 GB at 4000 GB/s: 1.0 ms
    p = predict(step(classes={**step().classes, "elementwise": at_copy}),
                rates_of(roofs_h200()), Change(gpu="h100-sxm"), SPECS)
    got = {c.op_class: c for c in p.classes}
    assert got["elementwise"].predicted_ms == pytest.approx(4800 / 3350)
    assert "at the copy bandwidth: all of it by bandwidth" in got["elementwise"].basis


def test_gpu_change_to_another_architecture_moves_matmuls_by_peak_and_waves():
    p = predict(step(), rates_of(roofs_h200()), Change(gpu="a100-sxm4-80gb"), SPECS)
    gemm = next(c for c in p.classes if c.op_class == "gemm")
    # The bf16 rate keeps its share of the datasheet: 312 × 700/989.5; on 108 SMs 4096³
    # quantizes as 512 tiles of 128 × 256 in 5 waves (512/540).
    a100 = 312 * 700 / 989.5
    want = 0.5 * (700 * QUANT) / (a100 * 512 / 540)
    ridge = a100 * 1e3 / (2039 * 4000 / 4800)  # FLOP per byte there
    assert wave_efficiency(N, N, N, 1, 108, ridge) == \
        pytest.approx(512 / 540)
    assert gemm.predicted_ms == pytest.approx(want)
    assert gemm.uncertainty_pct == pytest.approx(30.0)  # across architectures
    # The elementwise class's traffic (0.25 of its 1.0 ms) by the bandwidth, the rest by SMs
    # × clock (132 × 1980 MHz here, 108 × 1410 there), not by the fp32 peaks (67 → 19.5).
    elem = next(c for c in p.classes if c.op_class == "elementwise")
    bandwidth = 4000 / (2039 * 4000 / 4800)
    assert elem.predicted_ms == pytest.approx(0.25 * bandwidth + 0.75 * (132 * 1980) /
                                              (108 * 1410))


def test_gpu_change_with_recorded_grids_treats_persistent_kernels_by_the_rate():
    from gpuaudit.predict.profile import KernelGrid

    grids = (KernelGrid("nvjet_sm90_tst_256x128_64x4", 132, 1.0, 1.0, 300.0),
             KernelGrid("void cutlass::Kernel2", 264, 2.0, 1.0, 200.0))
    prof = step(classes={"gemm": step().classes["gemm"].with_(kernels=grids)})
    p = predict(prof, rates_of(roofs_h200()), Change(gpu="a100-sxm4-80gb"), SPECS)
    gemm = next(c for c in p.classes if c.op_class == "gemm")
    a100 = 312 * 700 / 989.5
    per_wave = (700 / 132) / (a100 / 108)
    # The 132-block grid was sized by the SMs: it scales as the rate (132/108 × per wave);
    # 264 blocks are 2 waves on 132 SMs, 3 on 108.
    want = 0.3 * 132 / 108 * per_wave + 0.2 * 3 / 2 * per_wave
    assert gemm.predicted_ms == pytest.approx(want)


def test_more_gpus_add_the_exposed_allreduce():
    ar = AllReduce((2**20, 2**40), (200.0, 200.0), 2, "flat 200 GB/s")
    p = predict(step(), rates_of(roofs_h200(), ar), Change(gpus=2), SPECS)
    # One 400 MB bucket ready at the end of a 1 ms backward: 2 ms at 200 GB/s, all exposed.
    assert p.allreduce_ms == pytest.approx(2.0) and p.exposed_allreduce_ms == pytest.approx(2.0)
    assert p.step_ms == pytest.approx(4.0)
    assert p.samples_per_s == pytest.approx(2 * 8 * 1000 / 4.0)
    assert p.step_ms_high == pytest.approx(2.0 + 2.0 * (1 + U_ALLREDUCE))
    # 8 GPUs: the ring moves 2·7/8 of the bucket.
    p8 = predict(step(), rates_of(roofs_h200(), ar), Change(gpus=8), SPECS)
    assert p8.exposed_allreduce_ms == pytest.approx(2.0 * 1.75)


def test_without_a_measured_allreduce_the_gpu_link_is_assumed():
    import math

    p = predict(step(), rates_of(roofs_h200(), None), Change(gpus=2), SPECS)
    # 76 % of 450 GB/s (one direction of the H200's 900 GB/s NVLink) at 4 GiB, 17 % of that
    # at 1 MiB, log-linear between: 400 MB sits at f of the way.
    large = 0.76 * 450
    f = (math.log(400e6) - math.log(2**20)) / (math.log(2**32) - math.log(2**20))
    busbw = large * 0.17 + f * (large - large * 0.17)
    assert p.allreduce_ms == pytest.approx(400e6 / (busbw * 1e9) * 1e3)
    assert any("no all-reduce measured" in b for b in p.basis)


def test_bad_changes_are_bad_input():
    rates = rates_of(roofs_h200())
    with pytest.raises(BadInputError, match="nothing to predict"):
        predict(step(), rates, Change(), SPECS)
    with pytest.raises(BadInputError, match=r"no such GPU; did you mean h100-sxm.* known: a10"):
        predict(step(), rates, Change(gpu="h100-sx"), SPECS)
    with pytest.raises(BadInputError, match=r"no such GPU.* known: a10, a100-pcie-40gb"):
        predict(step(), rates, Change(gpu="h300"), SPECS)
    with pytest.raises(BadInputError, match="no tf32 matmul rate measured"):
        predict(step(), rates, Change(precision="tf32"), SPECS)
    with pytest.raises(BadInputError, match="expected one of"):
        predict(step(), rates, Change(precision="int4"), SPECS)
    with pytest.raises(BadInputError, match="--params: size changes work for the reference"):
        predict(step(), rates, Change(params=1e9), SPECS)


def test_a_model_that_trained_its_own_16_bit_weights_is_refused_another_precision():
    """Its step in fp32 would hold float32 weights, gradients and optimizer state that the
    recording never saw; the same precision on another GPU is predicted."""
    held = step(model_params={"weights": "bf16"})
    with pytest.raises(BadInputError, match=r"own bf16 weights .* cast to float32 in build"):
        predict(held, rates_of(roofs_h200()), Change(precision="fp32"), SPECS)
    assert predict(held, rates_of(roofs_h200()), Change(gpu="a100-sxm4-80gb"), SPECS).step_ms > 0
    assert predict(step(), rates_of(roofs_h200()), Change(precision="fp32"), SPECS).step_ms > 0


# --- a recorded run ----------------------------------------------------------------------------


def test_a_recorded_op_profile_reads_back_with_everything_the_engine_needs():
    run = load_run(CPU_PROFILE.read_text())
    assert workloads_in(run) == ["gpt-tiny/fp32", "gpt-tiny/bf16"]
    prof = load_profile(run, "gpt-tiny/bf16")
    assert prof.precision == "bf16" and prof.batch == 4 and prof.tokens_per_sample == 64
    flops = {m.params["op_class"]: m.params["flops_per_step"] for m in run.measurements
             if m.name.startswith("gpt-tiny/bf16/op/") and "op_class" in m.params}
    assert prof.classes["gemm"].flops == flops["gemm"]
    # The counted FLOPs equal the flop_count check's (FlopCounterMode) total per step.
    check = next(m for m in run.measurements if m.name == "gpt-tiny/flop_count")
    total = check.params["counted_total_per_sample"] * 4
    assert sum(w.flops for w in prof.classes.values()) == total
    assert prof.classes["gemm"].shapes and prof.classes["gemm"].timed
    assert {t.precision for t in prof.classes["gemm"].timed} == {"bf16", "fp32"}
    assert prof.classes["elementwise"].alt_precision == "fp32"
    assert prof.buckets and sum(b for b, _ in prof.buckets) == prof.grad_bytes
    with pytest.raises(BadInputError, match="choose one with --workload"):
        load_profile(run)
    with pytest.raises(BadInputError, match="no op profile for 'gpt-tiny/fp16'"):
        load_profile(run, "gpt-tiny/fp16")


def test_a_run_without_an_op_profile_names_what_is_missing():
    with pytest.raises(BadInputError, match="no op profile: missing <model>/<mode>/op/step"):
        load_profile(h200_rates_run())
    run = load_run(CPU_PROFILE.read_text())
    cut = run.model_copy(update={"measurements": tuple(
        m for m in run.measurements if m.name != "gpt-tiny/bf16/step_time")})
    with pytest.raises(BadInputError, match="lacks what a prediction needs: "
                                            "gpt-tiny/bf16/step_time"):
        load_profile(cut, "gpt-tiny/bf16")
    # profiled, but every mode was skipped (out of memory, a mode the device lacks): why
    why = "out of memory at batch 4096 (needs 212 GB)"
    none_ran = run.model_copy(update={"op_profiles": (), "measurements": tuple(
        m.model_copy(update={"value": None, "skipped": True, "skipped_reason": why})
        for m in run.measurements if m.suite == "train")})
    with pytest.raises(BadInputError, match=r"no op profile: no training mode ran "
                                            r"\(gpt-tiny/\w+: out of memory at batch 4096"):
        load_profile(none_ran)


def test_the_recorded_run_predicted_on_the_real_h200_rates():
    run = load_run(CPU_PROFILE.read_text())
    prof = load_profile(run, "gpt-tiny/fp32")
    rates = machine_rates(h200_rates_run(), SPECS)
    assert rates is not None
    p = predict(prof, rates, Change(gpu="h100-sxm", gpus=2), SPECS)
    assert p.changes == ("gpu", "gpus") and p.target.gpus == 2
    assert p.step_ms_low < p.step_ms < p.step_ms_high
    assert p.samples_per_s == pytest.approx(2 * 4 * 1000 / p.step_ms)
    assert p.allreduce_ms and p.allreduce_ms > 0
    assert p.dry_run  # a CPU recording is flagged, once (the view says it first)
    assert not any("CPU" in n for n in p.notes)


# --- the CLI ---------------------------------------------------------------------------------


def gpuaudit(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli.gpuaudit(*args, cwd=cwd, columns=None)


def test_cli_predicts_a_run_file_as_json():
    r = gpuaudit("predict", str(CPU_PROFILE), "--workload", "gpt-tiny/fp32", "--precision",
                 "bf16", "--rates", str(H200_2GPU), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["schema_version"] == 1 and doc["target"]["precision"] == "bf16"
    assert doc["dry_run"] is True
    run = load_run(CPU_PROFILE.read_text())
    want = predict(load_profile(run, "gpt-tiny/fp32"), machine_rates(h200_rates_run(), SPECS),
                   Change(precision="bf16"), SPECS)
    assert doc["step_ms"] == pytest.approx(want.step_ms)


def test_cli_terminal_view_fits_80_columns():
    r = subprocess.run([sys.executable, "-m", "gpuaudit", "predict", str(CPU_PROFILE),
                        "--workload", "gpt-tiny/bf16", "--gpus", "2", "--rates",
                        str(H200_2GPU)], capture_output=True, text=True, timeout=120,
                       env={**__import__("os").environ, "COLUMNS": "80"})
    assert r.returncode == 0, r.stderr
    assert "all-reduce" in r.stdout and "Per operator class" in r.stdout
    assert max(len(line) for line in r.stdout.splitlines()) <= 80
    # a CPU recording's figures are flagged before any of them: the first line says so
    assert r.stdout.splitlines()[0].startswith("DRY RUN") and "(CPU times)" in r.stdout
    assert " ".join(r.stdout.split()).count("not a forecast") == 1  # said once


@pytest.mark.parametrize(("args", "message"), [
    (["--gpu", "h300"], "no such GPU; known: a10, a100-pcie-40gb"),
    (["--gpu", "h200"], "no such GPU; did you mean h200-nvl, h200-sxm"),
    (["--params", "lots"], "--params 'lots': expected a number"),
    (["--gpus", "0"], "--gpus '0'"),
    ([], "nothing to predict"),
    (["--seq-len", "4"], "--seq-len goes with --params"),
    (["--model", "not an entry point"], "expected pkg.module:function"),
])
def test_cli_bad_input_is_one_line_and_exit_2(args, message):
    r = gpuaudit("predict", str(CPU_PROFILE), "--workload", "gpt-tiny/fp32", *args)
    assert r.returncode == 2 and message in r.stderr
    assert len(r.stderr.strip().splitlines()) == 1 and "Traceback" not in r.stderr


def test_cli_a_run_without_rates_says_which_measurements_are_missing(tmp_path):
    r = gpuaudit("predict", str(CPU_PROFILE), "--workload", "gpt-tiny/fp32", "--gpus", "2",
                 "--db", str(tmp_path / "empty.db"))
    assert r.returncode == 2
    assert "lacks what a prediction needs: matmul/fp32 (TFLOP/s), memory/copy (GB/s)" in \
        r.stderr
    r = gpuaudit("predict", str(H200_2GPU), "--gpus", "2")
    assert r.returncode == 2 and "missing <model>/<mode>/op/step" in r.stderr


def test_cli_a_cpu_run_with_its_rates_says_a_gpu_is_what_is_missing(tmp_path):
    """A run recorded on a CPU with `bench train matmul memory` has every rate: the message
    names the GPU it lacks, not an empty list."""
    from gpuaudit.model import Measurement

    run = load_run(CPU_PROFILE.read_text())
    rates = tuple(Measurement(suite=suite, name=name, value=value, unit=unit)
                  for suite, name, value, unit in (
                      ("matmul", "fp32", 1.5, "TFLOP/s"), ("matmul", "bf16", 3.0, "TFLOP/s"),
                      ("memory", "copy", 40.0, "GB/s")))
    path = tmp_path / "cpu.json"
    assert run.machine is not None
    on_cpu = run.model_copy(update={"measurements": run.measurements + rates,
                                    "machine": run.machine.model_copy(update={"gpus": ()})})
    path.write_text(on_cpu.model_dump_json())
    r = gpuaudit("predict", str(path), "--workload", "gpt-tiny/fp32", "--precision", "bf16",
                 "--db", str(tmp_path / "empty.db"))
    assert r.returncode == 2 and len(r.stderr.strip().splitlines()) == 1
    assert "lacks what a prediction needs: a GPU in the spec catalog" in r.stderr
    assert "needs:  of" not in r.stderr and "bench train --op-profile" in r.stderr


def test_recommend_from_run_ranks_offers_by_the_predicted_rate(tmp_path):
    from gpuaudit.predict.offers import predicted_rates

    catalog = tmp_path / "offers.csv"
    catalog.write_text(
        "provider,instance_type,region,gpu_model,gpu_count,on_demand_price_per_hour,currency,"
        "source,price_date\n"
        "x,h200x1,r,h200-sxm,1,4.0,USD,test,2026-11-30\n"
        "x,h100x2,r,h100-sxm,2,5.0,USD,test,2026-11-30\n"
        "x,a100x1,r,a100-sxm4-80gb,1,1.5,USD,test,2026-11-30\n")
    h200 = PREDICT / "zoo" / "mlp-run.json"  # an MLP's profile on an H200
    r = gpuaudit("recommend", "--from-run", str(h200), "--workload", "tabular-mlp/bf16",
                 "--rates", str(H200_2GPU), "--samples", "1G", "--catalog", str(catalog),
                 "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    run = load_run(h200.read_text())
    prof = load_profile(run, "tabular-mlp/bf16")
    rates = predicted_rates(prof, machine_rates(h200_rates_run(), SPECS), SPECS,
                            [("h200-sxm", 1), ("h100-sxm", 2), ("a100-sxm4-80gb", 1)])
    per_gpu = {(m, c): rate for m, c, rate, _ in rates}
    assert per_gpu[("h200-sxm", 1)] == pytest.approx(prof.samples_per_s)
    assert len(doc["ranked"]) == 3
    for rec in doc["ranked"]:
        key = (rec["offer"]["gpu_model"], rec["offer"]["gpu_count"])
        assert rec["rate"] == pytest.approx(per_gpu[key] * key[1], rel=1e-6)
        assert rec["hours"] >= 1e9 / rec["rate"] / 3600 * 0.999
    assert any("predicted" in n for n in doc["notes"])
    bad = gpuaudit("recommend", "--from-run", str(h200), "--workload", "tabular-mlp/bf16",
                   "--rates", str(H200_2GPU), "--catalog", str(catalog))
    assert bad.returncode == 2 and "--run with an op profile needs one of --hours" in bad.stderr
    # a CPU recording's times would price every offer: refused, in one line
    cpu = gpuaudit("recommend", "--from-run", str(CPU_PROFILE), "--workload", "gpt-tiny/fp32",
                   "--rates", str(H200_2GPU), "--samples", "1M", "--catalog", str(catalog))
    assert cpu.returncode == 2 and "was recorded on a CPU" in cpu.stderr
    assert len(cpu.stderr.strip().splitlines()) == 1


def test_cli_finds_the_rates_in_the_newest_stored_run_of_that_gpu(tmp_path):
    from gpuaudit.store import Store

    db = tmp_path / "store.db"
    rates_run = h200_rates_run()
    with Store(str(db)) as store:
        store.save(rates_run)
    r = gpuaudit("predict", str(CPU_PROFILE), "--workload", "gpt-tiny/fp32", "--gpus", "2",
                 "--db", str(db), "--json")
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc["rates_run_id"] == rates_run.id
    assert any(rates_run.id in b for b in doc["basis"])
