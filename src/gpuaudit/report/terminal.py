"""Rich renderables for the terminal. Nothing here prints: the CLI decides where output goes."""

from __future__ import annotations

from collections.abc import Iterable, Sequence

from rich.console import Group, RenderableType
from rich.markup import escape
from rich.table import Table
from rich.text import Text

from gpuaudit.model import Finding, Gpu, Machine, Measurement, Run, RunStatus, Severity
from gpuaudit.parse import human_bytes
from gpuaudit.report.format import NA, gib, num, ranges
from gpuaudit.report.layout import Fit
from gpuaudit.specs import GpuSpec, lookup

SEVERITY_STYLE = {Severity.PASS: "green", Severity.INFO: "cyan", Severity.WARN: "yellow",
                  Severity.FAIL: "bold red"}


def severity_text(sev: Severity) -> Text:
    return Text(sev.value, style=SEVERITY_STYLE[sev])


def host_view(m: Machine) -> Table:
    h = m.host
    t = Table.grid(padding=(0, 2))
    t.add_column(style="bold")
    t.add_column()
    cores = f"{h.cpu_cores_physical or '?'} cores / {h.cpu_threads or '?'} threads"
    if h.cpu_sockets and h.cpu_sockets > 1:
        cores += f", {h.cpu_sockets} sockets"
    t.add_row("host", h.hostname)
    t.add_row("CPU", f"{h.cpu_model or NA} ({cores}, {h.numa_nodes or '?'} NUMA nodes)")
    t.add_row("memory", gib(h.memory_total_bytes))
    t.add_row("OS", f"{h.os_name or NA}, kernel {h.kernel or NA}, {h.architecture or ''}")
    env = ", ".join(x for x in (f"container: {h.container}" if h.container else "",
                                f"hypervisor: {h.hypervisor}" if h.hypervisor else "") if x)
    t.add_row("isolation", env or "bare metal (no container or hypervisor detected)")
    modes = sorted({g.virtualization_mode for g in m.gpus if g.virtualization_mode})
    if modes and modes != ["none"]:
        t.add_row("GPU access", ", ".join(modes) + " (GPU virtualization mode)")
    torch = (f"torch {h.torch_version} (built for CUDA {h.torch_cuda_version or 'none: CPU'})"
             if h.torch_version else "torch not installed")
    t.add_row("software", f"Python {h.python_version}, {torch}")
    if m.gpus or m.driver_version:
        t.add_row("driver", f"{m.driver_version or NA} (CUDA {m.cuda_driver_version or NA}), "
                  f"NVML {m.nvml_version or NA}")
    return t


def _pcie(g: Gpu) -> str:
    p = g.pcie
    now = f"Gen{p.gen_current or '?'} x{p.width_current or '?'}"
    best = f"Gen{p.gen_max or '?'} x{p.width_max or '?'}"
    return now if now == best else f"{now} (max {best})"


def gpu_table(m: Machine) -> Fit:
    t = Table(title="GPUs", title_justify="left", header_style="bold")
    for col in ("#", "model", "memory used/total", "PCIe now", "SM clock", "power",
                "temp", "ECC", "NVLink", "util", "procs", "NUMA / CPUs"):
        t.add_column(col, overflow="fold")
    for g in m.gpus:
        spec = lookup(nvml_name=g.name, pci_device_id=g.pci_device_id)
        model = escape(g.name) + (f"\n[dim]{spec.id}, CC {g.compute_capability}[/]" if spec
                          else "\n[dim]not in spec catalog[/]")
        if g.error:
            model = f"[red]not answering[/]\n[dim]{escape(g.error)}[/]"
        used = gib(g.memory_used_bytes).split()[0] if g.memory_used_bytes is not None else NA
        ecc = NA if g.ecc.enabled is None else ("on" if g.ecc.enabled else "[yellow]off[/]")
        if g.ecc.enabled and g.ecc.volatile_uncorrected:
            ecc += f" [red]{g.ecc.volatile_uncorrected} UE[/]"
        if g.nvlinks:
            nvl = f"{g.nvlinks_active}/{len(g.nvlinks)} up"
        else:
            nvl = NA if "nvlinks" in g.unavailable else "none"
        if g.fabric_state not in (None, "not_supported"):
            ok = g.fabric_state == "completed" and g.fabric_ok
            nvl += "\nfabric " + ("ready" if ok else f"[red]{g.fabric_state}[/]")
        affinity = ranges(g.cpu_affinity) if g.cpu_affinity else NA
        t.add_row(
            str(g.index), model, f"{used} / {gib(g.memory_total_bytes)}", _pcie(g),
            f"{num(g.clocks.sm_mhz)} / {num(g.clocks.sm_max_mhz, 'MHz')}",
            f"{num(g.power.draw_w, digits=0)} / {num(g.power.limit_w, 'W', 0)}",
            f"{num(g.thermal.gpu_c)} / {num(g.thermal.slowdown_c, '°C')}",
            ecc, nvl, num(g.utilization_gpu_pct, "%"),
            NA if g.processes is None else str(len(g.processes)),
            f"{num(g.numa_node)} / {affinity}",
        )
    return Fit(t, optional=("NUMA / CPUs", "procs", "util"))


