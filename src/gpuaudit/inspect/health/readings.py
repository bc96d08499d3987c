"""Whether a GPU answered at all, and whether its readings can be trusted.

A GPU that stops answering NVML (lost, fallen off the bus, every query failing) is a FAIL on
that GPU, never a GPU of unknown model. A reading that is not a number, or a negative one
where none can be, is taken out before any check sees it (so nothing PASSes on it) and named
in a finding of its own.
"""

from __future__ import annotations

import math
from typing import Any

from gpuaudit.model import Finding, Gpu, Severity

from .base import problem
from .xids import describe_xids, is_critical

# Identities, not readings: they are never taken out (a record needs them).
_KEYS = {"index", "link", "pid"}
# Readings that are percentages.
_PERCENT = {"utilization_gpu_pct", "utilization_memory_pct"}
# Words in NVML's reason that mean the process may not open the GPU (not that it is lost).
_NO_ACCESS = ("Permission", "permission")


def answered_nothing(gpu: Gpu) -> bool:
    """A GPU listed with no reading at all: lost (hw says why in `error`), or a snapshot from
    before `error` was kept, where every identity reading is missing."""
    return gpu.error is not None or (
        gpu.name == "unknown" and gpu.uuid is None and gpu.pci_bus_id is None
        and gpu.memory_total_bytes is None)


def _why(gpu: Gpu) -> str:
    if gpu.error:
        return gpu.error
    reasons = sorted({r for r in gpu.unavailable.values() if r})
    return "; ".join(reasons) or "no reading at all"


def lost_finding(gpu: Gpu, xids: dict[int, int] | None,
                 unclaimed: dict[int, int] | None = None) -> Finding:
    """The one finding for a GPU that does not answer. `unclaimed`: XIDs on a PCI bus no
    answering GPU has, when this is the only GPU that could have raised them."""
    why = _why(gpu)
    evidence: dict[str, Any] = {"error": why}
    if xids:
        evidence["xids"] = describe_xids(xids)
    if unclaimed:
        evidence["xids_on_unknown_bus"] = describe_xids(unclaimed)
    if any(word in why for word in _NO_ACCESS):
        return problem("gpu.no-access", Severity.FAIL, gpu,
                       f"GPU {gpu.index} is listed but this process may not use it ({why})",
                       "Give the process the GPU's device node (/dev/nvidia*): docker run "
                       "--gpus all, or the video group; on a rented node ask the provider.",
                       **evidence)
    seen = ""
    if xids:
        seen = f"; the kernel log names it with {describe_xids(xids)}"
    elif unclaimed:
        seen = (f"; the kernel log has {describe_xids(unclaimed)} on a PCI bus no answering "
                "GPU has, most likely this one")
    critical = any(is_critical(c) for c in {**(xids or {}), **(unclaimed or {})})
    return problem(
        "gpu.lost", Severity.FAIL, gpu,
        f"GPU {gpu.index} does not answer NVML ({why}): the driver has lost it{seen}",
        "Nothing can run on it until it is back: reset it when idle (sudo nvidia-smi -r -i "
        f"{gpu.index}) or reboot. If it is lost again, it is hardware (GPU, riser, power): on a "
        "rented node report it" + (" with the XIDs" if critical or xids else "") +
        " and move to another node.", **evidence)


def _bad(key: str, value: Any) -> bool:
    if isinstance(value, bool) or not isinstance(value, int | float) or key in _KEYS:
        return False
    if isinstance(value, float) and not math.isfinite(value):
        return True
    return value < 0 or (key in _PERCENT and value > 100)


def _scrub(data: Any, path: str, found: dict[str, Any]) -> Any:
    """`data` with every untrustworthy number set to None; `found` gets path → value."""
    if isinstance(data, dict):
        out = {}
        for key, value in data.items():
            if key == "unavailable":
                out[key] = value
                continue
            where = f"{path}.{key}" if path else key
            if _bad(key, value):
                found[where] = value
                out[key] = None
            else:
                out[key] = _scrub(value, where, found)
        return out
    if isinstance(data, list | tuple):
        return [_scrub(v, f"{path}.{i}", found) for i, v in enumerate(data)]
    return data


def trusted(gpu: Gpu) -> tuple[Gpu, Finding | None]:
    """The GPU with every reading that is not a number (NaN, ±inf), negative, or a percentage
    over 100 set to None, and the finding that names them (None when all are sound)."""
    found: dict[str, Any] = {}
    data = _scrub(gpu.model_dump(), "", found)
    if not found:
        return gpu, None
    data["unavailable"] = {**gpu.unavailable, **{
        path: f"reading not trusted: {value!r}" for path, value in found.items()}}
    listing = ", ".join(f"{path}={value!r}" for path, value in found.items())
    finding = problem(
        "reading.untrusted", Severity.WARN, gpu,
        f"{len(found)} reading(s) are not usable numbers: {listing}; the checks that need "
        "them are left out", "Read the machine again (gpuaudit inspect). If NVML itself gives "
        "these values, the driver or GPU is misbehaving: reset the GPU or update the driver; "
        "a saved snapshot with them has been damaged.", readings=listing)
    return Gpu.model_validate(data), finding
