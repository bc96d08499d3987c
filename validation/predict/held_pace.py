"""How far does the host's work at the recorded batch stand from its step at batch 1, read at
one pace and at two? `gpuaudit predict` starts a step the host binds from the step issued with
the device held at the recorded batch (`workloads.hosttime.held_host`). Recordings made
before `OpProfile.host_held_paired` timed those held rounds after all the rounds at batch 1;
their ratio, held ÷ batch 1, mixes the host's work at the batch with how far its pace moved
in between. The fresh process that times the targets reads the same ratio at one pace: each
round times the source's step and its step at batch 1 a moment apart, and where the source
is host-bound (its device time under `HOST_BOUND` of its step) the median of the rounds'
ratios is the host's work at the batch over its work at batch 1.

    python3 validation/predict/held_pace.py collect OUT.json REC_DIR...   # raw recordings
    python3 validation/predict/held_pace.py summarize OUT.json
    python3 validation/predict/held_pace.py versus RESULTS.json RESULTS-unpaired.json
    python3 validation/predict/held_pace.py versus BOTH.json    # {"paired": .., "unpaired": ..}
    python3 validation/predict/held_pace.py autocast RUN.json[.gz]...

`versus`: recordings compared twice (`zoo.py compare`, then with `--unpaired`), each case's
error with the held rounds read at one pace beside read apart, and how many came within 10 %.

`autocast`: per run whose bf16 and fp32 profiles both timed held rounds, the bf16 step's held
host work over the fp32 step's (the median of the rounds' ratios, as `predict` reads it) in
each of the two processes: an fp32 → bf16 prediction takes the fp32 process's.

docs/predict.md's figures come from tests/fixtures/predict/zoo/held-pace-h200.json and
held-pace-versus-h200.json (the 38th–41st recordings' cases, compared both ways), and
`autocast` from the zoo's *-held-h200-run and *-held-h100-run recordings.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any

SOURCE = "bf16"
BATCH_1 = "bf16 batch 1"
# A source whose device time is under this share of its step in the fresh process is one
# the host binds there: its step is the host's work at the batch.
HOST_BOUND = 0.8


def collect(recordings: list[Path]) -> list[dict[str, Any]]:
    """Per recording and family whose bf16 profile timed held rounds: those rounds, its
    rounds and step at batch 1, its device time per step, and the fresh process's rounds of
    the source and of its step at batch 1 (ms)."""
    from gpuaudit.model import load_run

    out = []
    for rec in recordings:
        for path in sorted((rec / "runs").glob("*.json")):
            cases_path = rec / "cases" / path.name
            if not cases_path.exists():
                continue
            cases = json.loads(cases_path.read_text())
            prof = next((p for p in load_run(path.read_text()).op_profiles
                         if p.precision == SOURCE), None)
            fresh = {k: cases.get(k, {}).get("rounds_ms") for k in (SOURCE, BATCH_1)}
            if prof is None or not prof.host_held_ms.get(SOURCE) or not prof.host_step_ms \
                    or not all(fresh.values()):
                continue
            out.append({"recording": rec.name, "family": path.stem,
                        "paired": prof.host_held_paired,
                        "held_ms": list(prof.host_held_ms[SOURCE]),
                        "batch_1_rounds_ms": list(prof.host_rounds_ms),
                        "batch_1_ms": prof.host_step_ms,
                        "device_ms": round(sum(c.ms_per_step for c in prof.classes), 4),
                        "fresh_rounds_ms": fresh})
    return out


def summarize(entries: list[dict[str, Any]]) -> dict[str, Any]:
    """Per entry the profiling process's held ÷ batch-1 ratio (paired round by round where
    the recording paired them, else the medians') and the fresh process's source ÷ batch-1
    ratio round by round; over the entries whose source the host binds in the fresh process,
    both ratios' median and range, and how far the first stood from the second; over every
    entry, the first's median and range, paired and read apart."""
    rows = []
    for e in entries:
        fresh = e["fresh_rounds_ms"]
        pairs = list(zip(fresh[SOURCE], fresh[BATCH_1], strict=False))
        step = statistics.median(fresh[SOURCE])
        if e.get("paired"):
            profiled = statistics.median(
                h / b for h, b in zip(e["held_ms"], e["batch_1_rounds_ms"], strict=False))
        else:
            profiled = statistics.median(e["held_ms"]) / e["batch_1_ms"]
        rows.append({"recording": e["recording"], "family": e["family"],
                     "host_bound": e["device_ms"] < HOST_BOUND * step,
                     "profiled": profiled, "paired": bool(e.get("paired")),
                     "fresh": statistics.median(s / b for s, b in pairs)})

    def spread(xs: list[float]) -> dict[str, Any]:
        if not xs:
            return {"n": 0}
        return {"n": len(xs), "median": statistics.median(xs), "min": min(xs), "max": max(xs)}

    bound = [r for r in rows if r["host_bound"]]
    return {"entries": rows,
            # every entry's profiled reading, host-bound in the fresh process or not
            "all_unpaired": spread([r["profiled"] for r in rows if not r["paired"]]),
            "all_paired": spread([r["profiled"] for r in rows if r["paired"]]),
            "unpaired": spread([r["profiled"] for r in bound if not r["paired"]]),
            "paired": spread([r["profiled"] for r in bound if r["paired"]]),
            "fresh": spread([r["fresh"] for r in bound]),
            # how far each profiled reading stood from the fresh one-pace reading
            "apart_unpaired": spread([abs(r["profiled"] / r["fresh"] - 1) for r in bound
                                      if not r["paired"]]),
            "apart_paired": spread([abs(r["profiled"] / r["fresh"] - 1) for r in bound
                                    if r["paired"]])}


