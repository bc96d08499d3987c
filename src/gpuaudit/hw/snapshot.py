"""A whole-machine snapshot: host facts plus everything NVML gives."""

from __future__ import annotations

from collections import Counter

from gpuaudit.model import Machine, utc_now

from .gpus import read_nvml
from .host import read_host
from .nvml import NvmlSource, NvmlUnavailable
from .nvml_live import LiveNvml
from .xids import read_kernel_xids


def snapshot_from(src: NvmlSource | None, nvml_error: str | None = None) -> Machine:
    """The Machine as read through `src` (None: NVML unavailable, `nvml_error` says why)."""
    by_bus, xid_reason = read_kernel_xids()
    unavailable = {"xid_counts": xid_reason, "xid_counts_by_bus": xid_reason} if xid_reason \
        else {}
    totals = None if by_bus is None else dict(sum(map(Counter, by_bus.values()), Counter()))
    common = dict(captured_at=utc_now(), host=read_host(), xid_counts=totals,
                  xid_counts_by_bus=by_bus)
    if src is None:
        return Machine(**common, nvml_error=nvml_error, unavailable=unavailable)
    facts = read_nvml(src)
    return Machine(
        **common,
        driver_version=facts.driver_version,
        cuda_driver_version=facts.cuda_driver_version,
        nvml_version=facts.nvml_version,
        gpus=facts.gpus,
        links=facts.links,
        unavailable={**facts.unavailable, **unavailable},
    )


def take_snapshot() -> Machine:
    """Read this machine now. Without a driver or GPU: host facts and the reason, no GPUs."""
    try:
        nvml = LiveNvml()
    except NvmlUnavailable as exc:
        return snapshot_from(None, str(exc))
    try:
        return snapshot_from(nvml)
    finally:
        nvml.close()
