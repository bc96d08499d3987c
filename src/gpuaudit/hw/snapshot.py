"""A whole-machine snapshot: host facts plus everything NVML gives."""

from __future__ import annotations

from gpuaudit.model import Machine, utc_now

from .gpus import read_nvml
from .host import read_host, read_xid_counts
from .nvml import LiveNvml, NvmlSource, NvmlUnavailable


def snapshot_from(src: NvmlSource | None, nvml_error: str | None = None) -> Machine:
    """The Machine as read through `src` (None: NVML unavailable, `nvml_error` says why)."""
    xids, xid_reason = read_xid_counts()
    unavailable = {"xid_counts": xid_reason} if xid_reason else {}
    common = dict(captured_at=utc_now(), host=read_host(), xid_counts=xids)
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
