"""Kernel-log XIDs: which GPU raised them (the log names its PCI bus) and how bad they are."""

from __future__ import annotations

from collections import Counter
from collections.abc import Iterator

from gpuaudit.hw.xids import xid_bus
from gpuaudit.model import Finding, Gpu, Machine, Severity

from .base import GpuCtx, MachineCtx, problem

# XIDs that mean the GPU or its memory needs attention now: Azure NHC's list (a node with any
# of them in the last hours is taken out of service) and the ECC ones NVIDIA's catalogue asks
# a reset for. Descriptions from NVIDIA's XID catalogue.
CRITICAL_XIDS = {
    48: "double-bit ECC error", 56: "display engine error",
    57: "error programming video memory interface",
    58: "unstable video memory interface", 62: "internal micro-controller halt",
    63: "row-remap or page-retirement event", 64: "row-remap or page-retirement failure",
    65: "video processor exception", 68: "video decoder exception",
    69: "graphics engine class error", 73: "video encoder error", 74: "NVLink error",
    79: "GPU has fallen off the bus", 80: "corrupted data sent to the GPU",
    81: "VGA subsystem error", 92: "high single-bit ECC rate", 94: "contained ECC error",
    95: "uncontained ECC error", 119: "GSP RPC timeout", 120: "GSP error",
}
# Common XIDs that are usually the application's doing.
OTHER_XIDS = {13: "graphics engine exception (often an application bug)",
              31: "GPU memory page fault (often an application bug)",
              43: "GPU stopped processing (the application's channel was reset)",
              45: "preemptive cleanup after earlier errors"}


def is_critical(code: int) -> bool:
    return code in CRITICAL_XIDS


def describe_xids(counts: dict[int, int]) -> str:
    """'XID 79×1 (GPU has fallen off the bus), XID 13×4' in code order."""
    def one(code: int) -> str:
        what = CRITICAL_XIDS.get(code)
        return f"XID {code}×{counts[code]}" + (f" ({what})" if what else "")
    return ", ".join(one(code) for code in sorted(counts))


def attribute(m: Machine) -> tuple[dict[int, dict[int, int]], dict[int, int]]:
    """Kernel-log XIDs per GPU index where the log's bus id names a listed GPU, and the rest
    (code → count). Snapshots without the per-bus tally leave everything in the rest."""
    if m.xid_counts_by_bus is None:
        return {}, {c: n for c, n in (m.xid_counts or {}).items() if n > 0}
    index = {xid_bus(g.pci_bus_id): g.index for g in m.gpus if g.pci_bus_id}
    by_gpu: dict[int, Counter[int]] = {}
    rest: Counter[int] = Counter()
    for bus, codes in m.xid_counts_by_bus.items():
        gpu = index.get(xid_bus(bus))
        (rest if gpu is None else by_gpu.setdefault(gpu, Counter())).update(codes)
    return {g: dict(c) for g, c in by_gpu.items()}, {c: n for c, n in rest.items() if n > 0}


def untrusted_counts(m: Machine) -> Finding | None:
    """A tally with a count below one is damaged: name it (the counts are not judged)."""
    bad = [f"{bus} XID {code}={n}" for bus, codes in (m.xid_counts_by_bus or {}).items()
           for code, n in codes.items() if n < 1]
    bad += [f"XID {code}={n}" for code, n in (m.xid_counts or {}).items() if n < 1]
    if not bad:
        return None
    return problem("reading.untrusted", Severity.WARN, None,
                   f"the kernel-log XID tally has counts below one: {', '.join(bad)}",
                   "A damaged snapshot: take it again (gpuaudit inspect).",
                   readings=", ".join(bad))


def _finding(counts: dict[int, int], gpu: Gpu | None, where: str) -> Finding:
    critical = {c: n for c, n in counts.items() if is_critical(c)}
    evidence = {"xids": describe_xids(counts), "xid_events": sum(counts.values())}
    if critical:
        return problem(
            "xid.critical", Severity.FAIL, gpu,
            f"kernel log has {describe_xids(critical)}{where}",
            "These need a GPU reset or a hardware check (NVIDIA's XID catalogue says which); "
            "if they recur, the GPU is failing. On a rented node, report them with their time "
            "and move to another node.", **evidence)
    return problem(
        "xid.seen", Severity.WARN, gpu, f"kernel log has {describe_xids(counts)}{where}",
        "Usually application faults (XID 13, 31, 43); check they are not recurring and not "
        "from your own job.", **evidence)


def check_gpu_xids(c: GpuCtx) -> Iterator[Finding]:
    """XIDs the kernel log attributes to this GPU by its PCI bus id."""
    if c.xids is None:
        return
    sound = {code: n for code, n in c.xids.items() if n > 0}
    if sound:
        yield _finding(sound, c.gpu, "")
    elif not c.xids:
        yield Finding(code="xid", severity=Severity.PASS, gpu_index=c.gpu.index,
                      message="no XID for this GPU in the kernel log", evidence={"xid_events": 0})


def check_unattributed_xids(c: MachineCtx) -> Iterator[Finding]:
    """XIDs no listed GPU claims, or all of them when the snapshot has no per-bus tally."""
    if not c.unattributed_xids:
        return
    where = "" if c.machine.xid_counts_by_bus is None else \
        " on a PCI bus no GPU listed here has (a GPU NVML no longer lists, or another tenant's)"
    yield _finding(c.unattributed_xids, None, where)
