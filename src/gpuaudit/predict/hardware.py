"""What a GPU can do, as the predictions use it: measured rates on the machine a run came
from, and for another GPU its datasheet roofs scaled by the efficiencies measured here; SM
counts for wave quantization; Habitat's roofline exponent for kernels that keep their code.

Wave quantization (Habitat, Yu et al., USENIX ATC 2021; NeuSight, Lee et al., ASPLOS 2025):
a kernel runs its thread blocks in waves of (SMs × blocks resident per SM); a last, partial
wave costs a whole one. A matmul's blocks are its output tiles, times its split of K: cuBLAS
splits K (split-K, stream-K on Hopper) to fill the SMs when that pays for the partial sums'
reduction, so a matmul's quantization is the best split's (`split_k`).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuaudit.specs.catalog import GpuSpec

# SMs per GPU: the datasheet's CUDA cores ÷ the cores per SM of the architecture (Volta,
# Turing and GA100: 64; GA10x, Ada and Hopper: 128), as NVIDIA's architecture whitepapers
# give them (Volta V100, Turing TU102/TU104, Ampere GA100 and GA102, Ada AD102, Hopper H100).
# None where we hold no source for the count (A10G, B200): no wave quantization there.
SM_COUNT: dict[str, int | None] = {
    "v100-sxm2-16gb": 80, "v100-sxm2-32gb": 80, "v100-pcie-16gb": 80, "v100-pcie-32gb": 80,
    "v100s-pcie-32gb": 80, "t4": 40, "a10": 72, "a10g": None, "a40": 84,
    "a100-sxm4-40gb": 108, "a100-sxm4-80gb": 108, "a100-pcie-40gb": 108,
    "a100-pcie-80gb": 108, "rtx-3090": 82, "l4": 58, "l40": 142, "l40s": 142,
    "rtx-4090": 128, "h100-sxm": 132, "h100-pcie": 114, "h100-nvl": 132, "h200-sxm": 132,
    "h200-nvl": 132, "b200": None,
}
SM_SOURCE = ("SMs = CUDA cores ÷ cores per SM (64 on Volta, Turing, GA100; 128 on GA10x, "
             "Ada, Hopper), NVIDIA architecture whitepapers")

# The matmul rate a training precision runs at (autocast bf16/fp16 matmuls; fp32 with TF32
# off on CUDA cores; tf32 on tensor cores).
MATMUL_KEY = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16", "fp8": "fp8",
              "int8": "int8"}
TILE = (128, 128)  # output tile assumed for matmuls whose kernels were not seen
# The output tiles cuBLAS picks among (CUTLASS's 128×128, 128×256, 256×128 on Ampere and
# Hopper; 192×192 in Hopper's nvjet kernels, as the gpt steps recorded on an H200 ran them):
# a matmul is taken to run the one that quantizes best.
TILES = ((128, 128), (128, 256), (256, 128), (192, 192))
MIN_SPLIT_K = 512  # a split-K slice keeps at least this much of K
PARTIAL_BYTES = 4  # split-K partial sums are fp32: each slice writes its m×n, the sum reads it
# Exponentials per SM per clock (the SFUs: 16 per SM on Volta to Hopper); FlashAttention-3
# (Shah et al., 2024) counts 3.9 T/s on the H100 SXM: 132 SMs × 16 × 1.83 GHz.
EXP_PER_SM_CLOCK = 16


@dataclass(frozen=True)
class Roofs:
    """The rates one GPU model delivers, with where each comes from."""

    gpu: GpuSpec
    matmul_tflops: dict[str, float]  # per precision: measured, or datasheet × efficiency
    memory_gbps: float  # device memory, read + write counted
    sms: int | None
    measured: bool  # measured on this GPU model (False: scaled from another)
    basis: tuple[str, ...] = ()
    efficiency: dict[str, float] = field(default_factory=dict)  # measured ÷ datasheet

    def matmul(self, precision: str) -> float | None:
        return self.matmul_tflops.get(MATMUL_KEY.get(precision, precision))

    @property
    def vector_tflops(self) -> float | None:
        """CUDA-core fp32 rate: the compute roof of kernels without tensor cores."""
        return self.gpu.peak("fp32")

    @property
    def sm_cycles_per_s(self) -> float | None:
        """SMs × the datasheet's highest SM clock: the pace of work its blocks' latency
        bounds, not its lanes or its memory; None where either is unknown."""
        clock_mhz = self.gpu.max_sm_clock_mhz
        return self.sms * clock_mhz * 1e6 if self.sms and clock_mhz else None

    @property
    def exp_per_s(self) -> float | None:
        """Exponentials per second (SFUs × SMs × the datasheet's highest SM clock): the roof
        of attention's softmax, which the tensor cores do not compute."""
        return exp_rate(self.gpu, self.sms)


def sm_count(gpu: GpuSpec) -> int | None:
    return SM_COUNT.get(gpu.id)


def scaled_roofs(target: GpuSpec, reference: Roofs) -> Roofs:
    """Another GPU's roofs: its datasheet figures × the efficiency measured on the reference
    (measured ÷ datasheet there). Precisions the target publishes no peak for are absent."""
    eff = dict(reference.efficiency)
    rates = {}
    for key, e in eff.items():
        if key == "memory":
            continue
        peak = target.peak(key)
        if peak is not None:
            rates[key] = peak * e
    mem_eff = eff.get("memory", 1.0)
    same_arch = target.architecture == reference.gpu.architecture
    basis = (f"{target.name}: datasheet peaks × the efficiencies measured on "
             f"{reference.gpu.name} (" + ", ".join(
                 f"{k} {v:.0%}" for k, v in sorted(eff.items())) + ")"
             + ("" if same_arch else f"; {reference.gpu.architecture} → "
                f"{target.architecture}: efficiencies may differ"),)
    return Roofs(gpu=target, matmul_tflops=rates,
                 memory_gbps=target.memory_bandwidth_gbps * mem_eff, sms=sm_count(target),
                 measured=False, basis=basis, efficiency=eff)


def exp_rate(gpu: GpuSpec, sms: int | None) -> float | None:
    if not sms or not gpu.max_sm_clock_mhz:
        return None
    return sms * EXP_PER_SM_CLOCK * gpu.max_sm_clock_mhz * 1e6


def waves(blocks: int, sms: int, resident: int = 1) -> int:
    """Waves of a kernel of `blocks` thread blocks on `sms` SMs, `resident` blocks at once on
    each. (The profiler's "blocks per SM" is blocks ÷ SMs, not residency: not this.)"""
    return max(1, math.ceil(blocks / (max(1, sms) * max(1, resident))))


def tiles(m: int, n: int, batch: int, tile: tuple[int, int] = TILE) -> int:
    """Output tiles of a matmul."""
    return math.ceil(m / tile[0]) * math.ceil(n / tile[1]) * max(batch, 1)


def split_k(m: int, n: int, k: int, batch: int, sms: int | None, ridge_bytes: float = 0.0,
            tile: tuple[int, int] = TILE) -> tuple[int, float]:
    """(split of K, cost ÷ an unquantized run) of a matmul's best split: the waves'
    (tiles·split ÷ (waves × SMs)) against its partial sums' traffic (each slice writes
    m×n fp32, read back once to sum them), `ridge_bytes` FLOP per byte of that traffic
    (the GPU's matmul rate ÷ memory bandwidth). Each slice keeps ≥ MIN_SPLIT_K of K.
    (1, 1.0) without an SM count."""
    if not sms:
        return 1, 1.0
    t = tiles(m, n, batch, tile)
    flops = 2.0 * m * n * k * max(batch, 1)
    best = (1, math.inf)
    for split in range(1, max(1, min(sms, k // MIN_SPLIT_K)) + 1):
        quantized = waves(t * split, sms) * sms / (t * split)
        partials = 2 * split * m * n * max(batch, 1) * PARTIAL_BYTES if split > 1 else 0
        cost = quantized + partials * ridge_bytes / flops
        if cost < best[1] - 1e-12:
            best = (split, cost)
    return best


def wave_efficiency(m: int, n: int, k: int, batch: int, sms: int | None,
                    ridge_bytes: float = 0.0,
                    tiles_: tuple[tuple[int, int], ...] = TILES) -> float:
    """Share of the matmul rate a matmul keeps after quantization and split-K: 1 ÷ the cost
    of the best tile and split; 1 without an SM count."""
    return 1.0 / min(split_k(m, n, k, batch, sms, ridge_bytes, t)[1] for t in tiles_)


def habitat_gamma(flops: float, bytes_: float, dest_tflops: float | None,
                  dest_gbps: float) -> float:
    """Habitat's exponent γ for a kernel that keeps its code on the other GPU: its time
    scales as bandwidth^γ × compute^(1−γ). γ = 1 − I/(2R) up to the destination's ridge point
    R (FLOP per byte), 0.5·R/I beyond it; a kernel without FLOPs is memory-bound (γ = 1)."""
    if flops <= 0 or not dest_tflops:
        return 1.0
    if bytes_ <= 0:
        return 0.0
    intensity = flops / bytes_
    ridge = dest_tflops * 1e12 / (dest_gbps * 1e9)
    if intensity <= ridge:
        return 1.0 - 0.5 * intensity / ridge
    return 0.5 * ridge / intensity
