"""A monitor tick by hand for the exporter's tests: two GPUs, one answering with some readings
missing, one fallen off the bus; and the exporter's view of it."""

from __future__ import annotations

from datetime import datetime, timezone

from gpuaudit.model import GpuSample, ProcessSample, Sample, XidEvent
from gpuaudit.telemetry.metrics import IdleState, XidTally
from gpuaudit.telemetry.state import Latest, MonitorState

GIB = 1 << 30
T0 = datetime(2026, 5, 1, 12, 0, 0, tzinfo=timezone.utc)  # 1777636800 s since the epoch


def two_gpus(xids: tuple[XidEvent, ...] = ()) -> Sample:
    """GPU 0 answers, with some readings missing (as on a real GPU: no HBM temperature,
    no NVLink, some GPM counters absent); GPU 1 fell off the bus."""
    g0 = GpuSample(
        index=0, uuid="GPU-0a", name="NVIDIA H200",
        utilization_gpu_pct=37.5, utilization_memory_pct=12.0,
        memory_used_bytes=3 * GIB + 512 * (1 << 20), memory_total_bytes=150754820096,
        power_w=312.25, power_limit_w=700.0, energy_j=1234.5,
        temperature_gpu_c=41.0, temperature_memory_c=None,
        sm_clock_mhz=1980, memory_clock_mhz=2619,
        clock_event_reasons=("sw_power_cap",),
        pcie_link_gen=4, pcie_link_gen_max=5, pcie_link_width=16, pcie_link_width_max=16,
        pcie_rx_bytes_per_s=1.5e9, pcie_tx_bytes_per_s=2.5e8,
        ecc_corrected_volatile=3, ecc_uncorrected_volatile=0, ecc_uncorrected_aggregate=1,
        remapped_rows_correctable=2, remapped_rows_uncorrectable=0,
        remapping_pending=False, remapping_failed=False,
        sm_activity_pct=55.0, tensor_activity_pct=25.0, dram_bandwidth_util_pct=8.0,
        fp32_activity_pct=10.0, gpm_pcie_rx_bytes_per_s=1.25e9,
        processes=(ProcessSample(pid=4242, user="ana", command="python train.py",
                                 used_memory_bytes=3 * GIB),
                   ProcessSample(pid=4243)),
        xid_events=xids,
        unavailable={"temperature_memory_c": "not supported on this GPU"},
    )
    g1 = GpuSample(index=1, uuid="GPU-1b", name="NVIDIA H200",
                   error="GPU has fallen off the bus")
    return Sample(time=T0, hostname="node-7", interval_s=1.0, gpus=(g0, g1))


def latest_for(sample: Sample, idle: dict[int, IdleState] | None = None) -> Latest:
    tally = XidTally()
    tally.add(sample)
    return Latest(MonitorState(sample=sample, xids=tally, idle=idle or {}))
