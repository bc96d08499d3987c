"""GPU memory: its errors (ECC, remapped rows, retired pages) and who else holds it."""

from __future__ import annotations

from collections.abc import Iterator

from gpuaudit.model import Finding, Severity

from .base import GIB, GpuCtx, ok, problem

# A GPU with more memory than this in use and nothing else on it is "held" by someone.
MEMORY_IN_USE_FRACTION = 0.05
# Spare rows run out here (DCGM fails at 512 uncorrectable remaps, Azure NHC above 512).
ROW_REMAP_LIMIT = 512
# The page-retirement table holds 64 pages; DCGM fails a GPU at 63 (pre-A100 GPUs).
RETIRED_PAGES_LIMIT = 63


def check_ecc(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    e = g.ecc
    problems = False
    if e.enabled is False and "GeForce" not in g.name:
        problems = True
        yield problem("ecc.disabled", Severity.WARN, g,
                      "ECC is off on a datacenter GPU: memory errors go undetected",
                      "Enable it (nvidia-smi -e 1, then a GPU reset) unless you chose speed "
                      "over error detection on purpose.", ecc_enabled=False)
    if e.pending_enabled is not None and e.enabled is not None and e.pending_enabled != e.enabled:
        problems = True
        yield problem("ecc.change-pending", Severity.INFO, g,
                      f"ECC will be {'on' if e.pending_enabled else 'off'} after the next "
                      "GPU reset", None, ecc_enabled=e.enabled,
                      ecc_pending_enabled=e.pending_enabled)
    if e.volatile_uncorrected:
        problems = True
        yield problem("ecc.uncorrectable-volatile", Severity.FAIL, g,
                      f"{e.volatile_uncorrected} uncorrectable ECC errors since the last "
                      "driver load", "Data may be corrupt: stop jobs on this GPU, reset it, "
                      "and have it checked (DCGM diag level 3) or RMA'd.",
                      volatile_uncorrected=e.volatile_uncorrected)
    elif e.aggregate_uncorrected:
        problems = True
        yield problem("ecc.uncorrectable-history", Severity.WARN, g,
                      f"{e.aggregate_uncorrected} uncorrectable ECC errors over the GPU's life",
                      "Watch for new ones; check remapped rows.",
                      aggregate_uncorrected=e.aggregate_uncorrected)
    known = e.volatile_uncorrected is not None and e.aggregate_uncorrected is not None
    if not problems and e.enabled and known:
        yield ok("ecc", g, "ECC on, no uncorrectable errors",
                 volatile_corrected=e.volatile_corrected)


def check_remapped_rows(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    rr = g.remapped_rows
    if rr.pending is None or rr.failed is None:
        return
    evidence = {"correctable": rr.correctable, "uncorrectable": rr.uncorrectable,
                "pending": rr.pending, "failed": rr.failed}
    found = False
    if rr.failed:
        found = True
        yield problem("remapped-rows.failed", Severity.FAIL, g,
                      "a row remapping failed: the GPU has run out of spare memory rows",
                      "The GPU needs replacement (RMA); do not run jobs on it.", **evidence)
    elif (rr.uncorrectable or 0) >= ROW_REMAP_LIMIT:
        found = True
        yield problem("remapped-rows.limit", Severity.FAIL, g,
                      f"{rr.uncorrectable} rows remapped for uncorrectable errors: at the "
                      f"{ROW_REMAP_LIMIT} where DCGM and Azure's health checks retire a GPU",
                      "The GPU is wearing out its spare rows: have it replaced (RMA); on a "
                      "rented node, move.", limit=ROW_REMAP_LIMIT, **evidence)
    if rr.pending:
        found = True
        yield problem("remapped-rows.pending", Severity.WARN, g,
                      "a memory row remapping is pending: it takes effect at the next reset",
                      "Reset the GPU (or reboot) when idle; until then the bad row is in use.",
                      **evidence)
    if not found:
        yield ok("remapped-rows", g, f"{rr.correctable or 0} correctable and "
                 f"{rr.uncorrectable or 0} uncorrectable rows remapped, none pending",
                 **evidence)


def check_retired_pages(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    rp = g.retired_pages
    evidence = {"single_bit": rp.single_bit, "double_bit": rp.double_bit, "pending": rp.pending}
    total = (rp.single_bit or 0) + (rp.double_bit or 0)
    if total >= RETIRED_PAGES_LIMIT:
        yield problem("retired-pages.limit", Severity.FAIL, g,
                      f"{total} memory pages retired: the retirement table is full "
                      f"(DCGM fails a GPU at {RETIRED_PAGES_LIMIT})",
                      "Further bad pages cannot be retired: have the GPU replaced (RMA).",
                      limit=RETIRED_PAGES_LIMIT, **evidence)
    if rp.pending:
        yield problem("retired-pages.pending", Severity.WARN, g,
                      "retired memory pages are pending: they take effect after a reset",
                      "Reset the GPU (or reboot) when idle.", **evidence)


def check_memory_in_use(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    procs = g.processes or ()
    holding = [p for p in procs if p.used_memory_bytes is None or p.used_memory_bytes > 0]
    used, total = g.memory_used_bytes, g.memory_total_bytes
    if holding:
        gib = sum(p.used_memory_bytes or 0 for p in holding) / GIB
        names = ", ".join(f"{p.pid} ({p.name or '?'})" for p in holding[:5])
        yield problem("memory.in-use", Severity.WARN, g,
                      f"{len(holding)} process(es) already hold {gib:.1f} GiB: {names}",
                      "Another job shares this GPU: results and speed will suffer. Stop it or "
                      "choose another GPU (CUDA_VISIBLE_DEVICES).",
                      processes=len(holding), used_gib=round(gib, 2))
    elif used is not None and total and used > MEMORY_IN_USE_FRACTION * total:
        yield problem("memory.in-use-unseen", Severity.WARN, g,
                      f"{used / GIB:.1f} GiB of {total / GIB:.0f} GiB in use by processes not "
                      "visible here (another container or tenant?)",
                      "Find who uses the GPU before trusting timings (nvidia-smi on the host).",
                      used_gib=round(used / GIB, 2))
    elif used is not None and total is not None:
        yield ok("memory", g, f"{used / GIB:.1f} GiB in use, no other process",
                 used_gib=round(used / GIB, 2))
