"""Our metric names, their units and how each is read off a sample; also dcgm-exporter's name
for the same quantity, so that `--dcgm-names` keeps existing dashboards working.

One list serves the Prometheus exporter, the in-process rule evaluator and the dashboards, so
a name means the same thing everywhere. Names follow Prometheus conventions: a `gpuaudit_`
prefix, base units (bytes, seconds, joules, watts, celsius, hertz, 0–1 ratios), `_total` on
counters.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from gpuaudit.model import GpuSample, Sample

PREFIX = "gpuaudit_"
# Labels every per-GPU series carries (dcgm-exporter's: gpu, UUID, modelName, Hostname).
GPU_LABELS = ("gpu", "uuid", "model", "hostname")
DCGM_GPU_LABELS = ("gpu", "UUID", "modelName", "Hostname")

Reading = Callable[[GpuSample], float | int | bool | None]


@dataclass(frozen=True)
class MetricDef:
    name: str  # without the prefix
    kind: str  # "gauge" or "counter"
    help: str
    read: Reading
    # dcgm-exporter's name and the factor from our unit to its unit (e.g. bytes → MiB).
    dcgm: str | None = None
    dcgm_scale: float = 1.0

    @property
    def full_name(self) -> str:
        return PREFIX + self.name


def _pct(v: float | None) -> float | None:
    return None if v is None else v / 100.0


def _mhz(v: int | None) -> float | None:
    return None if v is None else v * 1e6


MIB = 1 / (1 << 20)

GPU_METRICS: tuple[MetricDef, ...] = (
    MetricDef("gpu_utilization_ratio", "gauge",
              "Share of the last sample period in which a kernel ran (NVML utilization.gpu).",
              lambda s: _pct(s.utilization_gpu_pct), "DCGM_FI_DEV_GPU_UTIL", 100.0),
    MetricDef("memory_utilization_ratio", "gauge",
              "Share of the last sample period in which device memory was read or written.",
              lambda s: _pct(s.utilization_memory_pct), "DCGM_FI_DEV_MEM_COPY_UTIL", 100.0),
    MetricDef("memory_used_bytes", "gauge", "Device memory in use.",
              lambda s: s.memory_used_bytes, "DCGM_FI_DEV_FB_USED", MIB),
    MetricDef("memory_total_bytes", "gauge", "Device memory in all.",
              lambda s: s.memory_total_bytes),
    MetricDef("power_watts", "gauge", "Power draw.",
              lambda s: s.power_w, "DCGM_FI_DEV_POWER_USAGE"),
    MetricDef("power_limit_watts", "gauge", "Enforced power limit.",
              lambda s: s.power_limit_w, "DCGM_FI_DEV_ENFORCED_POWER_LIMIT"),
    MetricDef("energy_joules_total", "counter", "Energy used since the driver loaded.",
              lambda s: s.energy_j, "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", 1000.0),
    MetricDef("temperature_celsius", "gauge", "GPU core temperature.",
              lambda s: s.temperature_gpu_c, "DCGM_FI_DEV_GPU_TEMP"),
    MetricDef("memory_temperature_celsius", "gauge", "HBM temperature.",
              lambda s: s.temperature_memory_c, "DCGM_FI_DEV_MEMORY_TEMP"),
    MetricDef("sm_clock_hertz", "gauge", "SM clock.",
              lambda s: _mhz(s.sm_clock_mhz), "DCGM_FI_DEV_SM_CLOCK", 1e-6),
    MetricDef("memory_clock_hertz", "gauge", "Memory clock.",
              lambda s: _mhz(s.memory_clock_mhz), "DCGM_FI_DEV_MEM_CLOCK", 1e-6),
    MetricDef("pcie_link_generation", "gauge", "PCIe link generation now (idle GPUs may "
              "step down to save power).", lambda s: s.pcie_link_gen,
              "DCGM_FI_DEV_PCIE_LINK_GEN"),
    MetricDef("pcie_link_generation_max", "gauge", "Highest PCIe generation the GPU and slot "
              "support.", lambda s: s.pcie_link_gen_max, "DCGM_FI_DEV_PCIE_MAX_LINK_GEN"),
    MetricDef("pcie_link_width", "gauge", "PCIe lanes in use now.", lambda s: s.pcie_link_width,
              "DCGM_FI_DEV_PCIE_LINK_WIDTH"),
    MetricDef("pcie_link_width_max", "gauge", "Most PCIe lanes the GPU and slot support.",
              lambda s: s.pcie_link_width_max, "DCGM_FI_DEV_PCIE_MAX_LINK_WIDTH"),
    MetricDef("pcie_rx_bytes_per_second", "gauge", "PCIe receive rate (NVML, 20 ms window).",
              lambda s: s.pcie_rx_bytes_per_s),
    MetricDef("pcie_tx_bytes_per_second", "gauge", "PCIe transmit rate (NVML, 20 ms window).",
              lambda s: s.pcie_tx_bytes_per_s),
    MetricDef("nvlink_rx_bytes_total", "counter", "NVLink data received, all links.",
              lambda s: s.nvlink_rx_bytes),
    MetricDef("nvlink_tx_bytes_total", "counter", "NVLink data sent, all links.",
              lambda s: s.nvlink_tx_bytes),
    MetricDef("ecc_corrected_errors_total", "counter",
              "Corrected ECC errors since the driver loaded.",
              lambda s: s.ecc_corrected_volatile, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL"),
    MetricDef("ecc_uncorrected_errors_total", "counter",
              "Uncorrected ECC errors since the driver loaded.",
              lambda s: s.ecc_uncorrected_volatile, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL"),
    MetricDef("ecc_uncorrected_errors_lifetime_total", "counter",
              "Uncorrected ECC errors over the GPU's life (aggregate).",
              lambda s: s.ecc_uncorrected_aggregate, "DCGM_FI_DEV_ECC_DBE_AGG_TOTAL"),
    MetricDef("remapped_rows_correctable", "gauge", "Rows remapped for correctable errors.",
              lambda s: s.remapped_rows_correctable, "DCGM_FI_DEV_CORRECTABLE_REMAPPED_ROWS"),
    MetricDef("remapped_rows_uncorrectable", "gauge", "Rows remapped for uncorrectable errors.",
              lambda s: s.remapped_rows_uncorrectable,
              "DCGM_FI_DEV_UNCORRECTABLE_REMAPPED_ROWS"),
    MetricDef("remapping_pending", "gauge", "1: a row remap waits for the next GPU reset.",
              lambda s: s.remapping_pending),
    MetricDef("remapping_failed", "gauge", "1: a row remap failed (the GPU needs service).",
              lambda s: s.remapping_failed, "DCGM_FI_DEV_ROW_REMAP_FAILURE"),
    MetricDef("sm_activity_ratio", "gauge",
              "Share of time an SM had at least one warp resident, averaged over SMs (GPM).",
              lambda s: _pct(s.sm_activity_pct), "DCGM_FI_PROF_SM_ACTIVE"),
    MetricDef("sm_occupancy_ratio", "gauge",
              "Resident warps over the maximum, averaged over SMs and time (GPM).",
              lambda s: _pct(s.sm_occupancy_pct), "DCGM_FI_PROF_SM_OCCUPANCY"),
    MetricDef("tensor_activity_ratio", "gauge", "Share of cycles the tensor pipes were busy (GPM).",
              lambda s: _pct(s.tensor_activity_pct), "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE"),
    MetricDef("dram_bandwidth_utilization_ratio", "gauge",
              "Device memory bandwidth used over its peak (GPM).",
              lambda s: _pct(s.dram_bandwidth_util_pct), "DCGM_FI_PROF_DRAM_ACTIVE"),
    MetricDef("fp64_activity_ratio", "gauge", "Share of cycles the FP64 pipe was busy (GPM).",
              lambda s: _pct(s.fp64_activity_pct), "DCGM_FI_PROF_PIPE_FP64_ACTIVE"),
    MetricDef("fp32_activity_ratio", "gauge", "Share of cycles the FP32 pipe was busy (GPM).",
              lambda s: _pct(s.fp32_activity_pct), "DCGM_FI_PROF_PIPE_FP32_ACTIVE"),
    MetricDef("fp16_activity_ratio", "gauge", "Share of cycles the FP16 pipe was busy (GPM).",
              lambda s: _pct(s.fp16_activity_pct), "DCGM_FI_PROF_PIPE_FP16_ACTIVE"),
    MetricDef("gpm_pcie_rx_bytes_per_second", "gauge", "PCIe receive rate (GPM).",
              lambda s: s.gpm_pcie_rx_bytes_per_s, "DCGM_FI_PROF_PCIE_RX_BYTES"),
    MetricDef("gpm_pcie_tx_bytes_per_second", "gauge", "PCIe transmit rate (GPM).",
              lambda s: s.gpm_pcie_tx_bytes_per_s, "DCGM_FI_PROF_PCIE_TX_BYTES"),
    MetricDef("gpm_nvlink_rx_bytes_per_second", "gauge", "NVLink receive rate (GPM).",
              lambda s: s.gpm_nvlink_rx_bytes_per_s, "DCGM_FI_PROF_NVLINK_RX_BYTES"),
    MetricDef("gpm_nvlink_tx_bytes_per_second", "gauge", "NVLink transmit rate (GPM).",
              lambda s: s.gpm_nvlink_tx_bytes_per_s, "DCGM_FI_PROF_NVLINK_TX_BYTES"),
    MetricDef("processes", "gauge", "Processes holding a context on the GPU.",
              lambda s: None if s.error else len(s.processes)),
)

# Series that are not a plain reading of one sample.
UP = MetricDef("up", "gauge", "1: the GPU answered this sample; 0: it did not (off the bus?).",
               lambda s: s.error is None)
CLOCK_EVENT = "clock_event_active"  # {reason}: 1 while that reason holds the clocks down
XID_TOTAL = "xid_errors_total"  # {xid}: XID events seen since the monitor started
XID_LAST = "xid_last_timestamp_seconds"  # {xid}: when that XID was last seen
IDLE = "idle"  # 1 while the idle policy finds the GPU idle
IDLE_SECONDS = "idle_seconds_total"  # idle time since the monitor started
POD_INFO = "gpu_pod_info"  # {namespace, pod, container}: 1 while that pod holds the GPU
DCGM_XID_LAST_CODE = "DCGM_FI_DEV_XID_ERRORS"  # dcgm-exporter's "last XID seen" gauge

# Every name a rule or dashboard may use, with its kind and help (the exporter's HELP/TYPE).
EXTRA_METRICS: dict[str, tuple[str, str]] = {
    UP.name: ("gauge", UP.help),
    CLOCK_EVENT: ("gauge", "1 while this reason holds the clocks below their maximum."),
    XID_TOTAL: ("counter", "XID errors seen since the monitor started, by code."),
    XID_LAST: ("gauge", "Unix time the XID code was last seen."),
    IDLE: ("gauge", "1 while the idle policy finds the GPU idle."),
    IDLE_SECONDS: ("counter", "Seconds the GPU was idle since the monitor started."),
    POD_INFO: ("gauge", "1 for the Kubernetes pod and container the GPU is allocated to "
                        "(the kubelet's pod-resources API)."),
}


def metric_names() -> dict[str, str]:
    """Every metric we export, full name → kind."""
    names = {m.full_name: m.kind for m in GPU_METRICS}
    names.update({PREFIX + n: kind for n, (kind, _) in EXTRA_METRICS.items()})
    return names


@dataclass
class XidTally:
    """XID events by (gpu, code): how many since the monitor started and when last seen.
    dcgm-exporter keeps only the last code, so a repeat is invisible; a counter shows it."""

    counts: dict[tuple[int, int], int] = field(default_factory=dict)
    last: dict[tuple[int, int], datetime] = field(default_factory=dict)
    last_code: dict[int, int] = field(default_factory=dict)

    def copy(self) -> XidTally:
        """A copy to publish: readers (a scrape) must not see the sampler's next update."""
        return XidTally(dict(self.counts), dict(self.last), dict(self.last_code))

    def add(self, sample: Sample) -> None:
        for g in sample.gpus:
            for ev in g.xid_events:
                key = (ev.gpu, ev.code)
                self.counts[key] = self.counts.get(key, 0) + 1
                if key not in self.last or ev.time >= self.last[key]:
                    self.last[key] = ev.time
                    self.last_code[ev.gpu] = ev.code


