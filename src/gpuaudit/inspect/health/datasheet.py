"""Every figure that has a datasheet value, checked against it: memory size, PCIe generation
and width, power limit, max SM clock, NVLinks up. The finding names the figure and its source.
"""

from __future__ import annotations

from collections.abc import Iterator

from gpuaudit.model import Finding, Severity

from .base import GIB, GpuCtx, cite, datasheet, is_idle, is_sxm, ok, problem

# NVML's total is what the driver leaves usable: a little under the marketing size (ECC on
# GDDR parts reserves 1/16: an L4 "24 GB" shows 22.5 GiB). Below this share of the datasheet
# size the GPU is another SKU or has memory disabled; over the upper share, another SKU.
MEMORY_LOW_SHARE = 0.90
MEMORY_HIGH_SHARE = 1.10
# A max SM clock this far under the datasheet's boost clock is a capped or different part.
CLOCK_SHARE = 0.98
POWER_SLACK_W = 1.0


def check_spec_known(c: GpuCtx) -> Iterator[Finding]:
    if c.spec is None:
        g = c.gpu
        yield problem("spec.unknown-model", Severity.INFO, g,
                      f"{g.name} is not in the spec catalog: no datasheet figures to compare",
                      "Benchmarks still run; % of spec and the datasheet checks are left out.",
                      name=g.name, pci_device_id=g.pci_device_id)


def check_memory_size(c: GpuCtx) -> Iterator[Finding]:
    g, spec = c.gpu, c.spec
    if spec is None or g.memory_total_bytes is None:
        return
    # Datasheets print "141 GB" for what NVML counts as ~140.4 GiB: compare in GiB.
    share = g.memory_total_bytes / GIB / spec.memory_gb
    have = f"{g.memory_total_bytes / GIB:.1f} GiB"
    evidence = {"memory_total_gib": round(g.memory_total_bytes / GIB, 2),
                **datasheet(spec, "memory_gb")}
    if share < MEMORY_LOW_SHARE and g.virtualization_mode == "vgpu":
        yield problem("memory-size.vgpu-share", Severity.INFO, g,
                      f"this vGPU has {have} of the {spec.memory_gb:g} GB in "
                      f"{cite(spec, 'memory_gb')}",
                      "A vGPU profile gets a slice of the GPU's memory: size your jobs to it.",
                      **evidence)
    elif share < MEMORY_LOW_SHARE:
        yield problem("memory-size.below-spec", Severity.FAIL, g,
                      f"the GPU reports {have}; {cite(spec, 'memory_gb')} gives "
                      f"{spec.memory_gb:g} GB",
                      "This is not the part you are paying for (another SKU, or memory "
                      "disabled). On a rented node, ask for the GPU you ordered or a refund.",
                      **evidence)
    elif share > MEMORY_HIGH_SHARE:
        yield problem("memory-size.above-spec", Severity.WARN, g,
                      f"the GPU reports {have}, more than the {spec.memory_gb:g} GB in "
                      f"{cite(spec, 'memory_gb')}: the catalog may have matched the wrong SKU",
                      "Check the model (nvidia-smi -q) before trusting the % of spec figures.",
                      **evidence)
    else:
        yield ok("memory-size", g, f"{have} (datasheet {spec.memory_gb:g} GB)", **evidence)