PEAK_COLUMNS = ("fp64", "fp64_tensor", "fp32", "tf32", "bf16", "fp16", "fp8", "int8")


def spec_table(specs: Sequence[GpuSpec]) -> Fit:
    t = Table(title="Datasheet peaks (dense; TFLOP/s, int8 TOPS)", title_justify="left",
              header_style="bold")
    t.add_column("model")
    for col in PEAK_COLUMNS:
        t.add_column(col, justify="right")
    t.add_column("memory", justify="right")
    t.add_column("NVLink", justify="right")
    t.add_column("TDP", justify="right")
    for s in specs:
        peaks = [num(s.peak(p), digits=1) if s.peak(p) is not None else "—" for p in PEAK_COLUMNS]
        t.add_row(s.name, *peaks, f"{s.memory_gb:g} GB @ {s.memory_bandwidth_gbps:g} GB/s",
                  f"{s.nvlink_bandwidth_gbps:g} GB/s" if s.nvlink_bandwidth_gbps else "—",
                  f"{s.tdp_w:g} W")
    return Fit(t)  # at 80 columns: a block per model, every peak whole


def topology_table(m: Machine) -> Fit:
    """The GPU↔GPU matrix in nvidia-smi topo -m's notation, with peer access marked."""
    t = Table(title="Topology", title_justify="left", header_style="bold",
              caption="NV# = # NVLinks; PCIe paths: PIX one switch, PXB several switches, "
                      "PHB host bridge, NODE across bridges in a NUMA node, SYS across NUMA "
                      "nodes; * = no peer access", caption_justify="left")
    t.add_column("")
    for g in m.gpus:
        t.add_column(f"GPU{g.index}", justify="center")
    t.add_column("NUMA")
    t.add_column("CPU affinity")
    for a in m.gpus:
        cells = []
        for b in m.gpus:
            if a.index == b.index:
                cells.append("X")
                continue
            link = m.link(a.index, b.index)
            label = link.label if link else "?"
            cells.append(label + ("*" if link and link.p2p_read is False else ""))
        t.add_row(f"GPU{a.index}", *cells, num(a.numa_node),
                  ranges(a.cpu_affinity) if a.cpu_affinity else NA)
    return Fit(t)


def unavailable_table(m: Machine) -> Fit:
    """What could not be read, and why: the checks that depend on it were not made."""
    t = Table(title="Not readable here", title_justify="left", header_style="bold")
    t.add_column("GPU", justify="right")
    t.add_column("reason")
    t.add_column("fields")
    for g in m.gpus:
        by_reason: dict[str, list[str]] = {}
        for fld, reason in g.unavailable.items():
            by_reason.setdefault(reason, []).append(fld)
        for reason, fields in sorted(by_reason.items()):
            t.add_row(str(g.index), escape(reason), ", ".join(fields))
    return Fit(t)