@dataclass(frozen=True)
class IdleState:
    """What the idle policy says of one GPU now (see telemetry.idle)."""

    idle: bool
    idle_seconds_total: float


@dataclass(frozen=True)
class Series:
    name: str  # full name
    labels: tuple[tuple[str, str], ...]
    value: float

    def label(self, key: str) -> str | None:
        return dict(self.labels).get(key)


def gpu_labels(sample: Sample, g: GpuSample) -> tuple[tuple[str, str], ...]:
    return (("gpu", str(g.index)), ("uuid", g.uuid or ""), ("model", g.name or ""),
            ("hostname", sample.hostname))


def series(sample: Sample, xids: XidTally | None = None,
           idle: dict[int, IdleState] | None = None) -> Iterator[Series]:
    """Every series of one sample under our names; readings a GPU lacks are left out (never
    a sentinel value: an absent series is what Prometheus understands as "no data")."""
    xids = xids or XidTally()
    for g in sample.gpus:
        base = gpu_labels(sample, g)
        yield Series(UP.full_name, base, 1.0 if g.error is None else 0.0)
        for m in GPU_METRICS:
            v = m.read(g)
            if v is not None:
                yield Series(m.full_name, base, float(v))
        for reason in g.clock_event_reasons or ():
            yield Series(PREFIX + CLOCK_EVENT, (*base, ("reason", reason)), 1.0)
        for (gpu, code), n in sorted(xids.counts.items()):
            if gpu == g.index:
                xid = (*base, ("xid", str(code)))
                yield Series(PREFIX + XID_TOTAL, xid, float(n))
                yield Series(PREFIX + XID_LAST, xid, xids.last[gpu, code].timestamp())
        if idle and g.index in idle:
            yield Series(PREFIX + IDLE, base, 1.0 if idle[g.index].idle else 0.0)
            yield Series(PREFIX + IDLE_SECONDS, base, idle[g.index].idle_seconds_total)


