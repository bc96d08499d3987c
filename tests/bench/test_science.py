"""`bench science`: the roofline arithmetic with exact values, every kernel's check on the CPU
(faults planted to show each check fails), and the suite's skipped-with-reason paths."""

from __future__ import annotations

import importlib.util
import math
import sys
import types
from datetime import datetime, timezone

import pytest

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.bench.science import roofline as rl
from gpuaudit.model import Host, Machine
from gpuaudit.specs import load_catalog

CATALOG = load_catalog()
H200, RTX4090 = CATALOG.get("h200-sxm"), CATALOG.get("rtx-4090")
torch = pytest.importorskip("torch")


# --- the roofs --------------------------------------------------------------------------------


def test_fft_counts_and_roofs_exactly():
    n = 256 ** 3
    assert rl.fft_flops(n) == 5 * n * 24 == 2_013_265_920
    assert rl.fft_bytes(n, "fp32") == 2 * n * 8 and rl.fft_bytes(n, "fp64") == 2 * n * 16
    # 7.5 flop/byte in FP32 × 4800 GB/s = 36,000 GFLOP/s, under the 67 TFLOP/s peak
    assert rl.fft_roof(H200, "fp32", n).value == pytest.approx(36_000)
    assert rl.fft_roof(H200, "fp64", n).value == pytest.approx(18_000)
    assert "7.5 flop/byte" in rl.fft_roof(H200, "fp32", n).basis
    # a tiny transform's intensity is low; a huge one's is capped by the compute peak
    assert rl.fft_roof(H200, "fp64", 2 ** 60).value == pytest.approx(34_000)
    assert "compute-bound" in rl.fft_roof(H200, "fp64", 2 ** 60).basis


def test_spmv_stencil_montecarlo_and_nbody_roofs_exactly():
    assert rl.poisson_nnz(3) == 27 + 6 * 9 * 2 == 135
    assert rl.spmv_bytes(27, 135, "fp64") == 135 * 12 + 28 * 4 + 2 * 27 * 8
    roof = rl.spmv_roof(H200, "fp64", 27, 135)
    assert roof.value == pytest.approx(4800 * 2 * 135 / rl.spmv_bytes(27, 135, "fp64"))
    assert rl.per_element_roof(H200, "fp64", "point").value == pytest.approx(300)
    assert rl.per_element_roof(H200, "fp32", "sample").value == pytest.approx(600)
    assert rl.nbody_flops(1000) == 20e6
    assert rl.nbody_roof(H200, "fp64").value == pytest.approx(34_000)
    no = rl.nbody_roof(RTX4090, "fp64")
    assert no.value is None and "publishes no FP64 peak" in no.basis


def test_fp64_vs_fp32_ratios_the_roofs_allow():
    n = 256 ** 3
    assert rl.ratio_roof(rl.fft_roof(H200, "fp64", n), rl.fft_roof(H200, "fp32", n)
                         ).value == pytest.approx(0.5)
    assert rl.ratio_roof(rl.nbody_roof(H200, "fp64"), rl.nbody_roof(H200, "fp32")
                         ).value == pytest.approx(34 / 67)
    assert rl.ratio_roof(rl.nbody_roof(RTX4090, "fp64"), rl.nbody_roof(RTX4090, "fp32")
                         ).value is None
    assert rl.fft_roof(None, "fp32", n).value is None


# --- the kernels and their checks on the CPU ----------------------------------------------------


