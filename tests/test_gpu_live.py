"""On a real GPU: our readings agree with nvidia-smi's, and recording round-trips."""

from __future__ import annotations

import shutil
import subprocess

import pytest

from gpuaudit.hw import LiveNvml, RecordingNvml, ReplayNvml, read_nvml, take_snapshot

pytestmark = pytest.mark.gpu

QUERY = ("index,name,uuid,pci.bus_id,memory.total,pcie.link.gen.max,pcie.link.width.max,"
         "clocks.max.sm,power.default_limit,ecc.mode.current,vbios_version,driver_version,"
         "persistence_mode,clocks.max.graphics,clocks.applications.graphics,"
         "clocks.default_applications.graphics,clocks.applications.memory")


def _mhz(value: str) -> int | None:
    """nvidia-smi's number, or None where it prints [N/A] / [Not Supported]."""
    return None if value.startswith("[") else int(value)


def nvidia_smi_rows() -> list[dict[str, str]]:
    if shutil.which("nvidia-smi") is None:
        pytest.skip("nvidia-smi not on PATH")
    out = subprocess.run(["nvidia-smi", f"--query-gpu={QUERY}", "--format=csv,noheader,nounits"],
                         capture_output=True, text=True, check=True).stdout
    keys = QUERY.split(",")
    return [dict(zip(keys, (v.strip() for v in line.split(",")), strict=True))
            for line in out.strip().splitlines()]


def test_snapshot_matches_nvidia_smi():
    machine = take_snapshot()
    rows = nvidia_smi_rows()
    assert len(machine.gpus) == len(rows)
    for gpu, row in zip(machine.gpus, rows, strict=True):
        assert gpu.name == row["name"]
        assert gpu.uuid == row["uuid"]
        assert gpu.pci_bus_id == row["pci.bus_id"].lower()[-12:]
        assert gpu.memory_total_bytes // (1 << 20) == int(row["memory.total"])
        assert gpu.pcie.gen_max == int(row["pcie.link.gen.max"])
        assert gpu.pcie.width_max == int(row["pcie.link.width.max"])
        assert gpu.clocks.sm_max_mhz == int(row["clocks.max.sm"])
        assert gpu.power.default_limit_w == pytest.approx(float(row["power.default_limit"]))
        assert gpu.ecc.enabled == (row["ecc.mode.current"] == "Enabled")
        assert gpu.vbios_version == row["vbios_version"]
        assert gpu.persistence_mode == (row["persistence_mode"] == "Enabled")
        assert gpu.clocks.graphics_max_mhz == _mhz(row["clocks.max.graphics"])
        assert gpu.clocks.applications_graphics_mhz == _mhz(row["clocks.applications.graphics"])
        assert gpu.clocks.default_applications_graphics_mhz == _mhz(
            row["clocks.default_applications.graphics"])
        assert gpu.clocks.applications_memory_mhz == _mhz(row["clocks.applications.memory"])
    assert machine.driver_version == rows[0]["driver_version"]


def test_every_gpu_here_is_judged_on_sound_readings():
    from gpuaudit.inspect import check_machine

    machine = take_snapshot()
    findings = check_machine(machine, expect_gpus=len(nvidia_smi_rows()))
    codes = {f.code for f in findings}
    assert not codes & {"gpu.lost", "gpu.no-access", "reading.untrusted", "gpu-count.missing"}
    for gpu in machine.gpus:
        assert gpu.error is None and gpu.inforom_valid is not None
        judged = {f.code for f in findings if f.gpu_index == gpu.index}
        assert {"memory-size", "pcie", "clocks", "power"} & judged, judged


def test_record_then_replay_gives_the_same_facts():
    live = LiveNvml()
    rec = RecordingNvml(live)
    try:
        recorded = read_nvml(rec)
    finally:
        live.close()
    replayed = read_nvml(ReplayNvml(rec.trace()))
    assert replayed == recorded
    assert len(replayed.gpus) >= 1


def test_monitor_samples_agree_with_nvidia_smi_and_gpm_arrives_on_the_second_tick():
    import time
    from datetime import datetime, timezone

    from gpuaudit.hw.telemetry import Sampler
    from gpuaudit.hw.telemetry_trace import TraceRecorder, TraceReplay

    rows = nvidia_smi_rows()
    live = LiveNvml()
    rec = TraceRecorder(live)
    try:
        sampler = Sampler(rec, hostname="live", interval_s=0.5)
        rec.end_setup()
        samples = []
        for _ in range(2):
            now = datetime.now(timezone.utc)
            samples.append(sampler.sample(now))
            rec.end_frame(now)
            time.sleep(0.5)
    finally:
        live.close()
    first, second = samples
    assert [g.uuid for g in second.gpus] == [r["uuid"] for r in rows]
    for g, row in zip(second.gpus, rows, strict=True):
        assert g.error is None
        assert g.memory_total_bytes // (1 << 20) == int(row["memory.total"])
        assert 0 < g.power_w < 2000 and g.temperature_gpu_c is not None
        if sampler.static[g.index].gpm:
            # GPM is a rate between two samples: none on the first tick, a reading after.
            assert first.gpus[g.index].sm_activity_pct is None
            assert g.sm_activity_pct is not None and 0 <= g.sm_activity_pct <= 100
    # What was recorded replays to the same samples.
    replay = TraceReplay(rec.trace(hostname="live", interval_s=0.5))
    again = Sampler(replay, hostname="live", interval_s=0.5)
    assert [again.sample(replay.advance()) for _ in range(2)] == samples
