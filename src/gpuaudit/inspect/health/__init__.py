"""Health checks: pure functions from a Machine snapshot to Findings.

Every GPU that is listed is judged: one that does not answer is a FAIL on that GPU; one that
answers has its readings screened (no check sees a NaN) and then every check, each figure
that has a datasheet value against it. Then the machine-wide checks. Codes are stable: see
docs/inspect.md.
"""

from __future__ import annotations

from gpuaudit.model import Finding, Machine, Severity
from gpuaudit.specs import lookup

from .base import GpuCheck, GpuCtx, MachineCheck, MachineCtx
from .clocks import check_clocks, check_temperature
from .datasheet import (
    check_max_clock,
    check_memory_size,
    check_nvlink,
    check_pcie,
    check_power_limit,
    check_spec_known,
)
from .machine import (
    check_cuda_env,
    check_gpu_count,
    check_mixed_models,
    check_torch_cuda,
    check_vbios,
)
from .memory import check_ecc, check_memory_in_use, check_remapped_rows, check_retired_pages
from .readings import answered_nothing, lost_finding, trusted
from .state import (
    check_fabric,
    check_inforom,
    check_mig,
    check_modes,
    check_persistence,
    check_power_readout,
    check_recovery_action,
)
from .xids import attribute, check_gpu_xids, check_unattributed_xids, untrusted_counts

GPU_CHECKS: tuple[GpuCheck, ...] = (
    check_spec_known, check_memory_size, check_pcie, check_clocks, check_max_clock,
    check_power_limit, check_power_readout, check_temperature, check_ecc, check_remapped_rows,
    check_retired_pages, check_nvlink, check_fabric, check_mig, check_memory_in_use,
    check_modes, check_persistence, check_inforom, check_recovery_action, check_gpu_xids,
)

MACHINE_CHECKS: tuple[MachineCheck, ...] = (
    check_gpu_count, check_torch_cuda, check_mixed_models, check_vbios, check_cuda_env,
    check_unattributed_xids,
)


def check_machine(m: Machine, *, expect_gpus: int | None = None) -> tuple[Finding, ...]:
    """Every health finding for the machine, GPU by GPU, then machine-wide. `expect_gpus`:
    the number of GPUs the machine should have (what you rented), when you know it."""
    by_gpu, rest = attribute(m)
    lost = [g for g in m.gpus if answered_nothing(g)]
    findings: list[Finding] = []
    if not m.gpus:
        findings.append(Finding(
            code="gpu.none", severity=Severity.INFO,
            message=f"no NVIDIA GPU found: {m.nvml_error or 'NVML reports none'}",
            advice="On a GPU server, check the driver (nvidia-smi), that nouveau is not "
                   "bound instead (lsmod | grep nouveau), and that the container sees the "
                   "devices (--gpus all)."))
    # XIDs on a bus no answering GPU has are the lost GPU's when it is the only one lost and
    # its own bus id is unknown (it answered nothing).
    claims = len(lost) == 1 and not lost[0].pci_bus_id and m.xid_counts_by_bus is not None \
        and bool(rest)
    for gpu in m.gpus:
        if gpu in lost:
            findings.append(lost_finding(gpu, by_gpu.get(gpu.index), rest if claims else None))
            continue
        gpu, untrusted = trusted(gpu)
        if untrusted is not None:
            findings.append(untrusted)
        known = m.xid_counts_by_bus is not None
        ctx = GpuCtx(gpu=gpu, spec=lookup(nvml_name=gpu.name, pci_device_id=gpu.pci_device_id),
                     machine=m, xids=by_gpu.get(gpu.index, {}) if known else None)
        for check in GPU_CHECKS:
            findings.extend(check(ctx))
    if (damaged := untrusted_counts(m)) is not None:
        findings.append(damaged)
    mctx = MachineCtx(machine=m, expect_gpus=expect_gpus,
                      unattributed_xids={} if claims else rest)
    for machine_check in MACHINE_CHECKS:
        findings.extend(machine_check(mctx))
    return tuple(findings)


__all__ = ["GPU_CHECKS", "MACHINE_CHECKS", "GpuCtx", "MachineCtx", "check_machine"]
