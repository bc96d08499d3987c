"""The GPU's configuration and what the driver says of it: fabric, MIG, compute and
persistence modes, InfoROM, recovery action, power readout."""

from __future__ import annotations

from collections.abc import Iterator

from gpuaudit.model import Finding, Severity

from .base import GpuCtx, ok, problem

RECOVERY_ADVICE = {
    "gpu_reset": "reset the GPU when idle (sudo nvidia-smi -r -i {i})",
    "node_reboot": "reboot the node",
    "drain_p2p": "stop peer-to-peer (NVLink/P2P) jobs on it, then reset it",
    "drain_and_reset": "let running jobs finish, start no new ones, then reset it",
    "bus_reset": "reset its PCIe bus (or reboot the node)",
    "system_reboot": "reboot the whole system",
    "recover_imex_domain": "recover the IMEX domain (restart nvidia-imex on the domain's nodes)",
}


def check_fabric(c: GpuCtx) -> Iterator[Finding]:
    """NVSwitch systems need the fabric manager to train the fabric before CUDA can start."""
    g = c.gpu
    if g.fabric_state in (None, "not_supported"):
        return
    evidence = {"fabric_state": g.fabric_state, "fabric_ok": g.fabric_ok}
    if g.fabric_state != "completed" or g.fabric_ok is False:
        yield problem("fabric.not-ready", Severity.FAIL, g,
                      f"the NVSwitch fabric is {g.fabric_state.replace('_', ' ')}"
                      + (" with an error" if g.fabric_ok is False else "")
                      + ": CUDA fails with 'system not yet initialized' (error 802)",
                      "Start or restart nvidia-fabricmanager (its version must match the "
                      "driver) and wait for the fabric to train.", **evidence)
    else:
        yield ok("fabric", g, "NVSwitch fabric trained", **evidence)


def check_mig(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    if g.mig_enabled:
        yield problem("mig.enabled", Severity.INFO, g,
                      f"MIG is on: the GPU is split into {len(g.mig_instances)} instances",
                      "Each instance has a fraction of the SMs and memory; a job sees one.",
                      instances=len(g.mig_instances))
    if g.mig_pending is not None and g.mig_enabled is not None and g.mig_pending != g.mig_enabled:
        yield problem("mig.change-pending", Severity.INFO, g,
                      f"MIG will be {'on' if g.mig_pending else 'off'} after the next reset",
                      None, mig_enabled=g.mig_enabled, mig_pending=g.mig_pending)


def check_modes(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    if g.compute_mode == "prohibited":
        yield problem("mode.compute-prohibited", Severity.FAIL, g,
                      "compute mode is Prohibited: no CUDA context can be created",
                      "Ask the admin to set compute mode Default (nvidia-smi -c 0).",
                      compute_mode=g.compute_mode)
    elif g.compute_mode in ("exclusive_process", "exclusive_thread"):
        yield problem("mode.compute-exclusive", Severity.INFO, g,
                      f"compute mode is {g.compute_mode}: one process at a time",
                      "Multi-process jobs per GPU (e.g. several data-loader CUDA users) fail.",
                      compute_mode=g.compute_mode)
    if g.virtualization_mode == "vgpu":
        yield problem("virtualization.vgpu", Severity.WARN, g,
                      "this is a vGPU: a time-sliced share of a physical GPU",
                      "Expect lower and noisier throughput than the datasheet; benchmark it.",
                      virtualization_mode=g.virtualization_mode)


def check_persistence(c: GpuCtx) -> Iterator[Finding]:
    """Windows has no persistence mode (NVML says Not Supported there): only Linux reports off."""
    g = c.gpu
    if g.persistence_mode is False:
        yield problem(
            "mode.persistence-off", Severity.INFO, g,
            "persistence mode is off: the driver lets go of the GPU whenever no process uses "
            "it, so each job's first CUDA call pays the GPU's initialisation again (about a "
            "second per GPU, more on large machines) and clock and application-clock settings "
            "drop back between jobs", "Turn it on: sudo systemctl enable --now "
            "nvidia-persistenced (or sudo nvidia-smi -pm 1); without root, ask the provider.",
            persistence_mode=False)


def check_inforom(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    if g.inforom_valid is False:
        yield problem("inforom.corrupt", Severity.FAIL, g,
                      "NVML reports the InfoROM corrupted: the board's record of ECC errors, "
                      "retired pages and settings cannot be trusted",
                      "Have the GPU reflashed or replaced; on a rented node, report it and "
                      "move.", inforom_valid=False)
    elif g.inforom_valid:
        yield ok("inforom", g, "InfoROM valid", inforom_valid=True)


def check_recovery_action(c: GpuCtx) -> Iterator[Finding]:
    """What the driver says the GPU needs before it can be trusted again (R550+)."""
    g = c.gpu
    action = g.recovery_action
    if action is None:
        return
    if action == "none":
        yield ok("recovery", g, "the driver asks no recovery action", recovery_action=action)
        return
    todo = RECOVERY_ADVICE.get(action, f"act as NVIDIA documents for '{action}'")
    yield problem("recovery.action-needed", Severity.FAIL, g,
                  f"the driver says this GPU needs a recovery action: "
                  f"{action.replace('_', ' ')}",
                  f"{todo.format(i=g.index)[0].upper()}{todo.format(i=g.index)[1:]}; until "
                  "then do not trust results from it. On a rented node, ask the provider.",
                  recovery_action=action)


def check_power_readout(c: GpuCtx) -> Iterator[Finding]:
    """DCGM warns when a GPU's power cannot be read: its power cap cannot be watched then."""
    g = c.gpu
    reason = g.unavailable.get("power.draw_w")
    if g.power.draw_w is None and reason and reason not in ("Not Supported", "not recorded") \
            and not reason.startswith("reading not trusted"):
        yield problem("power.unreadable", Severity.WARN, g,
                      f"the GPU's power draw cannot be read ({reason})",
                      "Power capping and power-related slowdowns cannot be watched; update "
                      "the driver or reset the GPU.", reason=reason)
