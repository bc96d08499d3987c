"""Synthetic fleets: runs as a fleet audit would store them, for rehearsing `fleet report` at
a scale no test machine has (validation/fleet/scale_report.py) and for tests.

Figures are drawn around the H200 quick-profile medians measured on the lent machines
(tests/fixtures/bench/h200-2gpu-quick.json), with a 1 % normal spread; faults are planted on
chosen nodes. Deterministic for a given seed.
"""

from __future__ import annotations

import random
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from gpuaudit._version import __version__
from gpuaudit.model import (
    Finding,
    Gpu,
    Host,
    Machine,
    Measurement,
    NodeIdentity,
    PcieLink,
    Run,
    Severity,
)

GPU_NAME = "NVIDIA H200"
# (suite, name, unit, value): per-GPU figures of a healthy H200 (rounded real medians).
GPU_FIGURES = (
    ("matmul", "fp64", "TFLOP/s", 54.7), ("matmul", "fp32", "TFLOP/s", 51.1),
    ("matmul", "tf32", "TFLOP/s", 367.0), ("matmul", "bf16", "TFLOP/s", 684.0),
    ("matmul", "fp16", "TFLOP/s", 658.0), ("matmul", "fp8", "TFLOP/s", 1289.0),
    ("matmul", "int8", "TOP/s", 966.0),
    ("memory", "copy", "GB/s", 4202.0), ("memory", "read", "GB/s", 4322.0),
    ("memory", "write", "GB/s", 4620.0),
    ("transfer", "h2d_pinned", "GB/s", 55.4), ("transfer", "d2h_pinned", "GB/s", 55.3),
    ("transfer", "h2d_pageable", "GB/s", 9.6), ("transfer", "d2h_pageable", "GB/s", 17.1),
    ("latency", "launch", "us", 8.41), ("latency", "launch_graph", "us", 0.91),
    ("latency", "roundtrip", "us", 15.0),
    ("p2p", "p2p_unidir", "GB/s", 390.9), ("p2p", "p2p_bidir", "GB/s", 763.0),
    ("p2p", "p2p_latency", "us", 2.35),
)
# Node-wide figures (one per node): the collectives' peaks on 8 NVLink-connected GPUs.
NODE_FIGURES = (
    ("collectives", "all_reduce_busbw_peak", "GB/s", 480.0),
    ("collectives", "all_gather_busbw_peak", "GB/s", 380.0),
    ("collectives", "reduce_scatter_busbw_peak", "GB/s", 370.0),
    ("collectives", "all_to_all_busbw_peak", "GB/s", 340.0),
    ("collectives", "broadcast_busbw_peak", "GB/s", 300.0),
)
NOISE = 0.01


@dataclass(frozen=True)
class Plant:
    """Faults of one node: a slow GPU (its matmul and memory figures × `slow_factor`), a PCIe
    link at half width on a GPU (FAIL finding, host↔device figures halved)."""

    slow_gpu: int | None = None
    slow_factor: float = 0.7
    narrow_pcie_gpu: int | None = None
    swapped_gpu: int | None = None  # this GPU replaced by other hardware (new UUID, serial)
    driver_version: str | None = None


@dataclass
class SyntheticFleet:
    nodes: int
    gpus_per_node: int = 8
    seed: int = 0
    plants: dict[int, Plant] = field(default_factory=dict)  # node number → its faults
    # Samples kept per figure: 0 for speed; ~200 makes a document the size of a real 8-GPU
    # quick audit (about 0.7 MB of JSON, most of it the matmul shape search's samples).
    samples: int = 0
    prefix: str = "gpu-node"

    def hostname(self, node: int) -> str:
        return f"{self.prefix}-{node:04d}"

    def runs(self, started: datetime, *, round_: int = 0, fleet_id: str | None = None
             ) -> Iterator[Run]:
        """One audit per node, `round_` numbering successive audits (different noise)."""
        for node in range(self.nodes):
            yield self.run(node, started + timedelta(milliseconds=node), round_=round_,
                           fleet_id=fleet_id)

    def run(self, node: int, started: datetime, *, round_: int = 0,
            fleet_id: str | None = None) -> Run:
        rng = random.Random(f"{self.seed}-{node}-{round_}")
        plant = self.plants.get(node, Plant())
        gpus = tuple(self._gpu(node, i, plant) for i in range(self.gpus_per_node))
        machine = Machine(captured_at=started,
                          host=Host(hostname=self.hostname(node), python_version="3.11"),
                          driver_version=plant.driver_version or "580.159.04",
                          cuda_driver_version="13.0", gpus=gpus)
        measured: list[Measurement] = []
        for g in gpus:
            for suite, name, unit, value in GPU_FIGURES:
                factor = rng.gauss(1.0, NOISE)
                if plant.slow_gpu == g.index and suite in ("matmul", "memory"):
                    factor *= plant.slow_factor
                if plant.narrow_pcie_gpu == g.index and suite == "transfer":
                    factor *= 0.5
                measured.append(Measurement(
                    suite=suite, name=name, unit=unit, value=value * factor, gpu_index=g.index,
                    samples=tuple(value * factor * rng.gauss(1.0, NOISE)
                                  for _ in range(self.samples))))
        for suite, name, unit, value in NODE_FIGURES:
            measured.append(Measurement(suite=suite, name=name, unit=unit,
                                        value=value * rng.gauss(1.0, NOISE)))
        findings = [Finding(code="pcie.ok", severity=Severity.PASS, gpu_index=g.index,
                            message="PCIe link at its maximum") for g in gpus
                    if g.index != plant.narrow_pcie_gpu]
        if plant.narrow_pcie_gpu is not None:
            findings.append(Finding(code="pcie.width-degraded", severity=Severity.FAIL,
                                    gpu_index=plant.narrow_pcie_gpu,
                                    message="PCIe link runs x8, the GPU and slot allow x16"))
        return Run(kind="run", started_at=started, finished_at=started + timedelta(seconds=90),
                   tool_version=__version__, source="synthetic", machine=machine,
                   findings=tuple(findings), measurements=tuple(measured),
                   node=NodeIdentity(hostname=self.hostname(node), ray_node_id=f"{node:056x}",
                                     node_ip=f"10.0.{node // 250}.{node % 250 + 1}",
                                     fleet_id=fleet_id,
                                     gpu_uuids=tuple(g.uuid for g in gpus),
                                     gpu_serials=tuple(g.serial for g in gpus)))

    def _gpu(self, node: int, index: int, plant: Plant) -> Gpu:
        swapped = plant.swapped_gpu == index
        tag = "f" if swapped else "0"
        width = 8 if plant.narrow_pcie_gpu == index else 16
        return Gpu(index=index, name=GPU_NAME,
                   uuid=f"GPU-{self.seed:08x}-{node:04x}-{index:04x}-{tag}000-000000000000",
                   serial=f"{1650000000000 + node * 16 + index + (8 if swapped else 0)}",
                   vbios_version="96.00.AF.00.01",
                   pcie=PcieLink(gen_current=5, gen_max=5, width_current=width, width_max=16))
