"""Do a family's targets share its source's pace round by round? The recorder judges a
target over the rounds where its source ran at its profiled pace (`rounds.py`), on the
assumption that a round's host pace is common to the steps timed in it. This reads the raw
recordings' rounds back and gives, per family and recording, how much the bf16 source's
round medians moved (coefficient of variation) and how they correlated with those of the
targets timed from it (batch ×0.5 and ×2, the size variant, fp32). `rescaled` asks the
published results a second question: had each host-bound prediction known the measuring
process's own host pace (its step at batch 1 there ÷ in the profiling process), would it
have come closer? `controls` asks them how far a source's step moved from the profiling
process to the fresh one, apart for sources the host binds and those the GPU binds, and how
the cases fared where the fresh process met the profiled pace in some rounds and where in
none.

    python3 validation/predict/round_pace.py collect OUT.json REC_DIR...   # raw recordings
    python3 validation/predict/round_pace.py summarize OUT.json
    python3 validation/predict/round_pace.py rescaled tests/fixtures/predict/zoo-results.json
    python3 validation/predict/round_pace.py controls tests/fixtures/predict/zoo-results.json

docs/predict.md's figures come from tests/fixtures/predict/zoo/round-pace-h200.json (the
rounds) and tests/fixtures/predict/zoo-results.json (`rescaled`, `controls`).
"""

from __future__ import annotations

import json
import math
import statistics
import sys
from pathlib import Path
from typing import Any

SOURCE = "bf16"
TARGETS = ("bf16 x0.5", "bf16 x2", "size", "fp32")
# A source whose round medians move more than this is one the host binds: rounds where it
# meets its profiled pace are then a choice among rounds, not every round.
MOVING_CV = 0.05
# A predicted step this much longer than its classes' predicted device time is one the host
# binds (the rest is the host's launches and waits the replay kept).
HOST_BOUND = 1.3
# A source whose host alone (its step at batch 1) takes this share of its step or more is one
# the host binds; under `GPU_BOUND`, one the GPU binds.
HOST_SHARE = 0.8
GPU_BOUND = 0.5


