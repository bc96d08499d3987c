"""The doctor's and tune's measurements on the GPU machine (`python -m validation run doctor`):

- known: every known-answer workload (examples/doctor) under `gpuaudit doctor --profile-steps
  5`; a table of expected vs top finding with its evidence;
- overhead: the LM preset (examples/doctor/healthy.py, GPT-2 small's shape, bf16) alone,
  under the doctor with its markers only, and with the bootstrap and py-spy's stack sampling
  (the default), alternated, median step times compared;
- tune: `gpuaudit tune` on the same LM, out-of-memory included.

`--dry` runs what a CPU can (the CPU-observable workloads, a short overhead run, tune on the
MLP example) so the script itself is tested without a GPU.
Usage: python3 validation/doctor/known.py OUT [known] [overhead] [tune] [--dry]
Env: GPUAUDIT_DOCTOR_ONLY=a,b (these workloads, in this order), GPUAUDIT_DOCTOR_SECONDS (15).
"""

from __future__ import annotations

import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
EX = ROOT / "examples" / "doctor"
SCRATCH = Path(os.environ.get("VALIDATION_WORK") or tempfile.gettempdir())
EXPECTED = {  # workload → the finding that must come first (None: the control, no finding)
    "healthy": None, "slow_loader": "input-bound", "item_every_step": "host-syncs",
    "tiny_batch": "batch-too-small", "tiny_kernels": "launch-bound",
    "fp32_matmuls": "tensor-cores-unused", "memory_full": "memory-nearly-full",
    "pageable_copies": "copy-bound",
}
CPU_OK = {"healthy", "slow_loader", "item_every_step", "tiny_batch"}


# The whole call ends by this many seconds after its start (a 10-minute device call).
DEADLINE = time.monotonic() + float(os.environ.get("GPUAUDIT_DOCTOR_DEADLINE_S", "560"))


def sh(args: list[str], cwd: Path = ROOT, timeout: float = 300) -> subprocess.CompletedProcess:
    """Run a command; one cut off at its timeout (or the call's deadline) gets rc 124 and
    SIGINT first, so a doctor still writes its diagnosis of what ran."""
    left = max(5.0, min(timeout, DEADLINE - time.monotonic()))
    proc = subprocess.Popen(args, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=left)
    except subprocess.TimeoutExpired:
        proc.send_signal(signal.SIGINT)
        try:
            out, err = proc.communicate(timeout=20)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return subprocess.CompletedProcess(args, 124, out, err)
    return subprocess.CompletedProcess(args, proc.returncode, out, err)


def known(out: Path, dry: bool, log: list[str]) -> None:
    device, seconds = ("cpu", "6") if dry else ("cuda", "15")
    seconds = os.environ.get("GPUAUDIT_DOCTOR_SECONDS", seconds)
    only = [n for n in os.environ.get("GPUAUDIT_DOCTOR_ONLY", "").split(",") if n]
    rows, docs = [], {}
    for name in only or EXPECTED:
        want = EXPECTED[name]
        if dry and name not in CPU_OK:
            continue
        save = SCRATCH / f"doctor-{name}.json"
        t0 = time.monotonic()
        kept = out / "profiles" / f"{name}.json.gz"  # real traces: the rules' next fixtures
        kept.parent.mkdir(exist_ok=True)
        p = sh([sys.executable, "-m", "gpuaudit", "doctor", "--profile-steps", "5", "--save",
                str(save), "--keep-profile", str(kept), "--", sys.executable, f"{name}.py",
                "--device", device, "--seconds", seconds], cwd=EX)
        log.append(f"== {name}: rc={p.returncode} in {time.monotonic() - t0:.0f} s\n"
                   f"{p.stdout[-500:]}\n{p.stderr[-3000:]}")
        if not save.exists():
            rows.append(f"| {name} | {want} | (no diagnosis, rc {p.returncode}) | | FAIL |")
            continue
        d = json.loads(save.read_text())
        docs[name] = d
        codes = [f["code"] for f in d["findings"]]
        top = codes[0] if codes else None
        ev = "; ".join(f"{o['name']} {o['value']} {o['unit']}".strip()
                       for o in (d["findings"][0]["evidence"] if codes else [])[:3])
        if not codes:
            ev = "; ".join(f"{o['name']} {o['value']} {o['unit']}".strip()
                           for o in d["summary"][:4])
        ok = "pass" if top == want else "FAIL"
        rows.append(f"| {name} | {want or 'none'} | {', '.join(codes) or 'none'} | {ev} | {ok} |")
    text = ["| workload | expected first | findings (ranked) | evidence of the first | result |",
            "| --- | --- | --- | --- | --- |", *rows]
    (out / "doctor_known_answers.md").write_text("\n".join(text) + "\n")
    (out / "doctor_diagnoses.json").write_text(json.dumps(docs, indent=1) + "\n")
    print("\n".join(text))


