"""Every job of the doctor's zoo (examples/doctor/zoo/zoo.json) under `gpuaudit doctor`, as a
user runs it: the first finding against the expected one, the evidence behind it, and the
whole evidence saved (`--save-evidence`) for the CPU tests to replay.

Usage: python3 validation/doctor/zoo.py OUT [--set dev|held-out] [--only a,b] [--deadline-s S]
(or `python -m validation run doctor-zoo --out DIR -- [options]`; `--rejudge` judges OUT's saved
diagnoses again and runs nothing).
Writes under OUT: zoo_results.json, zoo_dev.md, zoo_held-out.md, zoo_log.txt and
zoo_evidence.tar.gz (one NAME.json.gz a job). Cases whose package is missing are skipped with
the reason; a tenant (another program on the GPU) runs only while its case does.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
ZOO = ROOT / "examples" / "doctor" / "zoo"
SEVERE = ("WARN", "FAIL")


def _has(module: str) -> bool:
    return subprocess.run([sys.executable, "-c", f"import {module}"],
                          capture_output=True).returncode == 0


def _job_args(case: dict) -> list[str]:
    if "args" in case:
        return list(case["args"])
    return ["--max-seconds", str(case.get("seconds", 10))]


def _first_evidence(d: dict) -> str:
    if not d["findings"]:
        return "; ".join(f"{o['name']} {o['value']} {o['unit']}".strip()
                         for o in d["summary"][:4])
    return "; ".join(f"{o['name']} {o['value']} {o['unit']}".strip()
                     for o in d["findings"][0]["evidence"][:3])


def judge(expected: str | None, findings: list[dict]) -> bool:
    """The expected finding comes first; a control has nothing above INFO."""
    if expected is None:
        return not any(f["severity"] in SEVERE for f in findings)
    return bool(findings) and findings[0]["code"] == expected


def run_case(name: str, case: dict, out: Path, deadline: float, log: list[str]) -> dict:
    row = {"name": name, "set": case["set"], "expected": case["expected"]}
    if case.get("needs") and not _has(case["needs"]):
        return {**row, "skipped": f"{case['needs']} is not installed"}
    job = ZOO / f"{case.get('job', name)}.py"
    save, evidence = out / "diagnoses" / f"{name}.json", out / "evidence" / f"{name}.json.gz"
    cmd = [sys.executable, "-m", "gpuaudit", "doctor", "--save", str(save), "--save-evidence",
           str(evidence), "--", sys.executable, str(job), *_job_args(case)]
    tenant = None
    if case.get("tenant"):
        tenant = subprocess.Popen([sys.executable, str(ZOO / f"{case['tenant']}.py"), "120"],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                                  start_new_session=True)
        time.sleep(8)  # until it holds its memory and runs
    t0 = time.monotonic()
    budget = max(10.0, min(float(case.get("seconds", 10)) + 120, deadline - time.monotonic()))
    proc = subprocess.Popen(cmd, cwd=ZOO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    stopped = False
    try:
        stdout, stderr = proc.communicate(timeout=budget)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)  # the doctor forwards it and diagnoses what ran
        stdout, stderr = proc.communicate(timeout=60)
        stopped = True
    finally:
        if tenant is not None:
            os.killpg(tenant.pid, signal.SIGKILL)
            tenant.wait()
    row["wall_s"] = round(time.monotonic() - t0, 1)
    row["rc"] = proc.returncode
    log.append(f"== {name} rc={proc.returncode} {row['wall_s']} s\n{stdout[-800:]}\n"
               f"{stderr[-4000:]}")
    row["stopped"] = stopped
    return judged(row, save)


def judged(row: dict, save: Path) -> dict:
    """The row with the saved diagnosis judged. A job this harness stopped is judged on what
    it ran whatever its exit status: how a job ends on Ctrl-C is the job's own business (a
    KeyboardInterrupt in a compiled backward exits 1, a handler may exit 0)."""
    if not save.exists():
        return {**row, "error": f"no diagnosis (exit {row['rc']})"}
    d = json.loads(save.read_text())
    if row["rc"] != 0 and not row["stopped"]:
        return {**row, "error": f"the job failed (exit {d.get('exit_code')}): see zoo_log.txt"}
    findings = [{"code": f["code"], "severity": f["severity"], "share": f["share"]}
                for f in d["findings"]]
    return {**row, "found": findings, "pass": judge(row["expected"], d["findings"]),
            "evidence": _first_evidence(d), "sources": d["sources"], "notes": d["notes"]}


def table(rows: list[dict]) -> str:
    lines = ["| job | expected first | found (ranked) | evidence of the first | result |",
             "| --- | --- | --- | --- | --- |"]
    for r in rows:
        if "skipped" in r or "error" in r:
            lines.append(f"| {r['name']} | {r['expected'] or 'none'} | "
                         f"{r.get('skipped') or r.get('error')} | | skipped |")
            continue
        found = ", ".join(f"{f['code']} ({f['severity']}, {f['share']:.2f})"
                          for f in r["found"]) or "none"
        lines.append(f"| {r['name']} | {r['expected'] or 'none (nothing above INFO)'} | "
                     f"{found} | {r['evidence']} | {'pass' if r['pass'] else '**miss**'} |")
    ran = [r for r in rows if "pass" in r]
    lines.append(f"\n{sum(r['pass'] for r in ran)} of {len(ran)} right.")
    return "\n".join(lines) + "\n"


def write_tables(out: Path, rows: list[dict]) -> None:
    (out / "zoo_results.json").write_text(json.dumps(rows, indent=1) + "\n")
    for which in ("dev", "held-out"):
        picked = [r for r in rows if r["set"] == which]
        if picked:
            (out / f"zoo_{which}.md").write_text(table(picked))


def rejudge(out: Path) -> None:
    """Judge a finished recording's saved diagnoses again (after a change of the judge)."""
    rows = json.loads((out / "zoo_results.json").read_text())
    keep = ("name", "set", "expected", "wall_s", "rc")
    rows = [judged({**{k: r[k] for k in keep}, "stopped": r.get("stopped", False)},
                   out / "diagnoses" / f"{r['name']}.json") if "rc" in r else r for r in rows]
    write_tables(out, rows)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out", type=Path)
    ap.add_argument("--set", choices=("dev", "held-out"))
    ap.add_argument("--only", default="")
    ap.add_argument("--deadline-s", type=float, default=560)
    ap.add_argument("--rejudge", action="store_true",
                    help="judge OUT's saved diagnoses again; runs nothing")
    a = ap.parse_args()
    if a.rejudge:
        return rejudge(a.out)
    deadline = time.monotonic() + a.deadline_s
    cases = json.loads((ZOO / "zoo.json").read_text())["cases"]
    only = [n for n in a.only.split(",") if n]
    names = only or [n for n, c in cases.items() if a.set in (None, c["set"])]
    for sub in ("diagnoses", "evidence"):
        (a.out / sub).mkdir(parents=True, exist_ok=True)
    rows, log = [], []
    try:
        for name in names:
            if deadline - time.monotonic() < 30:
                rows.append({"name": name, "set": cases[name]["set"],
                             "expected": cases[name]["expected"], "skipped": "out of time"})
                continue
            rows.append(run_case(name, cases[name], a.out, deadline, log))
            r = rows[-1]
            print(f"{name}: {r.get('found', r.get('skipped') or r.get('error'))} "
                  f"{'pass' if r.get('pass') else ''}", flush=True)
    finally:
        write_tables(a.out, rows)
        (a.out / "zoo_log.txt").write_text("\n".join(log) + "\n")
        with tarfile.open(a.out / "zoo_evidence.tar.gz", "w:gz") as tar:
            for sub in ("evidence", "diagnoses"):
                tar.add(a.out / sub, arcname=sub)


if __name__ == "__main__":
    main()