def check_pcie(c: GpuCtx) -> Iterator[Finding]:
    g, spec = c.gpu, c.spec
    p = g.pcie
    found = False
    if p.width_current is not None and p.width_max is not None and p.width_current < p.width_max:
        found = True
        yield problem(
            "pcie.width-degraded", Severity.FAIL, g,
            f"PCIe link runs x{p.width_current}, the GPU and slot allow x{p.width_max}",
            "Reseat the GPU or riser, check the slot; host↔device bandwidth is cut in "
            "proportion. Ask the provider for another node if you rent it.",
            width_current=p.width_current, width_max=p.width_max)
    if p.gen_current is not None and p.gen_max is not None and p.gen_current < p.gen_max:
        found = True
        if is_idle(g):
            yield problem(
                "pcie.gen-below-max-idle", Severity.INFO, g,
                f"PCIe link at Gen{p.gen_current} (max Gen{p.gen_max}) while the GPU is idle: "
                "links train down to save power",
                "Confirm under load: `gpuaudit bench transfer` or inspect during a job.",
                gen_current=p.gen_current, gen_max=p.gen_max)
        else:
            yield problem(
                "pcie.gen-below-max", Severity.WARN, g,
                f"PCIe link at Gen{p.gen_current} under load, the GPU and slot allow "
                f"Gen{p.gen_max}",
                "Check BIOS PCIe settings and the riser; the link should train to its max "
                "when busy.", gen_current=p.gen_current, gen_max=p.gen_max)
    gpu_gen = p.gen_gpu_max
    if spec is not None and gpu_gen is not None and gpu_gen < spec.pcie_generation:
        found = True
        yield problem(
            "pcie.gpu-below-spec", Severity.WARN, g,
            f"the GPU reports PCIe Gen{gpu_gen} at most; {cite(spec, 'pcie_generation')} "
            f"gives Gen{spec.pcie_generation}",
            "A VM or VBIOS is hiding the GPU's faster link, or it is another SKU: host↔device "
            "copies top out lower. Ask the provider.",
            gen_gpu_max=gpu_gen, **datasheet(spec, "pcie_generation"))
    elif p.gen_max is not None and gpu_gen is not None and p.gen_max < gpu_gen:
        found = True
        yield problem(
            "pcie.slot-below-gpu", Severity.WARN, g,
            f"the slot limits the link to Gen{p.gen_max}; the GPU supports Gen{gpu_gen}",
            "Host↔device transfers top out at the slot's rate; prefer a host whose slot "
            "matches the GPU.", gen_max=p.gen_max, gen_gpu_max=gpu_gen)
    if spec is not None and p.width_max is not None and p.width_max < spec.pcie_width:
        found = True
        yield problem(
            "pcie.width-max-below-spec", Severity.WARN, g,
            f"the link can be x{p.width_max} at most; {cite(spec, 'pcie_width')} gives "
            f"x{spec.pcie_width}: the slot or riser is narrower than the GPU",
            "Host↔device bandwidth is cut in proportion; prefer a host with a full-width slot.",
            width_max=p.width_max, **datasheet(spec, "pcie_width"))
    if not found and None not in (p.width_current, p.gen_current, p.width_max, p.gen_max):
        evidence = {} if spec is None else {**datasheet(spec, "pcie_generation"),
                                            "spec_pcie_width": spec.pcie_width}
        yield ok("pcie", g, f"PCIe Gen{p.gen_current} x{p.width_current} "
                 f"(max Gen{p.gen_max} x{p.width_max}" +
                 (f", datasheet Gen{spec.pcie_generation} x{spec.pcie_width})" if spec else ")"),
                 gen_current=p.gen_current, width_current=p.width_current, **evidence)


def check_power_limit(c: GpuCtx) -> Iterator[Finding]:
    g, spec = c.gpu, c.spec
    pw = g.power
    if pw.limit_w is None:
        return
    evidence = {"limit_w": pw.limit_w, "default_limit_w": pw.default_limit_w,
                "max_limit_w": pw.max_limit_w, **(datasheet(spec, "tdp_w") if spec else {})}
    if pw.default_limit_w is not None and pw.limit_w < pw.default_limit_w - POWER_SLACK_W:
        yield problem("power.limit-below-default", Severity.WARN, g,
                      f"power limit is {pw.limit_w:.0f} W, below the default "
                      f"{pw.default_limit_w:.0f} W",
                      "Compute-bound work runs slower under a lowered cap; ask the provider, "
                      "or price the node by what it delivers (gpuaudit bench).", **evidence)
    elif spec is not None and pw.limit_w < spec.tdp_w - POWER_SLACK_W:
        board = "" if pw.max_limit_w is None else \
            f"; the board allows at most {pw.max_limit_w:.0f} W"
        yield problem("power.limit-below-spec", Severity.WARN, g,
                      f"power limit is {pw.limit_w:.0f} W; {cite(spec, 'tdp_w')} gives "
                      f"{spec.tdp_w:g} W{board}",
                      "The board is configured below its datasheet power: compute-bound work "
                      "runs slower. Ask the provider for the full limit (nvidia-smi -pl), or "
                      "price the node by what it delivers (gpuaudit bench).", **evidence)
    elif pw.default_limit_w is not None or spec is not None:
        yield ok("power", g, f"power limit {pw.limit_w:.0f} W (default "
                 f"{pw.default_limit_w or 0:.0f} W" +
                 (f", datasheet {spec.tdp_w:g} W)" if spec else ")"), **evidence)