def findings_table(findings: Iterable[Finding], *, show_pass: bool = False) -> Fit:
    t = Table(title="Findings", title_justify="left", header_style="bold", show_lines=True)
    t.add_column("verdict")
    t.add_column("GPU", justify="right")
    t.add_column("code")
    t.add_column("what and why", ratio=3)
    t.add_column("advice", ratio=2)
    ordered = sorted(findings, key=lambda f: (-f.severity.rank, f.gpu_index or -1, f.code))
    for f in ordered:
        if f.severity is Severity.PASS and not show_pass:
            continue
        t.add_row(severity_text(f.severity), "" if f.gpu_index is None else str(f.gpu_index),
                  f.code, escape(f.message), escape(f.advice or ""))
    return Fit(t, turn=False)


def verdict_line(run: Run) -> Text:
    counts = {s: sum(1 for f in run.findings if f.severity is s) for s in Severity}
    text = Text("verdict: ")
    text.append_text(severity_text(run.verdict))
    text.append(f"  ({counts[Severity.FAIL]} fail, {counts[Severity.WARN]} warn, "
                f"{counts[Severity.INFO]} info, {counts[Severity.PASS]} checks passed)")
    if run.status.value != "complete":
        text.append(f"  [{run.status.value}]", style="yellow")
    return text


def machine_parts(run: Run, *, show_pass: bool = False) -> list[RenderableType]:
    """The machine: host, GPUs, datasheet peaks, topology (and with --all what could not be
    read)."""
    m = run.machine
    if m is None:
        return []
    parts: list[RenderableType] = [host_view(m)]
    if not m.gpus:
        parts.append(Text(f"\nNo NVIDIA GPU: {m.nvml_error or 'NVML reports none'}",
                          style="yellow"))
    else:
        parts.append(gpu_table(m))
        specs = {s.id: s for g in m.gpus
                 if (s := lookup(nvml_name=g.name, pci_device_id=g.pci_device_id))}
        if specs:
            parts.append(spec_table(list(specs.values())))
        if len(m.gpus) > 1:
            parts.append(topology_table(m))
    if show_pass and m.gpus:
        parts.append(unavailable_table(m))
    return parts


def findings_parts(run: Run, *, show_pass: bool = False) -> list[RenderableType]:
    """The findings table (PASS only with --all) and the verdict: once per run."""
    shown = [f for f in run.findings if show_pass or f.severity is not Severity.PASS]
    parts: list[RenderableType] = []
    if shown:
        parts.append(findings_table(run.findings, show_pass=show_pass))
    parts.append(verdict_line(run))
    return parts


def inspect_view(run: Run, *, show_pass: bool = False) -> RenderableType:
    return Group(*machine_parts(run, show_pass=show_pass),
                 *findings_parts(run, show_pass=show_pass))


def runs_table(summaries: Sequence) -> Fit:
    """Stored runs (store.RunSummary records), newest first."""
    t = Table(header_style="bold")
    # The id and time are what people copy: never cut them.
    t.add_column("run", no_wrap=True, min_width=12)
    t.add_column("started (UTC)", no_wrap=True, min_width=19)
    for col in ("kind", "host", "GPUs", "verdict", "fail/warn"):
        t.add_column(col)
    for s in summaries:
        verdict = severity_text(Severity(s.verdict))
        status = RunStatus(s.status).value  # the word, not the enum's repr
        if status != "complete":
            verdict.append(f" ({status})", style="yellow")
        t.add_row(s.id, f"{s.started_at:%Y-%m-%d %H:%M:%S}", s.kind, s.hostname or NA,
                  s.gpu_summary or NA, verdict, f"{s.findings_fail}/{s.findings_warn}")
    return Fit(t, optional=("host",))