@pytest.fixture
def cpu():
    from gpuaudit.bench.science.common import Where

    return Where(torch, "cpu", 2, 1)


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_fft_is_checked(cpu, monkeypatch, precision):
    from gpuaudit.bench.science import fft

    res = fft.run(cpu, 16, precision)
    assert res.ok and res.rates and res.params["points"] == 16 ** 3, res.check
    real = torch.fft.fftn
    wrong = torch.complex64 if precision == "fp32" else torch.complex128
    monkeypatch.setattr(torch.fft, "fftn", lambda x, *a, **k: real(x) * (
        1.001 if x.dtype == wrong else 1.0))
    assert not fft.run(cpu, 16, precision).ok


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_spmv_is_the_seven_point_operator(cpu, monkeypatch, precision):
    from gpuaudit.bench.science import sparse

    crow, col, val = sparse.poisson_csr(cpu, 4, precision)
    assert int(crow[-1]) == rl.poisson_nnz(4) == len(col) == len(val)
    assert crow.dtype == col.dtype == torch.int32
    res = sparse.spmv(cpu, 6, precision)
    assert res.ok and res.params["nnz"] == rl.poisson_nnz(6), res.check
    real = sparse.poisson_csr
    monkeypatch.setattr(sparse, "poisson_csr", lambda w, n, p: (
        lambda c: (c[0], c[1], c[2] * 1.01))(real(w, n, p)))
    assert not sparse.spmv(cpu, 6, precision).ok


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_stencil_is_checked_on_two_corner_blocks(cpu, monkeypatch, precision):
    from gpuaudit.bench.science import sparse

    res = sparse.stencil(cpu, 40, precision)
    assert res.ok and res.params["points"] == 38 ** 3, res.check
    real = sparse.stencil_torch

    def off_by_one_corner(u, out):
        real(u, out)
        out[-2, -2, -2] += 1.0  # inside the far corner block

    monkeypatch.setattr(sparse, "stencil_torch", off_by_one_corner)
    assert not sparse.stencil(cpu, 40, precision).ok


def test_black_scholes_and_the_monte_carlo_verdict():
    from gpuaudit.bench.science import particles

    # S 100, K 105, r 5 %, sigma 20 %, 1 year: the textbook 8.02
    assert particles.black_scholes_call() == pytest.approx(8.021352, abs=1e-6)
    disc = math.exp(-particles.RATE * particles.YEARS)
    n, mean, sd = 10 ** 6, particles.black_scholes_call() / disc, 10.0
    ok, text = particles.mc_verdict(mean * n, (sd ** 2 + mean ** 2) * n, n)
    assert ok and "0.00 standard errors" in text
    biased = mean + 5 * sd / math.sqrt(n)  # five standard errors off
    assert not particles.mc_verdict(biased * n, (sd ** 2 + biased ** 2) * n, n)[0]


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_montecarlo_prices_the_option(cpu, precision):
    from gpuaudit.bench.science import particles

    res = particles.montecarlo(cpu, 1 << 16, precision)
    assert res.ok and "196,608 samples" in res.check  # warm-up and timed launches, 3 × 2^16


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_nbody_accelerations_against_float64(cpu, monkeypatch, precision):
    from gpuaudit.bench.science import particles

    res = particles.nbody(cpu, 300, precision)
    assert res.ok and res.params["bodies"] == 300, res.check
    real = particles.accel_torch
    monkeypatch.setattr(particles, "accel_torch", lambda b, rows: real(b, rows) * 1.001)
    assert not particles.nbody(cpu, 300, precision).ok


# --- on a GPU, one Triton kernel each for stencil7 and nbody; torch where Triton cannot run ----

FUSED = "gpuaudit.bench.science.fused"


def _forget_fused(monkeypatch):
    """Make the next `from gpuaudit.bench.science import fused` import it afresh."""
    import gpuaudit.bench.science as package

    monkeypatch.delitem(sys.modules, FUSED, raising=False)
    monkeypatch.delattr(package, "fused", raising=False)


@pytest.fixture
def interpreted(monkeypatch):
    """The Triton kernels run by Triton's interpreter on CPU tensors, and the science kernels
    made to pick them as they do on a GPU."""
    from gpuaudit.bench.science import common

    # read when a kernel is defined: Triton's own (tl.zeros, tl.sum) as well as ours
    monkeypatch.setenv("TRITON_INTERPRET", "1")
    triton = pytest.importorskip("triton")
    if type(triton.language.zeros).__name__ != "InterpretedFunction":
        pytest.skip("Triton was imported before its interpreter was switched on")
    _forget_fused(monkeypatch)
    fused = importlib.import_module(FUSED)
    monkeypatch.setattr(common, "fused_kernels", lambda w: (fused, ""))
    yield fused
    _forget_fused(monkeypatch)  # no later test gets the interpreted kernels by accident


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_on_the_cpu_torch_runs_and_says_so(cpu, precision):
    from gpuaudit.bench.science import common, particles, sparse

    assert common.fused_kernels(cpu) == (None, "")
    for res in (sparse.stencil(cpu, 12, precision), particles.nbody(cpu, 64, precision)):
        assert res.ok and res.params["implementation"].startswith("torch"), res.params
        assert "fallback" not in res.params and "triton" not in res.params


