"""Health checks: pure functions from a Machine snapshot to Findings.

Each check has a stable id. A check that found nothing wrong yields one PASS finding coded with
its id; a problem yields a finding coded "<check>.<problem>". A check whose inputs could not be
read yields nothing: the snapshot's `unavailable` map says why.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

from gpuaudit.model import Finding, Gpu, Machine, Severity
from gpuaudit.specs import GpuSpec, lookup

GIB = 1 << 30

# Clock-event reasons that mean the hardware itself is holding clocks down.
HW_SLOWDOWNS = {
    "hw_slowdown": ("clocks.hw-slowdown", "HW slowdown is active (thermal, power brake or "
                    "power-supply event)"),
    "hw_thermal_slowdown": ("clocks.hw-thermal-slowdown", "HW thermal slowdown is active: "
                            "the GPU is too hot"),
    "hw_power_brake_slowdown": ("clocks.hw-power-brake", "HW power-brake slowdown is active: "
                                "an external power-brake signal (power supply or chassis)"),
}

# XIDs that mean the GPU or its memory needs attention now (NVIDIA's XID catalogue).
CRITICAL_XIDS = {48: "double-bit ECC error", 63: "row-remap event", 64: "row-remap failure",
                 74: "NVLink error", 79: "GPU has fallen off the bus",
                 92: "high single-bit ECC rate", 94: "contained ECC error",
                 95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error"}

TEMP_MARGIN_C = 5
# A GPU with more memory than this in use and nothing else on it is "held" by someone.
MEMORY_IN_USE_FRACTION = 0.05


def _ok(check: str, gpu: Gpu | None, message: str, **evidence) -> Finding:
    return Finding(code=check, severity=Severity.PASS, message=message,
                   gpu_index=gpu.index if gpu else None, evidence=evidence)


def _problem(code: str, severity: Severity, gpu: Gpu | None, message: str, advice: str | None,
             **evidence) -> Finding:
    return Finding(code=code, severity=severity, message=message, advice=advice,
                   gpu_index=gpu.index if gpu else None, evidence=evidence)


def is_idle(gpu: Gpu) -> bool:
    reasons = gpu.clocks.event_reasons or ()
    return "gpu_idle" in reasons or gpu.utilization_gpu_pct == 0


def check_pcie(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    p = gpu.pcie
    found = False
    if p.width_current is not None and p.width_max is not None and p.width_current < p.width_max:
        found = True
        yield _problem(
            "pcie.width-degraded", Severity.FAIL, gpu,
            f"PCIe link runs x{p.width_current}, the GPU and slot allow x{p.width_max}",
            "Reseat the GPU or riser, check the slot; host↔device bandwidth is cut in "
            "proportion. Ask the provider for another node if you rent it.",
            width_current=p.width_current, width_max=p.width_max)
    if p.gen_current is not None and p.gen_max is not None and p.gen_current < p.gen_max:
        found = True
        if is_idle(gpu):
            yield _problem(
                "pcie.gen-below-max-idle", Severity.INFO, gpu,
                f"PCIe link at Gen{p.gen_current} (max Gen{p.gen_max}) while the GPU is idle: "
                "links train down to save power",
                "Confirm under load: `gpuaudit bench transfer` or inspect during a job.",
                gen_current=p.gen_current, gen_max=p.gen_max)
        else:
            yield _problem(
                "pcie.gen-below-max", Severity.WARN, gpu,
                f"PCIe link at Gen{p.gen_current} under load, the GPU and slot allow "
                f"Gen{p.gen_max}",
                "Check BIOS PCIe settings and the riser; the link should train to its max "
                "when busy.", gen_current=p.gen_current, gen_max=p.gen_max)
    if p.gen_max is not None and p.gen_gpu_max is not None and p.gen_max < p.gen_gpu_max:
        found = True
        yield _problem(
            "pcie.slot-below-gpu", Severity.WARN, gpu,
            f"the slot limits the link to Gen{p.gen_max}; the GPU supports Gen{p.gen_gpu_max}",
            "Host↔device transfers top out at the slot's rate; prefer a host whose slot "
            "matches the GPU.", gen_max=p.gen_max, gen_gpu_max=p.gen_gpu_max)
    if not found and p.width_current is not None and p.gen_current is not None:
        yield _ok("pcie", gpu, f"PCIe Gen{p.gen_current} x{p.width_current} "
                  f"(max Gen{p.gen_max} x{p.width_max})",
                  gen_current=p.gen_current, width_current=p.width_current)


def check_clocks(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    reasons = gpu.clocks.event_reasons
    if reasons is None:
        return
    evidence = {"event_reasons": ",".join(reasons) or "none", "sm_mhz": gpu.clocks.sm_mhz}
    problems = [
        _problem(code, Severity.FAIL, gpu, message,
                 "Check cooling, fans and the power supply; the GPU runs below its clocks "
                 "until the cause is gone. On a rented node, report it and move.", **evidence)
        for code, message in (HW_SLOWDOWNS[r] for r in reasons if r in HW_SLOWDOWNS)
    ]
    if "sw_thermal_slowdown" in reasons:
        problems.append(_problem(
            "clocks.sw-thermal-slowdown", Severity.WARN, gpu,
            "the driver is slowing clocks to keep the GPU under its temperature target",
            "Improve airflow or lower the load; check the fans.", **evidence))
    if "sw_power_cap" in reasons and is_idle(gpu):
        problems.append(_problem(
            "clocks.power-cap-while-idle", Severity.WARN, gpu,
            "the software power cap is holding clocks down while the GPU is idle",
            "An idle GPU should not reach its power cap: check the power limit "
            "(nvidia-smi -q -d POWER) and whether another tenant is using the GPU.",
            power_draw_w=gpu.power.draw_w, power_limit_w=gpu.power.limit_w, **evidence))
    yield from problems or [
        _ok("clocks", gpu, f"no slowdown active (reasons: {evidence['event_reasons']})",
            **evidence)]


def check_power_limit(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    pw = gpu.power
    if pw.limit_w is None or pw.default_limit_w is None:
        return
    if pw.limit_w < pw.default_limit_w - 1:
        yield _problem("power.limit-below-default", Severity.WARN, gpu,
                       f"power limit is {pw.limit_w:.0f} W, below the default "
                       f"{pw.default_limit_w:.0f} W",
                       "Compute-bound work runs slower under a lowered cap; ask the provider, "
                       "or price the node by what it delivers (gpuaudit bench).",
                       limit_w=pw.limit_w, default_limit_w=pw.default_limit_w)
    else:
        yield _ok("power", gpu, f"power limit {pw.limit_w:.0f} W (default "
                  f"{pw.default_limit_w:.0f} W)", limit_w=pw.limit_w)


def check_temperature(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    t = gpu.thermal
    if t.gpu_c is None or t.slowdown_c is None:
        return
    evidence = {"gpu_c": t.gpu_c, "slowdown_c": t.slowdown_c}
    if t.gpu_c >= t.slowdown_c:
        yield _problem("thermal.at-slowdown", Severity.FAIL, gpu,
                       f"GPU at {t.gpu_c} °C, at or over its slowdown threshold "
                       f"{t.slowdown_c} °C", "Check cooling now; clocks are being cut.",
                       **evidence)
    elif t.gpu_c >= t.slowdown_c - TEMP_MARGIN_C:
        yield _problem("thermal.near-slowdown", Severity.WARN, gpu,
                       f"GPU at {t.gpu_c} °C, within {TEMP_MARGIN_C} °C of its slowdown "
                       f"threshold {t.slowdown_c} °C",
                       "Check airflow and fans; under sustained load it will throttle.",
                       **evidence)
    else:
        yield _ok("thermal", gpu, f"{t.gpu_c} °C, slowdown at {t.slowdown_c} °C", **evidence)


def check_ecc(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    e = gpu.ecc
    problems = False
    if e.enabled is False and "GeForce" not in gpu.name:
        problems = True
        yield _problem("ecc.disabled", Severity.WARN, gpu,
                       "ECC is off on a datacenter GPU: memory errors go undetected",
                       "Enable it (nvidia-smi -e 1, then a GPU reset) unless you chose speed "
                       "over error detection on purpose.", ecc_enabled=False)
    if e.pending_enabled is not None and e.enabled is not None and e.pending_enabled != e.enabled:
        problems = True
        yield _problem("ecc.change-pending", Severity.INFO, gpu,
                       f"ECC will be {'on' if e.pending_enabled else 'off'} after the next "
                       "GPU reset", None, ecc_enabled=e.enabled,
                       ecc_pending_enabled=e.pending_enabled)
    if e.volatile_uncorrected:
        problems = True
        yield _problem("ecc.uncorrectable-volatile", Severity.FAIL, gpu,
                       f"{e.volatile_uncorrected} uncorrectable ECC errors since the last "
                       "driver load", "Data may be corrupt: stop jobs on this GPU, reset it, "
                       "and have it checked (DCGM diag level 3) or RMA'd.",
                       volatile_uncorrected=e.volatile_uncorrected)
    elif e.aggregate_uncorrected:
        problems = True
        yield _problem("ecc.uncorrectable-history", Severity.WARN, gpu,
                       f"{e.aggregate_uncorrected} uncorrectable ECC errors over the GPU's life",
                       "Watch for new ones; check remapped rows.",
                       aggregate_uncorrected=e.aggregate_uncorrected)
    if not problems and e.enabled:
        yield _ok("ecc", gpu, "ECC on, no uncorrectable errors",
                  volatile_corrected=e.volatile_corrected)


def check_remapped_rows(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    rr = gpu.remapped_rows
    if rr.pending is None:
        return
    evidence = {"correctable": rr.correctable, "uncorrectable": rr.uncorrectable,
                "pending": rr.pending, "failed": rr.failed}
    if rr.failed:
        yield _problem("remapped-rows.failed", Severity.FAIL, gpu,
                       "a row remapping failed: the GPU has run out of spare memory rows",
                       "The GPU needs replacement (RMA); do not run jobs on it.", **evidence)
    if rr.pending:
        yield _problem("remapped-rows.pending", Severity.WARN, gpu,
                       "a memory row remapping is pending: it takes effect at the next reset",
                       "Reset the GPU (or reboot) when idle; until then the bad row is in use.",
                       **evidence)
    if not rr.failed and not rr.pending:
        yield _ok("remapped-rows", gpu, f"{rr.correctable or 0} correctable and "
                  f"{rr.uncorrectable or 0} uncorrectable rows remapped, none pending",
                  **evidence)


def check_retired_pages(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    if gpu.retired_pages.pending:
        yield _problem("retired-pages.pending", Severity.WARN, gpu,
                       "retired memory pages are pending: they take effect after a reset",
                       "Reset the GPU (or reboot) when idle.",
                       single_bit=gpu.retired_pages.single_bit,
                       double_bit=gpu.retired_pages.double_bit)


def check_nvlink(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    if not gpu.nvlinks:
        return
    down = [link.link for link in gpu.nvlinks if not link.active]
    active = gpu.nvlinks_active
    expected = spec.nvlink_links if spec and spec.nvlink_links else None
    if down and active:
        yield _problem("nvlink.down", Severity.FAIL, gpu,
                       f"NVLink {', '.join(map(str, down))} down while {active} are up",
                       "GPU↔GPU bandwidth is cut; check nvidia-smi nvlink -s and the fabric "
                       "manager; on a rented node, report it.",
                       links_down=",".join(map(str, down)), links_active=active)
    elif expected and 0 < active < expected:
        yield _problem("nvlink.fewer-than-spec", Severity.WARN, gpu,
                       f"{active} NVLinks active, the {spec.name} has {expected}",  # type: ignore[union-attr]
                       "Some links are missing or disabled; GPU↔GPU bandwidth is lower.",
                       links_active=active, links_expected=expected)
    elif active:
        yield _ok("nvlink", gpu, f"{active} NVLinks active", links_active=active)


def check_fabric(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    """NVSwitch systems need the fabric manager to train the fabric before CUDA can start."""
    if gpu.fabric_state in (None, "not_supported"):
        return
    evidence = {"fabric_state": gpu.fabric_state, "fabric_ok": gpu.fabric_ok}
    if gpu.fabric_state != "completed" or gpu.fabric_ok is False:
        yield _problem("fabric.not-ready", Severity.FAIL, gpu,
                       f"the NVSwitch fabric is {gpu.fabric_state.replace('_', ' ')}"
                       + (" with an error" if gpu.fabric_ok is False else "")
                       + ": CUDA fails with 'system not yet initialized' (error 802)",
                       "Start or restart nvidia-fabricmanager (its version must match the "
                       "driver) and wait for the fabric to train.", **evidence)
    else:
        yield _ok("fabric", gpu, "NVSwitch fabric trained", **evidence)


def check_mig(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    if gpu.mig_enabled:
        yield _problem("mig.enabled", Severity.INFO, gpu,
                       f"MIG is on: the GPU is split into {len(gpu.mig_instances)} instances",
                       "Each instance has a fraction of the SMs and memory; a job sees one.",
                       instances=len(gpu.mig_instances))
    if gpu.mig_pending is not None and gpu.mig_enabled is not None and \
            gpu.mig_pending != gpu.mig_enabled:
        yield _problem("mig.change-pending", Severity.INFO, gpu,
                       f"MIG will be {'on' if gpu.mig_pending else 'off'} after the next reset",
                       None, mig_enabled=gpu.mig_enabled, mig_pending=gpu.mig_pending)


def check_memory_in_use(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    procs = gpu.processes or ()
    holding = [p for p in procs if p.used_memory_bytes is None or p.used_memory_bytes > 0]
    used, total = gpu.memory_used_bytes, gpu.memory_total_bytes
    if holding:
        gib = sum(p.used_memory_bytes or 0 for p in holding) / GIB
        names = ", ".join(f"{p.pid} ({p.name or '?'})" for p in holding[:5])
        yield _problem("memory.in-use", Severity.WARN, gpu,
                       f"{len(holding)} process(es) already hold {gib:.1f} GiB: {names}",
                       "Another job shares this GPU: results and speed will suffer. Stop it or "
                       "choose another GPU (CUDA_VISIBLE_DEVICES).",
                       processes=len(holding), used_gib=round(gib, 2))
    elif used is not None and total and used > MEMORY_IN_USE_FRACTION * total:
        yield _problem("memory.in-use-unseen", Severity.WARN, gpu,
                       f"{used / GIB:.1f} GiB of {total / GIB:.0f} GiB in use by processes not "
                       "visible here (another container or tenant?)",
                       "Find who uses the GPU before trusting timings (nvidia-smi on the host).",
                       used_gib=round(used / GIB, 2))
    elif used is not None:
        yield _ok("memory", gpu, f"{used / GIB:.1f} GiB in use, no other process",
                  used_gib=round(used / GIB, 2))


def check_modes(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    if gpu.compute_mode == "prohibited":
        yield _problem("mode.compute-prohibited", Severity.FAIL, gpu,
                       "compute mode is Prohibited: no CUDA context can be created",
                       "Ask the admin to set compute mode Default (nvidia-smi -c 0).",
                       compute_mode=gpu.compute_mode)
    elif gpu.compute_mode in ("exclusive_process", "exclusive_thread"):
        yield _problem("mode.compute-exclusive", Severity.INFO, gpu,
                       f"compute mode is {gpu.compute_mode}: one process at a time",
                       "Multi-process jobs per GPU (e.g. several data-loader CUDA users) fail.",
                       compute_mode=gpu.compute_mode)
    if gpu.virtualization_mode == "vgpu":
        yield _problem("virtualization.vgpu", Severity.WARN, gpu,
                       "this is a vGPU: a time-sliced share of a physical GPU",
                       "Expect lower and noisier throughput than the datasheet; benchmark it.",
                       virtualization_mode=gpu.virtualization_mode)


def check_spec_known(gpu: Gpu, spec: GpuSpec | None) -> Iterator[Finding]:
    if spec is None:
        yield _problem("spec.unknown-model", Severity.INFO, gpu,
                       f"{gpu.name} is not in the spec catalog: no datasheet peaks to compare",
                       "Benchmarks still run; % of spec is left out.",
                       name=gpu.name, pci_device_id=gpu.pci_device_id)


GPU_CHECKS: tuple[Callable[[Gpu, GpuSpec | None], Iterator[Finding]], ...] = (
    check_spec_known, check_pcie, check_clocks, check_power_limit, check_temperature,
    check_ecc, check_remapped_rows, check_retired_pages, check_nvlink, check_fabric, check_mig,
    check_memory_in_use, check_modes,
)


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:2] if x.isdigit())


def check_torch_cuda(m: Machine) -> Iterator[Finding]:
    built, driver = m.host.torch_cuda_version, m.cuda_driver_version
    if not built or not driver:
        return
    b, dv = _version_tuple(built), _version_tuple(driver)
    evidence = {"torch_version": m.host.torch_version, "torch_cuda": built,
                "driver_cuda": driver, "driver_version": m.driver_version}
    if b[:1] > dv[:1]:
        yield _problem("torch.cuda-newer-than-driver", Severity.FAIL, None,
                       f"torch {m.host.torch_version} is built for CUDA {built}; the driver "
                       f"supports up to CUDA {driver}: CUDA will not initialise",
                       f"Install a torch build for CUDA ≤ {driver} or upgrade the driver.",
                       **evidence)
    elif b > dv:
        yield _problem("torch.cuda-minor-newer-than-driver", Severity.WARN, None,
                       f"torch is built for CUDA {built}, the driver supports {driver}: it runs "
                       "through minor-version compatibility, but PTX JIT and newer features fail",
                       f"Prefer a torch build for CUDA {driver} or upgrade the driver.",
                       **evidence)
    else:
        yield _ok("torch", None, f"torch {m.host.torch_version} (CUDA {built}) fits the "
                  f"driver's CUDA {driver}", **evidence)


def check_mixed_models(m: Machine) -> Iterator[Finding]:
    names = sorted({g.name for g in m.gpus})
    if len(names) > 1:
        yield _problem("box.mixed-models", Severity.WARN, None,
                       f"this machine mixes GPU models: {', '.join(names)}",
                       "Data-parallel jobs run at the pace of the slowest GPU; pin jobs to one "
                       "model with CUDA_VISIBLE_DEVICES.", models=", ".join(names))


def check_xids(m: Machine) -> Iterator[Finding]:
    if not m.xid_counts:
        return
    critical = {x: n for x, n in m.xid_counts.items() if x in CRITICAL_XIDS}
    listing = ", ".join(f"XID {x}×{n}" for x, n in sorted(m.xid_counts.items()))
    if critical:
        what = "; ".join(f"XID {x}: {CRITICAL_XIDS[x]}" for x in sorted(critical))
        yield _problem("xid.critical", Severity.FAIL, None, f"kernel log has {what}",
                       "Look up each XID in NVIDIA's XID catalogue; most of these need a reset "
                       "or a hardware check.", xids=listing)
    else:
        yield _problem("xid.seen", Severity.WARN, None, f"kernel log has {listing}",
                       "Usually application faults (e.g. XID 13, 31, 43); check they are not "
                       "recurring.", xids=listing)


MACHINE_CHECKS: tuple[Callable[[Machine], Iterator[Finding]], ...] = (
    check_torch_cuda, check_mixed_models, check_xids,
)


def check_machine(m: Machine) -> tuple[Finding, ...]:
    """Every health finding for the machine, GPU by GPU, then machine-wide."""
    if not m.gpus:
        return (Finding(code="gpu.none", severity=Severity.INFO,
                        message=f"no NVIDIA GPU found: {m.nvml_error or 'NVML reports none'}",
                        advice="On a GPU server, check the driver (nvidia-smi) and that the "
                               "container sees the devices (--gpus all)."),)
    findings: list[Finding] = []
    for gpu in m.gpus:
        spec = lookup(nvml_name=gpu.name, pci_device_id=gpu.pci_device_id)
        for check in GPU_CHECKS:
            findings.extend(check(gpu, spec))
    for machine_check in MACHINE_CHECKS:
        findings.extend(machine_check(m))
    return tuple(findings)