def _brief_params(m: Measurement) -> str:
    """The few parameters that identify a figure: a shape, a size, a pair of GPUs."""
    p = m.params
    if {"m", "n", "k"} <= p.keys():
        return f"{p['m']}×{p['n']}×{p['k']}"
    parts = []
    if "src" in p and "dst" in p:
        parts.append(f"GPU{p['src']}→GPU{p['dst']}")
    if "size_bytes" in p and isinstance(p["size_bytes"], int):
        parts.append(human_bytes(p["size_bytes"]))
    elif "buffer_bytes" in p and isinstance(p["buffer_bytes"], int):
        parts.append(human_bytes(p["buffer_bytes"]))
    for key in ("path", "nic", "rdma_device", "peer", "numa_node", "cores"):  # feed suites
        if p.get(key) is not None and not (key == "nic" and "peer" in p):
            parts.append(("node " if key == "numa_node" else "cores " if key == "cores"
                          else "") + str(p[key]))
    if p.get("tool"):
        parts.append(str(p["tool"]))
    if p.get("device") == "cpu":
        parts.append("CPU")
    return " ".join(parts)


def measurements_table(measurements: Sequence[Measurement], *, show_all: bool = False) -> Fit:
    """Value, unit, spec, % of spec and spread for each figure; skipped ones with the reason.
    Per-size collective rows are left to --all: their peaks stand for them."""
    t = Table(title="Benchmarks", title_justify="left", header_style="bold")
    for col, justify in (("suite", "left"), ("test", "left"), ("GPU", "right"),
                         ("value", "right"), ("spec", "right"), ("% spec", "right"),
                         ("IQR", "right"), ("at", "left"), ("notes", "left")):
        t.add_column(col, justify=justify)  # type: ignore[arg-type]
    for m in measurements:
        if not show_all and "size_bytes" in m.params and not m.name.endswith("_peak") \
                and m.value is not None:
            continue
        gpu = "" if m.gpu_index is None else str(m.gpu_index)
        if m.value is None:
            t.add_row(m.suite, m.name, gpu, Text("skipped", style="yellow"), "", "", "",
                      _brief_params(m), escape(m.skipped_reason or ""))
            continue
        spread = (f"{m.spread_low:.4g}–{m.spread_high:.4g}"
                  if m.spread_low is not None and m.spread_high is not None else "")
        pct = Text(f"{m.pct_of_spec:.1f}%" if m.pct_of_spec is not None else "")
        notes = [escape(n) for n in m.notes]  # tool output and reasons are text, not markup
        if m.verified is False:
            notes.insert(0, "[red]WRONG RESULT[/]")
        t.add_row(m.suite, m.name, gpu, f"{m.value:.4g} {m.unit}",
                  f"{m.spec_value:g}" if m.spec_value else "", pct, spread, _brief_params(m),
                  "; ".join(notes))
    return Fit(t, optional=("IQR",))


def measurement_parts(run: Run, *, show_all: bool = False) -> list[RenderableType]:
    """The micro-benchmark table and the workloads' view (train/infer), where there are any."""
    from gpuaudit.report.workloads_view import WORKLOAD_SUITES, workloads_view

    micro = [m for m in run.measurements if m.suite not in WORKLOAD_SUITES]
    work = [m for m in run.measurements if m.suite in WORKLOAD_SUITES]
    parts: list[RenderableType] = [measurements_table(micro, show_all=show_all)] if micro else []
    if work:
        parts.append(workloads_view(work))
    if run.suite_seconds:
        parts.append(Text(suite_times_line(run.suite_seconds), style="dim"))
    return parts


def suite_times_line(seconds: dict[str, float]) -> str:
    """'time: latency 1.2 s · matmul 20.3 s · total 21.5 s' (where a long run went)."""
    each = " · ".join(f"{name} {s:.1f} s" for name, s in seconds.items())
    return f"time: {each} · total {sum(seconds.values()):.1f} s"


def bench_view(run: Run, *, show_all: bool = False) -> RenderableType:
    return Group(*measurement_parts(run, show_all=show_all),
                 *findings_parts(run, show_pass=False))


def run_view(run: Run, *, show_all: bool = False) -> RenderableType:
    """A whole run: the machine, the benchmarks where there are any, then every finding
    (health and benchmark) in one table and the verdict, once."""
    if not run.measurements:
        return inspect_view(run, show_pass=show_all)
    if run.kind == "bench":
        return bench_view(run, show_all=show_all)
    return Group(*machine_parts(run, show_pass=show_all),
                 *measurement_parts(run, show_all=show_all),
                 *findings_parts(run, show_pass=show_all))
