"""What every check shares: the GPU with its datasheet and machine, and the finding makers.

A check that found nothing wrong yields one PASS finding coded with its id; a problem yields a
finding coded "<check>.<problem>". A check whose inputs could not be read yields nothing: the
snapshot's `unavailable` map says why. A check never yields PASS on a reading it does not have.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from gpuaudit.model import Evidence, Finding, Gpu, Machine, Severity
from gpuaudit.specs import GpuSpec

GIB = 1 << 30


@dataclass(frozen=True)
class GpuCtx:
    """One GPU as a check sees it: its readings, its datasheet (None when unknown), the
    machine around it and the kernel-log XIDs that name its bus (None when not known)."""

    gpu: Gpu
    spec: GpuSpec | None
    machine: Machine
    xids: dict[int, int] | None = None

    @property
    def peers(self) -> int:
        """The other GPUs in the machine (a link to none of them carries nothing)."""
        return len(self.machine.gpus) - 1


@dataclass(frozen=True)
class MachineCtx:
    machine: Machine
    expect_gpus: int | None = None
    # Kernel-log XIDs whose bus names no GPU listed here: code → count.
    unattributed_xids: dict[int, int] = field(default_factory=dict)


GpuCheck = Callable[[GpuCtx], Iterator[Finding]]
MachineCheck = Callable[[MachineCtx], Iterator[Finding]]


def ok(check: str, gpu: Gpu | None, message: str, **evidence) -> Finding:
    return Finding(code=check, severity=Severity.PASS, message=message,
                   gpu_index=gpu.index if gpu else None, evidence=evidence)


def problem(code: str, severity: Severity, gpu: Gpu | None, message: str, advice: str | None,
            **evidence) -> Finding:
    return Finding(code=code, severity=severity, message=message, advice=advice,
                   gpu_index=gpu.index if gpu else None, evidence=evidence)


def datasheet(spec: GpuSpec, fld: str) -> Evidence:
    """The datasheet figure and where it comes from, as finding evidence."""
    source = spec.source_of(fld)
    return {f"spec_{fld}": spec.figure(fld), "spec_model": spec.name,
            "spec_source": source.title if source else None,
            "spec_url": source.url if source else None}


def cite(spec: GpuSpec, fld: str) -> str:
    """'the NVIDIA H200 SXM 141GB datasheet (NVIDIA H200 ... product page)' for a message."""
    source = spec.source_of(fld)
    return f"the {spec.name} datasheet" + (f" ({source.title})" if source else "")


def is_idle(gpu: Gpu) -> bool:
    reasons = gpu.clocks.event_reasons or ()
    return "gpu_idle" in reasons or gpu.utilization_gpu_pct == 0


def is_busy(gpu: Gpu) -> bool:
    """Known to be working: some utilization and the driver not calling it idle."""
    reasons = gpu.clocks.event_reasons
    return reasons is not None and "gpu_idle" not in reasons and \
        (gpu.utilization_gpu_pct or 0) > 0


def is_sxm(spec: GpuSpec) -> bool:
    """Board-mounted parts whose NVLinks are wired in; PCIe cards take an optional bridge."""
    return spec.form_factor.upper().startswith("SXM")