def pod_series(sample: Sample, pods: dict[str, Any]) -> Iterator[Series]:
    """One info series per GPU a pod holds (`pods`: GPU UUID → PodDevice), to join on the
    GPU's labels: `gpuaudit_gpu_utilization_ratio * on(uuid) group_left(namespace, pod)
    gpuaudit_gpu_pod_info`."""
    for g in sample.gpus:
        pod = pods.get(g.uuid or "")
        if pod is not None:
            yield Series(PREFIX + POD_INFO, (*gpu_labels(sample, g), ("namespace", pod.namespace),
                                             ("pod", pod.pod), ("container", pod.container)),
                         1.0)


def dcgm_series(sample: Sample, xids: XidTally | None = None) -> Iterator[Series]:
    """The readings that dcgm-exporter also has, under its names, units and labels."""
    xids = xids or XidTally()
    for g in sample.gpus:
        labels = (("gpu", str(g.index)), ("UUID", g.uuid or ""), ("modelName", g.name or ""),
                  ("Hostname", sample.hostname), ("device", f"nvidia{g.index}"))
        for m in GPU_METRICS:
            if m.dcgm is None:
                continue
            v = m.read(g)
            if v is not None:
                # Rounded: our ratio × 100 must give DCGM's 57 %, not 56.99999999999999.
                yield Series(m.dcgm, labels, round(float(v) * m.dcgm_scale, 6))
        if g.index in xids.last_code:
            yield Series(DCGM_XID_LAST_CODE, labels, float(xids.last_code[g.index]))