def collect(recordings: list[Path]) -> list[dict[str, Any]]:
    """Per recording and family: each of the source's and targets' round medians (ms)."""
    out = []
    for rec in recordings:
        for path in sorted((rec / "cases").glob("*.json")):
            cases = json.loads(path.read_text())
            rounds = {k: [round(x, 2) for x in v["rounds_ms"]] for k, v in cases.items()
                      if k in (SOURCE, *TARGETS) and isinstance(v, dict) and v.get("rounds_ms")}
            if SOURCE in rounds:
                out.append({"recording": rec.name, "family": path.stem, "rounds_ms": rounds})
    return out


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per entry the source's coefficient of variation over its rounds and its correlation
    with each target; over the entries, the correlations' median, range and share above 0.5,
    apart for sources that moved (above `MOVING_CV`) and those that held."""
    rows, moved, held = [], [], []
    for e in entries:
        r = e["rounds_ms"]
        n = min(len(v) for v in r.values())
        if n < 6:  # too few rounds for a correlation worth reading
            continue
        src = r[SOURCE][:n]
        cv = statistics.pstdev(src) / statistics.fmean(src)
        corr = {t: statistics.correlation(src, r[t][:n]) for t in TARGETS
                if t in r and len(set(r[t][:n])) > 1 and len(set(src)) > 1}
        rows.append({"recording": e["recording"], "family": e["family"], "rounds": n,
                     "source_cv": cv, "r": corr})
        (moved if cv > MOVING_CV else held).extend(corr.values())

    def spread(rs: list[float]) -> dict[str, Any]:
        if not rs:
            return {"n": 0}
        return {"n": len(rs), "median": statistics.median(rs), "min": min(rs), "max": max(rs),
                "share_above_half": sum(x > 0.5 for x in rs) / len(rs)}

    return {"entries": rows, "moving_source": spread(moved), "steady_source": spread(held)}


def rescaled(results: dict[str, Any]) -> dict[str, Any]:
    """Over the scored cases whose predicted step the host binds (`HOST_BOUND`): how many came
    within 10 % as published, and had the prediction been divided by the measuring process's
    host pace (the target's precision family's step at batch 1, fresh ÷ profiled, from the
    timing controls); how many that moved inside 10 % and how many out."""
    pace = {(c["recording"], c["family"], c["precision"]):
            c["host_fresh_ms"] / c["host_recorded_ms"]
            for c in results["controls"] if c.get("host_fresh_ms") and c.get("host_recorded_ms")}
    rows = []
    for r in results["rows"]:
        if "error_pct" not in r or not r.get("classes") or not r.get("step_ms"):
            continue
        device_ms = sum(after for _, after in r["classes"].values())
        family = "fp32" if any(f"/{p}" in r["to"] for p in ("fp32", "tf32")) else "bf16"
        ratio = pace.get((r["recording"], r["family"], family))
        if ratio is None or r["step_ms"] <= HOST_BOUND * device_ms:
            continue
        rows.append((r["error_pct"], ((1 + r["error_pct"] / 100) / ratio - 1) * 100))
    within = [(abs(a) <= 10, abs(b) <= 10) for a, b in rows]
    return {"n": len(rows), "within_published": sum(a for a, _ in within),
            "within_rescaled": sum(b for _, b in within),
            "moved_in": sum(b and not a for a, b in within),
            "moved_out": sum(a and not b for a, b in within),
            "median_abs_published": statistics.median(abs(a) for a, _ in rows) if rows else None,
            "median_abs_rescaled": statistics.median(abs(b) for _, b in rows) if rows else None}


def controls(results: dict[str, Any]) -> dict[str, Any]:
    """Each source's step in the fresh process ÷ in the profiling one (the timing controls),
    apart for sources the host binds (`HOST_SHARE`) and the GPU binds (`GPU_BOUND`): their
    mean and standard deviation (as a percentage off 1, from the logs) and how many moved
    past 10 %; and the scored cases, apart by whether their source met its profiled pace in
    two rounds or more (`pace_matched`): how many came within 10 % and inside their band."""
    moved: dict[str, list[float]] = {"host_bound": [], "gpu_bound": []}
    for c in results["controls"]:
        if not (c.get("host_recorded_ms") and c.get("fresh_ms") and c.get("profiled_run_ms")):
            continue
        share = c["host_recorded_ms"] / c["profiled_run_ms"]
        kind = "host_bound" if share >= HOST_SHARE else "gpu_bound" if share < GPU_BOUND else None
        if kind:
            moved[kind].append(math.log(c["fresh_ms"] / c["profiled_run_ms"]))

    def spread(logs: list[float]) -> dict[str, Any]:
        return {"n": len(logs), "mean_pct": 100 * math.expm1(statistics.fmean(logs)),
                "sd_pct": 100 * math.expm1(statistics.stdev(logs)),
                "past_10_pct": sum(abs(math.expm1(x)) > 0.1 for x in logs)}

    cases: dict[str, dict[str, int]] = {}
    for r in results["rows"]:
        if r.get("error_pct") is None or r.get("pace_matched") is None:
            continue
        k = cases.setdefault("at_pace" if r["pace_matched"] else "never_at_pace",
                             {"n": 0, "within_10": 0, "in_band": 0})
        k["n"] += 1
        k["within_10"] += abs(r["error_pct"]) <= 10
        k["in_band"] += bool(r["in_band"])
    return {k: spread(v) for k, v in moved.items() if len(v) > 1} | {"cases": cases}


def main() -> int:
    what, out = sys.argv[1], Path(sys.argv[2])
    if what in ("rescaled", "controls"):
        fn = rescaled if what == "rescaled" else controls
        print(json.dumps(fn(json.loads(out.read_text())), indent=1))
        return 0
    if what == "collect":
        out.write_text(json.dumps(collect([Path(p) for p in sys.argv[3:]])))
        return 0
    got = summarize(json.loads(out.read_text()))
    print(json.dumps({k: got[k] for k in ("moving_source", "steady_source")}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