def test_a_gpu_without_triton_gets_torch_and_the_reason(monkeypatch):
    from gpuaudit.bench.science import common

    _forget_fused(monkeypatch)
    monkeypatch.setitem(sys.modules, "triton", None)  # import triton raises ImportError
    fused, why = common.fused_kernels(types.SimpleNamespace(cuda=True))
    assert fused is None and why.startswith("Triton not importable (ModuleNotFoundError")
    assert why.endswith("torch ran instead")


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_a_triton_kernel_that_fails_falls_back_to_torch_saying_why(cpu, monkeypatch, precision):
    from gpuaudit.bench.science import common, particles, sparse

    def fails(*args, **kwargs):
        raise RuntimeError("PassManager::run failed\nlong compiler text")

    # as fused.fastest does when no tiling compiles: the last refusal raised
    broken = types.SimpleNamespace(fastest=fails, STENCIL_TILINGS=((8, 64, 32, 4),),
                                   NBODY_TILINGS={precision: ((64, 16, 8),)})
    monkeypatch.setattr(common, "fused_kernels", lambda w: (broken, ""))
    for res in (sparse.stencil(cpu, 12, precision), particles.nbody(cpu, 64, precision)):
        assert res.ok and res.params["implementation"].startswith("torch"), res.params
        assert res.params["fallback"] == ("the Triton kernel failed (RuntimeError: PassManager"
                                          "::run failed): torch ran instead")


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_triton_kernels_against_numpy(interpreted, precision):
    from gpuaudit.bench.science import particles, sparse

    dtype = torch.float32 if precision == "fp32" else torch.float64
    g = torch.Generator().manual_seed(7)
    # 67³: two tiles across x, three runs of planes up z, ragged at the far ends
    n = 67
    u = torch.randn((n, n, n), dtype=dtype, generator=g)
    out = torch.full_like(u, math.nan)
    interpreted.stencil7(u, out, sparse.C0, sparse.C1)
    ok, check = sparse._check_stencil(u, out, n, precision)
    assert ok, check
    assert out[0].isnan().all() and out[:, :, -1].isnan().all()  # the boundary left alone
    assert not out[1:-1, 1:-1, 1:-1].isnan().any()
    # 300 bodies: several programs, the last tile of bodies ragged
    b = torch.rand((300, 4), dtype=dtype, generator=g)
    b[:, 3] = (0.5 + b[:, 3]) / 300
    acc = interpreted.accel(b, particles.SOFTENING2)
    assert acc.shape == (300, 3) and acc.dtype == dtype
    ok, check = particles._check_nbody(b, acc, precision)
    assert ok, check


@pytest.mark.parametrize("precision", ["fp32", "fp64"])
def test_triton_figures_say_so_and_keep_their_checks(cpu, interpreted, monkeypatch,
                                                     precision):
    from gpuaudit.bench.science import particles, sparse

    where = cpu
    res = sparse.stencil(where, 20, precision)
    assert res.ok and res.params["points"] == 18 ** 3, res.check
    assert res.params["implementation"].startswith("one Triton kernel")
    assert res.params["triton"] == interpreted.VERSION and "fallback" not in res.params
    assert res.params["tool"] == "triton"  # not torch's figure: compare keeps the two apart
    # every tiling tried and timed, the fastest named
    assert res.params["tilings_ms"].count(" ms") == len(interpreted.STENCIL_TILINGS)
    res = particles.nbody(where, 150, precision)
    assert res.ok and res.params["implementation"].startswith("one Triton kernel"), res.check
    assert ("1/sqrt" if precision == "fp64" else "rsqrt") in res.params["implementation"]
    tilings = interpreted.NBODY_TILINGS[precision]
    assert res.params["tilings_ms"].count(" ms") == len(tilings)
    assert any(res.params["implementation"].startswith(
        f"one Triton kernel ({bi} bodies a program, tiles of {bj}, {warps} warps")
        for bi, bj, warps in tilings)

    # a fault planted in each kernel's output: the same checks catch it
    stencil7, accel = interpreted.stencil7, interpreted.accel

    def off_corner(u, out, c0, c1, tiling):
        stencil7(u, out, c0, c1, tiling)
        out[-2, -2, -2] += 1.0

    monkeypatch.setattr(interpreted, "stencil7", off_corner)
    monkeypatch.setattr(interpreted, "accel", lambda *a, **k: accel(*a, **k).mul_(1.001))
    assert not sparse.stencil(where, 20, precision).ok
    assert not particles.nbody(where, 150, precision).ok


