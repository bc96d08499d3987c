"""This machine's measured rates, from a stored bench run: matmul per precision (the
sustained figure), device-memory bandwidth (copy, read + write counted), all-reduce bus
bandwidth per message size. They are the efficiency reference of every prediction."""

from __future__ import annotations

import math
import statistics
from dataclasses import dataclass

from gpuaudit.model.run import Run
from gpuaudit.specs.catalog import PRECISIONS, GpuSpec, SpecCatalog

from .hardware import Roofs, sm_count

MATMUL_PRECISIONS = ("fp32", "tf32", "bf16", "fp16", "fp8", "int8")


@dataclass(frozen=True)
class AllReduce:
    """All-reduce bus bandwidth by message size on `ranks` GPUs (nccl-tests' busbw:
    algbw × 2(n−1)/n)."""

    sizes_bytes: tuple[int, ...]
    busbw_gbps: tuple[float, ...]
    ranks: int
    source: str

    def busbw(self, size: float) -> float:
        """Log-linear in the size between measured points; the end values beyond them."""
        xs, ys = self.sizes_bytes, self.busbw_gbps
        if size <= xs[0]:
            return ys[0]
        if size >= xs[-1]:
            return ys[-1]
        for (x0, y0), (x1, y1) in zip(zip(xs, ys, strict=True), zip(xs[1:], ys[1:],
                                                                     strict=True),
                                      strict=False):
            if x0 <= size <= x1:
                f = (math.log(size) - math.log(x0)) / (math.log(x1) - math.log(x0))
                return y0 + f * (y1 - y0)
        return ys[-1]

    def seconds(self, size: float, ranks: int) -> float:
        """Time of one all-reduce of `size` bytes over `ranks` GPUs. Below the smallest
        measured size the smallest size's time is the floor (latency-bound)."""
        if ranks < 2 or size <= 0:
            return 0.0
        factor = 2 * (ranks - 1) / ranks
        t = size * factor / (self.busbw(size) * 1e9)
        floor = self.sizes_bytes[0] * factor / (self.busbw_gbps[0] * 1e9)
        return max(t, floor) if size < self.sizes_bytes[0] else t

    def scaled(self, ratio: float, source: str) -> AllReduce:
        return AllReduce(self.sizes_bytes, tuple(b * ratio for b in self.busbw_gbps),
                         self.ranks, source)


@dataclass(frozen=True)
class MachineRates:
    run_id: str
    roofs: Roofs
    allreduce: AllReduce | None
    gpus: int  # GPUs of the machine the rates come from


def _median_value(run: Run, suite: str, name: str) -> float | None:
    values = [m.value for m in run.measurements if m.suite == suite and m.name == name
              and m.value is not None and m.value > 0 and not m.contended]
    return statistics.median(values) if values else None


def allreduce_of(run: Run) -> AllReduce | None:
    """Our own all-reduce figures (nccl-tests' where ours are absent), per size."""
    rows: dict[str, dict[int, float]] = {"ours": {}, "nccl-tests": {}}
    ranks = {"ours": 0, "nccl-tests": 0}
    for m in run.measurements:
        if m.suite != "collectives" or m.name != "all_reduce_busbw" or not m.value:
            continue
        size = m.params.get("size_bytes")
        if not isinstance(size, int | float):
            continue
        who = "nccl-tests" if m.params.get("tool") == "nccl-tests" else "ours"
        rows[who][int(size)] = float(m.value)
        ranks[who] = int(m.params.get("ranks") or 0) or ranks[who]  # type: ignore[arg-type]
    for who in ("ours", "nccl-tests"):
        if len(rows[who]) >= 1 and ranks[who] >= 2:
            sizes = tuple(sorted(rows[who]))
            return AllReduce(sizes, tuple(rows[who][s] for s in sizes), ranks[who],
                             f"all-reduce busbw measured in run {run.id} ({who}, "
                             f"{ranks[who]} GPUs)")
    return None


def gpu_spec_of(run: Run, specs: SpecCatalog) -> GpuSpec | None:
    gpus = run.machine.gpus if run.machine else ()
    if not gpus:
        return None
    return specs.lookup(nvml_name=gpus[0].name, pci_device_id=gpus[0].pci_device_id)


def missing_rates(run: Run, precisions: tuple[str, ...]) -> list[str]:
    """The measurements a prediction needs that `run` lacks (empty: none)."""
    out = [f"matmul/{p} (TFLOP/s)" for p in precisions
           if _median_value(run, "matmul", MATMUL_KEY_OF.get(p, p)) is None]
    if _median_value(run, "memory", "copy") is None:
        out.append("memory/copy (GB/s)")
    return out


MATMUL_KEY_OF = {"fp32": "fp32", "tf32": "tf32", "bf16": "bf16", "fp16": "fp16"}


def machine_rates(run: Run, specs: SpecCatalog) -> MachineRates | None:
    """The rates of `run`'s machine, or None when it has no known GPU or no matmul and
    memory figures."""
    spec = gpu_spec_of(run, specs)
    if spec is None:
        return None
    rates = {p: v for p in MATMUL_PRECISIONS
             if (v := _median_value(run, "matmul", p)) is not None}
    memory = _median_value(run, "memory", "copy")
    if not rates or memory is None:
        return None
    eff: dict[str, float] = {}
    for p, v in rates.items():
        peak = spec.peak(p) if p in PRECISIONS else None
        if peak:
            eff[p] = v / peak
    eff["memory"] = memory / spec.memory_bandwidth_gbps
    roofs = Roofs(gpu=spec, matmul_tflops=rates, memory_gbps=memory, sms=sm_count(spec),
                  measured=True, efficiency=eff,
                  basis=(f"{spec.name}: matmul and memory rates measured in run {run.id} "
                         f"(matmul " + ", ".join(f"{p} {v:.0f}" for p, v in rates.items())
                         + f" TFLOP/s; memory copy {memory:.0f} GB/s)",))
    gpus = len(run.machine.gpus) if run.machine else 1
    return MachineRates(run_id=run.id, roofs=roofs, allreduce=allreduce_of(run), gpus=gpus)
