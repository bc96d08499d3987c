"""Telemetry traces for the monitor's tests, built from the real H200 NVML recordings.

The recordings (tests/fixtures/h200-*/nvml_trace.json) are one reading of an idle machine; a
trace repeats it tick after tick (what an idle H200 answers), and the scenarios plant changes
in copies of it: load, an XID, a GPU falling off the bus, a thermal slowdown. Readings that the
recordings lack (GPM, energy, HBM temperature) are "not recorded" unless a scenario plants them.

`python -m tests.telemetry_traces` rewrites tests/fixtures/telemetry/*.json; a test checks the
committed files are exactly what this module builds.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

from gpuaudit.hw.nvml import GPM_METRICS, PROCESS_INFO, XID_EVENTS, Dev, call_key
from gpuaudit.hw.telemetry import GPM_IDS
from gpuaudit.hw.telemetry_trace import TELEMETRY_FORMAT, TELEMETRY_VERSION

FIXTURES = Path(__file__).parent / "fixtures"
OUT = FIXTURES / "telemetry"

# What the Sampler reads once (at setup); everything else of the recording is per tick.
_SETUP = ("nvmlDeviceGetCount(", "nvmlDeviceGetName(", "nvmlDeviceGetUUID(",
          "nvmlGpmQueryDeviceSupport(", "nvmlDeviceGetNvLinkState(",
          "nvmlDeviceGetMaxPcieLinkGeneration(", "nvmlDeviceGetMaxPcieLinkWidth(")

Frame = dict[str, dict[str, Any]]


def _recording(name: str) -> dict[str, Any]:
    return json.loads((FIXTURES / name / "nvml_trace.json").read_text())


def idle_trace(name: str, ticks: int, interval_s: float = 1.0) -> dict[str, Any]:
    rec = _recording(name)
    setup = {k: v for k, v in rec["calls"].items() if k.startswith(_SETUP)}
    tick = {k: v for k, v in rec["calls"].items() if not k.startswith(_SETUP)}
    start = datetime.fromisoformat(rec["recorded_at"])
    frames = [{"time": (start + timedelta(seconds=i * interval_s)).isoformat(),
               "calls": copy.deepcopy(tick)} for i in range(ticks)]
    return {"format": TELEMETRY_FORMAT, "version": TELEMETRY_VERSION, "hostname":
            rec["hostname"], "recorded_at": rec["recorded_at"], "interval_s": interval_s,
            "source": f"tests/fixtures/{name}/nvml_trace.json, repeated", "setup": setup,
            "frames": frames}


def _set(frame: Frame, fn: str, *args: Any, value: Any = None, error: str | None = None
         ) -> None:
    frame[call_key(fn, args)] = {"error": error} if error else {"value": value}


def busy(frame: Frame, gpu: int = 0, *, util: int = 100, power_w: float = 655.0,
         sm: float = 96.0, tensor: float = 71.0, dram: float = 38.0, pid: int = 4242) -> None:
    h = Dev(gpu)
    _set(frame, "nvmlDeviceGetUtilizationRates", h, value={"gpu": util, "memory": 45})
    _set(frame, "nvmlDeviceGetPowerUsage", h, value=int(power_w * 1000))
    _set(frame, "nvmlDeviceGetCurrentClocksEventReasons", h, value=0)
    _set(frame, "nvmlDeviceGetClockInfo", h, 1, value=1980)
    _set(frame, "nvmlDeviceGetMemoryInfo", h, value={"free": 10 << 30, "total": 150754820096,
                                                    "used": 150754820096 - (10 << 30)})
    _set(frame, "nvmlDeviceGetComputeRunningProcesses", h,
         value=[{"pid": pid, "usedGpuMemory": 139 << 30, "gpuInstanceId": None,
                 "computeInstanceId": None}])
    _set(frame, PROCESS_INFO, pid, value={"user": "alice", "command": "python train.py"})
    gpm = dict.fromkeys(GPM_IDS.split(","), 0.0)
    gpm.update({"2": sm, "3": 48.0, "5": tensor, "10": dram, "12": 3.0, "13": 1.5})
    _set(frame, GPM_METRICS, h, GPM_IDS, value=gpm)


def xid(frame: Frame, gpu: int = 0, code: int = 79) -> None:
    events = frame.get(call_key(XID_EVENTS, ()), {}).get("value", [])
    _set(frame, XID_EVENTS, value=[*events, {"gpu": gpu, "code": code}])


def lost(frame: Frame, gpu: int) -> None:
    prefix = f"(gpu{gpu}"
    for key in list(frame):
        if prefix + "," in key or prefix + ")" in key:
            frame[key] = {"error": "GPU is lost"}


def hot(frame: Frame, gpu: int = 0, temp_c: int = 92) -> None:
    h = Dev(gpu)
    _set(frame, "nvmlDeviceGetTemperature", h, 0, value=temp_c)
    _set(frame, "nvmlDeviceGetCurrentClocksEventReasons", h, value=0x40 | 0x20)
    _set(frame, "nvmlDeviceGetClockInfo", h, 1, value=1410)


def _scenario(base: str, ticks: int, plant: Callable[[int, Frame], None]) -> dict[str, Any]:
    trace = idle_trace(base, ticks)
    for i, frame in enumerate(trace["frames"]):
        plant(i, frame["calls"])
    return trace


def _load(i: int, f: Frame) -> None:
    if 2 <= i < 8:
        busy(f)


def _xid_then_lost(i: int, f: Frame) -> None:
    busy(f, 0)
    busy(f, 1, pid=4243)
    if i == 3:
        xid(f, 1, 79)
    if i >= 4:
        lost(f, 1)


def _hot(i: int, f: Frame) -> None:
    busy(f)
    if i >= 2:
        hot(f)


# Committed (for `gpuaudit monitor --replay` demos and the tests); name → builder.
TRACES: dict[str, Callable[[], dict[str, Any]]] = {
    "h200-1gpu-idle": lambda: idle_trace("h200-1gpu", 10),
    "h200-1gpu-load": lambda: _scenario("h200-1gpu", 10, _load),
    "h200-1gpu-thermal": lambda: _scenario("h200-1gpu", 6, _hot),
    "h200-2gpu-xid-lost": lambda: _scenario("h200-2gpu", 6, _xid_then_lost),
}


def write_all() -> list[Path]:
    OUT.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, build in TRACES.items():
        path = OUT / f"{name}.json"
        path.write_text(json.dumps(build(), indent=1, sort_keys=True) + "\n")
        paths.append(path)
    return paths


if __name__ == "__main__":
    for p in write_all():
        print(p)


def widen(trace: dict[str, Any], n: int) -> dict[str, Any]:
    """A copy of `trace` with `n` GPUs: GPU k answers what GPU k % (GPUs recorded) did. For
    measuring the monitor's cost at a size no lent machine has (8 GPUs)."""
    out = copy.deepcopy(trace)
    have = out["setup"]["nvmlDeviceGetCount()"]["value"]

    def spread(calls: Frame) -> Frame:
        wide: Frame = {}
        for key, entry in calls.items():
            wide[key] = entry
            for src in range(have):
                tag = f"(gpu{src}"
                if tag + "," in key or tag + ")" in key:
                    for k in range(src + have, n, have):
                        wide[key.replace(tag, f"(gpu{k}", 1)] = entry
        return wide

    out["setup"] = spread(out["setup"])
    out["setup"]["nvmlDeviceGetCount()"] = {"value": n}
    for frame in out["frames"]:
        frame["calls"] = spread(frame["calls"])
    return out


def replay(trace: dict[str, Any] | str) -> list[Any]:
    """Every Sample of a trace (or of a committed one, by name) through the real sampler."""
    from gpuaudit.hw.telemetry import Sampler
    from gpuaudit.hw.telemetry_trace import TraceReplay

    if isinstance(trace, str):
        trace = json.loads((OUT / f"{trace}.json").read_text())
    src = TraceReplay(trace)
    sampler = Sampler(src, hostname=trace["hostname"], interval_s=trace["interval_s"])
    samples = []
    while (t := src.advance()) is not None:
        samples.append(sampler.sample(t))
    return samples
