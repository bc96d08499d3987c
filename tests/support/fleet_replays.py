"""Recorded machines for a rehearsed fleet: each node of the tests' Ray cluster replays one.

Every node is the real two-H200 recording (tests/fixtures/h200-2gpu/inspect.json, and the
quick bench that was run on a two-H200 machine, tests/fixtures/bench/h200-2gpu-quick.json)
under its own host name and GPU identities, with at most one planted fault:

- h200-a: as recorded.
- h200-b: GPU 1 slow: its matmul and memory figures × SLOW (a GPU held at low clocks). GPU 0
  and GPU 1 of the recording are swapped first, so that the healthy GPUs of the fleet are not
  all copies of one recorded GPU.
- h200-c: PCIe link of GPU 0 at x8 of x16 (the `pcie-width-degraded` fault of
  tests/support/faults.py) and, as such a link does, half the host↔device bandwidth of GPU 0.
- h200-d: as recorded, but holds for `hold_s` before reporting (the node killed mid-run).
- h200-a-twin: another machine that calls itself h200-a (its own GPUs), on driver
  OLD_DRIVER while the others run the recorded one.

`write_plans(directory)` writes the documents and one replay plan per node (the JSON that
GPUAUDIT_FLEET_REPLAY names on that node).
"""

from __future__ import annotations

import copy
import json
from pathlib import Path

from tests.support.faults import FAULTS, base_doc, planted

FIXTURES = Path(__file__).parents[1] / "fixtures"
BENCH_2GPU = FIXTURES / "bench" / "h200-2gpu-quick.json"
SLOW = 0.7
SLOW_SUITES = ("matmul", "memory")
HALVED = ("h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable")
NODES = ("h200-a", "h200-b", "h200-c", "h200-d", "h200-a-twin")
OLD_DRIVER = "570.86.15"


def _rename(doc: dict, hostname: str, tag: int) -> dict:
    """The document as recorded on another host with other GPUs of the same kind."""
    doc = copy.deepcopy(doc)
    machine = doc["machine"]
    machine["host"]["hostname"] = hostname
    for gpu in machine["gpus"]:
        gpu["uuid"] = gpu["uuid"][:-4] + f"{tag:02x}{gpu['index']:02x}"
        gpu["serial"] = f"{gpu['serial'][:-3]}{tag}{gpu['index']:02d}"
    return doc


def _scaled(bench: dict, gpu: int, suites: tuple[str, ...] = (), names: tuple[str, ...] = (),
            factor: float = 1.0) -> None:
    for m in bench["measurements"]:
        if m["gpu_index"] != gpu or m["value"] is None:
            continue
        if m["suite"] in suites or m["name"] in names:
            for key in ("value", "spread_low", "spread_high"):
                if m.get(key) is not None:
                    m[key] *= factor
            m["samples"] = [s * factor for s in m["samples"]]
            if m.get("pct_of_spec") is not None:
                m["pct_of_spec"] *= factor


def _swap_gpus(bench: dict) -> None:
    for m in bench["measurements"]:
        if m["gpu_index"] in (0, 1):
            m["gpu_index"] = 1 - m["gpu_index"]


def documents(hold_s: float = 600.0) -> dict[str, tuple[dict, dict, float]]:
    """Node → (inspect document, bench document, hold seconds)."""
    healthy = base_doc("h200-2gpu")
    pcie = planted(next(f for f in FAULTS if f.name == "pcie-width-degraded"))
    bench = json.loads(BENCH_2GPU.read_text())
    slow = copy.deepcopy(bench)
    _swap_gpus(slow)
    _scaled(slow, 1, suites=SLOW_SUITES, factor=SLOW)
    old = copy.deepcopy(healthy)
    old["machine"]["driver_version"] = OLD_DRIVER
    narrow = copy.deepcopy(bench)
    _scaled(narrow, 0, names=HALVED, factor=0.5)
    return {
        "h200-a": (_rename(healthy, "h200-a", 1), bench, 0.0),
        "h200-b": (_rename(healthy, "h200-b", 2), slow, 0.0),
        "h200-c": (_rename(pcie, "h200-c", 3), narrow, 0.0),
        "h200-d": (_rename(healthy, "h200-d", 4), bench, hold_s),
        "h200-a-twin": (_rename(old, "h200-a", 5), bench, 0.0),
    }


def write_plans(directory: Path, hold_s: float = 600.0) -> dict[str, Path]:
    """One replay plan per node, with its documents, under `directory`."""
    plans = {}
    for name, (inspect, bench, hold) in documents(hold_s).items():
        node_dir = directory / name
        node_dir.mkdir(parents=True, exist_ok=True)
        (node_dir / "inspect.json").write_text(json.dumps(inspect))
        (node_dir / "bench.json").write_text(json.dumps(bench))
        plan = node_dir / "plan.json"
        plan.write_text(json.dumps({"inspect": "inspect.json", "bench": "bench.json",
                                    "hold_s": hold}))
        plans[name] = plan
    return plans