def _step_time(cmd: list[str]) -> float | None:
    p = sh(cmd, cwd=EX, timeout=240)
    for line in reversed(p.stdout.splitlines()):
        try:
            return float(json.loads(line)["median_step_s"])
        except (ValueError, KeyError, TypeError):
            continue
    return None


def overhead(out: Path, dry: bool, log: list[str]) -> None:
    device, seconds, rounds = ("cpu", "8", 1) if dry else ("cuda", "20", 2)
    job = [sys.executable, "healthy.py", "--device", device, "--seconds", seconds]
    doctor = [sys.executable, "-m", "gpuaudit", "doctor"]
    # The job marks its steps (gpuaudit.step()); under the doctor with --no-inject they are
    # all the doctor learns from inside; by default the bootstrap's hooks and py-spy's
    # sampling come on top.
    configs = {"alone": job,
               "doctor, markers only": [*doctor, "--no-inject", "--no-stacks", "--", *job],
               "doctor, bootstrap + stacks": [*doctor, "--", *job]}
    got: dict[str, list[float]] = {k: [] for k in configs}
    for _ in range(rounds):
        for k, cmd in configs.items():
            t = _step_time(cmd)
            log.append(f"overhead {k}: {t}")
            if t is not None:
                got[k].append(t)
    base = statistics.median(got["alone"]) if got["alone"] else None
    lines = ["| configuration | median step (ms), per run | median | vs alone |",
             "| --- | --- | --- | --- |"]
    for k, v in got.items():
        med = statistics.median(v) if v else None
        rel = f"{(med / base - 1) * 100:+.2f} %" if med and base else "—"
        runs = ", ".join(f"{x * 1000:.2f}" for x in v)
        lines.append(f"| {k} | {runs} | {med * 1000 if med else float('nan'):.2f} | {rel} |")
    (out / "doctor_overhead.md").write_text("\n".join(lines) + "\n")
    print("\n".join(lines))


def tune(out: Path, dry: bool, log: list[str]) -> None:
    if dry:
        args = ["--model", "mlp:build", "--device", "cpu", "--start-batch", "16",
                "--max-batch", "64", "--steps", "3", "--target-global-batch", "256"]
    else:
        args = ["--model", "gpt:build", "--device", "cuda", "--start-batch", "4",
                "--max-batch", "256", "--steps", "5", "--target-global-batch", "512"]
    p = sh([sys.executable, "-m", "gpuaudit", "tune", *args, "--json"],
           cwd=ROOT / "examples" / "tune", timeout=400)
    log.append(f"tune rc={p.returncode}\n{p.stderr[-4000:]}")
    (out / "tune.json").write_text(p.stdout)
    print(p.stderr[-3000:])


def main() -> None:
    out = Path(sys.argv[1])
    out.mkdir(parents=True, exist_ok=True)
    dry = "--dry" in sys.argv
    parts = [a for a in sys.argv[2:] if not a.startswith("--")] or ["known", "overhead", "tune"]
    os.environ.setdefault("PYTHONPATH", str(ROOT / "src"))
    log: list[str] = []
    try:
        for part in parts:
            {"known": known, "overhead": overhead, "tune": tune}[part](out, dry, log)
    finally:
        (out / "doctor_log.txt").write_text("\n".join(log) + "\n")


if __name__ == "__main__":
    main()