def test_the_fastest_tiling_is_chosen_and_a_refused_one_said(interpreted):
    ms = {"a": [3.0, 2.0, 9.0], "b": [1.0, 1.5, 1.2], "c": None}
    ran = []

    def launch(tiling):
        ran.append(tiling)
        if ms[tiling] is None:
            raise RuntimeError("out of resources: shared memory")

    def times_ms(fn):
        fn()
        return ms[ran[-1]]

    assert interpreted.fastest(("a", "b", "c"), launch, times_ms) == (
        "b", "a: 3 ms; b: 1.2 ms; c: failed (RuntimeError)")
    with pytest.raises(RuntimeError, match="out of resources"):
        interpreted.fastest(("c",), launch, times_ms)


# --- the suite ------------------------------------------------------------------------------------


def _ctx():
    machine = Machine(captured_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
                      host=Host(hostname="h", python_version="3.11"))
    return BenchContext(machine=machine, devices=(), profile=Profile.QUICK)


def test_without_a_gpu_every_kernel_runs_on_the_cpu_and_is_checked(monkeypatch):
    from gpuaudit.bench.science import suite

    sizes = {"fft3d": 12, "spmv": 8, "stencil7": 16, "montecarlo": 1 << 14, "nbody": 128}
    monkeypatch.setattr(suite, "KERNELS", tuple(
        k.__class__(**{**k.__dict__, "cpu_size": sizes[k.name]}) for k in suite.KERNELS))
    ms = {m.name: m for m in suite.run(_ctx())}
    for k in sizes:
        for p in ("fp32", "fp64"):
            m = ms[f"{k}_{p}"]
            assert m.value > 0 and m.verified is True, (m.name, m.params.get("check"))
            assert m.params["device"] == "cpu" and m.spec_value is None
            assert "convention" in m.params
        r = ms[f"{k}_fp64_vs_fp32"]
        assert r.value == pytest.approx(ms[f"{k}_fp64"].value / ms[f"{k}_fp32"].value)
        assert r.unit == "×" and r.spec_value is None
    assert not any(n.endswith(("_cupy", "_cpu")) for n in ms)  # no GPU: nothing to set beside


def test_no_torch_is_a_reason(monkeypatch):
    from gpuaudit.bench.science import suite

    monkeypatch.setattr(suite, "import_torch", lambda: None)
    ms = list(suite.run(_ctx()))
    assert len(ms) == 10 and all(m.skipped_reason.startswith("torch not installed")
                                 for m in ms)


def test_no_cupy_is_a_reason(monkeypatch):
    from gpuaudit.bench.science import suite

    monkeypatch.setitem(sys.modules, "cupy", None)
    cupy, why = suite._cupy()
    assert cupy is None and why.startswith("CuPy not installed")


@pytest.mark.gpu
def test_on_a_gpu_each_figure_has_its_roof_and_references():
    from gpuaudit.bench.runner import run_bench

    run = run_bench(["science"], profile=Profile.QUICK)
    ms = {m.name: m for m in run.measurements}
    for k in ("fft3d", "spmv", "stencil7", "montecarlo", "nbody"):
        for p in ("fp32", "fp64"):
            main = ms[f"{k}_{p}"]
            assert main.verified is True and main.gpu_index is not None, main
            assert ms[f"{k}_{p}_cpu"].params["device"] == "cpu"
            assert f"{k}_{p}_cupy" in ms
    fused = importlib.util.find_spec("triton") is not None  # PyTorch's CUDA builds ship it
    for k in ("stencil7", "nbody"):
        for p in ("fp32", "fp64"):
            how = ms[f"{k}_{p}"].params
            assert how["implementation"].startswith("one Triton kernel" if fused else "torch")
            assert ("fallback" in how) is not fused, how
            assert how["tool"] == ("triton" if fused else "torch")