def check_max_clock(c: GpuCtx) -> Iterator[Finding]:
    g, spec = c.gpu, c.spec
    have = g.clocks.sm_max_mhz
    if spec is None or spec.max_sm_clock_mhz is None or have is None:
        return
    evidence = {"sm_max_mhz": have, **datasheet(spec, "max_sm_clock_mhz")}
    if have < spec.max_sm_clock_mhz * CLOCK_SHARE:
        yield problem("clocks-max.below-spec", Severity.WARN, g,
                      f"the GPU's max SM clock is {have} MHz; {cite(spec, 'max_sm_clock_mhz')} "
                      f"gives {spec.max_sm_clock_mhz:g} MHz",
                      "Peak compute is cut in proportion: a capped VBIOS or another SKU. Ask "
                      "the provider; benchmark before you rely on datasheet figures.",
                      **evidence)
    else:
        yield ok("clocks-max", g, f"max SM clock {have} MHz (datasheet "
                 f"{spec.max_sm_clock_mhz:g} MHz)", **evidence)


def check_nvlink(c: GpuCtx) -> Iterator[Finding]:
    """NVLinks up against the datasheet's count, "none up" included."""
    g, spec = c.gpu, c.spec
    down = [link.link for link in g.nvlinks if not link.active]
    active = g.nvlinks_active
    expected = spec.nvlink_links if spec else None
    if down and active:
        yield problem("nvlink.down", Severity.FAIL, g,
                      f"NVLink {', '.join(map(str, down))} down while {active} are up",
                      "GPU↔GPU bandwidth is cut; check nvidia-smi nvlink -s and the fabric "
                      "manager; on a rented node, report it.",
                      links_down=",".join(map(str, down)), links_active=active,
                      **(datasheet(spec, "nvlink_links") if expected else {}))
        return
    if not expected:
        if active:
            yield ok("nvlink", g, f"{active} NVLinks active", links_active=active)
        return
    evidence = {"links_active": active, "links_listed": len(g.nvlinks),
                "nvml_reason": g.unavailable.get("nvlinks"),
                **datasheet(spec, "nvlink_links")}
    if active == 0 and "nvlinks" in g.unavailable and g.unavailable["nvlinks"] == "not recorded":
        return  # a replayed trace without the NVLink queries says nothing
    if active == 0:
        seen = "all listed links are down" if g.nvlinks else \
            f"NVML answers {g.unavailable.get('nvlinks') or 'nothing'} for NVLink"
        if c.peers == 0:
            yield problem("nvlink.unused-single-gpu", Severity.INFO, g,
                          f"no NVLink up ({seen}); with one GPU in the machine nothing would "
                          "use it", "For multi-GPU work rent a multi-GPU node and check that "
                          "its NVLinks are up there.", **evidence)
        elif not is_sxm(spec):
            yield problem("nvlink.no-bridge", Severity.INFO, g,
                          f"no NVLink up ({seen}): this card's NVLink needs a bridge, which "
                          "is optional", "GPU↔GPU traffic goes over PCIe; if you paid for "
                          "bridged pairs, ask the provider.", **evidence)
        else:
            yield problem("nvlink.none-up", Severity.FAIL, g,
                          f"no NVLink up ({seen}); {cite(spec, 'nvlink_links')} gives "
                          f"{expected}: GPU↔GPU traffic falls back to PCIe, many times slower",
                          "Check nvidia-smi nvlink -s and the fabric manager; a VM may not pass "
                          "NVLink through. On a rented node, report it and move.", **evidence)
    elif active < expected and is_sxm(spec):
        yield problem("nvlink.fewer-than-spec", Severity.WARN, g,
                      f"{active} NVLinks active; {cite(spec, 'nvlink_links')} gives "
                      f"{expected}", "Some links are missing or disabled; GPU↔GPU bandwidth is "
                      "lower.", **evidence)
    else:
        yield ok("nvlink", g, f"{active} NVLinks active (datasheet {expected})", **evidence)