def versus(paired: dict[str, Any], unpaired: dict[str, Any]) -> dict[str, Any]:
    """Each scored case of the recordings compared twice (keyed by recording, family and
    case): its error (%) from the paired reading and from the held rounds' median; how many
    of each came within 10 % and inside their band, and the largest gap between the two."""
    def scored(doc: dict[str, Any]) -> dict[tuple[str, str, str], dict[str, Any]]:
        return {(r.get("recording", ""), r["family"], r["case"]): r for r in doc["rows"]
                if "error_pct" in r}

    one, apart = scored(paired), scored(unpaired)
    both = [k for k in one if k in apart]
    rows = [{"recording": k[0], "family": k[1], "case": k[2],
             "paired_pct": one[k]["error_pct"], "unpaired_pct": apart[k]["error_pct"]}
            for k in both]

    def count(doc: dict[tuple[str, str, str], dict[str, Any]]) -> dict[str, int]:
        return {"within_10": sum(abs(doc[k]["error_pct"]) <= 10 for k in both),
                "in_band": sum(bool(doc[k].get("in_band")) for k in both)}

    return {"cases": rows, "n": len(both), "paired": count(one), "unpaired": count(apart),
            "most_apart": max((abs(r["paired_pct"] - r["unpaired_pct"]) for r in rows),
                              default=0.0)}


def autocast(runs: list[Path]) -> list[dict[str, Any]]:
    """Per run, the bf16 ÷ fp32 held host work in the fp32 recording's process and in the
    bf16 one's, and the first over the second; runs without both are left out."""
    from gpuaudit.model.schema import read_run
    from gpuaudit.predict.grouped import held_ratio

    out = []
    for path in runs:
        by = {p.precision: p for p in read_run(path).op_profiles}
        if not {"bf16", "fp32"} <= set(by):
            continue
        got = {p: held_ratio(by[p], "fp32", "bf16") for p in ("fp32", "bf16")}
        if None in got.values():
            continue
        in_fp32, in_bf16 = (got[p][0] for p in ("fp32", "bf16"))  # type: ignore[index]
        out.append({"run": path.name.split(".")[0], "in_fp32_process": round(in_fp32, 3),
                    "in_bf16_process": round(in_bf16, 3),
                    "fp32_over_bf16": round(in_fp32 / in_bf16, 3)})
    return out


def main() -> int:
    what, out = sys.argv[1], Path(sys.argv[2])
    if what == "versus":
        doc = json.loads(out.read_text())
        got = (versus(doc["paired"], doc["unpaired"]) if len(sys.argv) == 3 else
               versus(doc, json.loads(Path(sys.argv[3]).read_text())))
        for r in got["cases"]:
            print(f"{r['family'][:40]:40s} {r['case']:12s} {r['paired_pct']:+7.1f} % "
                  f"{r['unpaired_pct']:+7.1f} %")
        print(json.dumps({k: got[k] for k in ("n", "paired", "unpaired", "most_apart")}))
        return 0
    if what == "autocast":
        for r in autocast([Path(p) for p in sys.argv[2:]]):
            print(json.dumps(r))
        return 0
    if what == "collect":
        out.write_text(json.dumps(collect([Path(p) for p in sys.argv[3:]])))
        return 0
    got = summarize(json.loads(out.read_text()))
    print(json.dumps({k: v for k, v in got.items() if k != "entries"}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
