"""The monitor's soak on a GPU machine: `gpuaudit monitor` with the exporter, the
shipped rules, history and `--record`, at 100 ms, while GPU jobs start, run DDP, die of out of
memory, are SIGKILLed and restart. Every few seconds: the monitor's resident memory, open files
and threads, and one scrape of /metrics. At the end: the monitor's exit code, the trace's and
the store's sample counts.

    python3 validation/monitor/soak.py OUT_DIR [--seconds 500] [--interval 100ms]

Writes OUT_DIR/soak.json (every reading) and prints a summary.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil

SAFE = {"NCCL_NVLS_ENABLE": "0", "TORCH_SYMM_MEM_DISABLE_MULTICAST": "1",
        "NVSHMEM_DISABLE_NVLS": "1"}
JOBS = [Path(__file__).with_name("jobs.py")]


def start(kind: str, gpus: str, log) -> subprocess.Popen:
    env = {**os.environ, **SAFE, "CUDA_VISIBLE_DEVICES": gpus}
    cmd = ([sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2",
            str(JOBS[0]), "ddp"] if kind == "ddp" else [sys.executable, str(JOBS[0]), kind])
    return subprocess.Popen(cmd, env=env, stdout=log, stderr=log, start_new_session=True)


def kill(p: subprocess.Popen | None) -> None:
    if p is not None and p.poll() is None:
        os.killpg(p.pid, signal.SIGKILL)
    if p is not None:
        p.wait()


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("out")
    ap.add_argument("--seconds", type=float, default=500)
    ap.add_argument("--interval", default="100ms")
    ap.add_argument("--port", type=int, default=9835)
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    scratch = Path(os.environ.get("VALIDATION_WORK") or tempfile.gettempdir())
    db = scratch / "soak-store.sqlite"
    db.unlink(missing_ok=True)
    trace = scratch / "soak-trace.jsonl"
    jobs_log = open(out / "soak-jobs.log", "w")  # noqa: SIM115 - kept for the whole run
    mon_log = open(out / "soak-monitor.log", "w")  # noqa: SIM115
    monitor = subprocess.Popen(
        [sys.executable, "-m", "gpuaudit", "monitor", "--interval", args.interval,
         "--record", str(trace), "--db", f"sqlite:///{db}", "--listen",
         f"127.0.0.1:{args.port}"],
        env={**os.environ, **SAFE}, stdout=subprocess.DEVNULL, stderr=mon_log)
    proc = psutil.Process(monitor.pid)
    readings, events = [], []
    t0 = time.monotonic()
    running: dict[str, subprocess.Popen | None] = {"gpu0": None, "gpu1": None, "ddp": None}

    def event(what: str) -> None:
        events.append({"t_s": round(time.monotonic() - t0, 1), "event": what})
        print(f"{events[-1]['t_s']:7.1f}s {what}", flush=True)

    # One 60 s cycle: both GPUs train; GPU 1's job is SIGKILLed and an OOM job takes its
    # place; GPU 0's job is SIGKILLed and DDP runs on both; DDP is SIGKILLed.
    schedule = [(0, "start lm gpu0+gpu1"), (20, "kill gpu1, start oom gpu1"),
                (35, "kill gpu0+gpu1, start ddp"), (55, "kill ddp")]
    done_steps: set[tuple[int, int]] = set()
    next_reading = 0.0
    while (now := time.monotonic() - t0) < args.seconds:
        if monitor.poll() is not None:
            event(f"MONITOR EXITED rc={monitor.returncode}")
            break
        cycle, at = divmod(now, 60)
        for offset, what in schedule:
            if at >= offset and (int(cycle), offset) not in done_steps:
                done_steps.add((int(cycle), offset))
                if offset == 0:
                    running["gpu0"] = start("lm", "0", jobs_log)
                    running["gpu1"] = start("lm", "1", jobs_log)
                elif offset == 20:
                    kill(running["gpu1"])
                    running["gpu1"] = start("oom", "1", jobs_log)
                elif offset == 35:
                    kill(running["gpu0"])
                    kill(running["gpu1"])
                    running["ddp"] = start("ddp", "0,1", jobs_log)
                else:
                    kill(running["ddp"])
                event(what)
        if now >= next_reading:
            next_reading += 5
            r = {"t_s": round(now, 1)}
            try:
                with proc.oneshot():
                    r["rss_mib"] = round(proc.memory_info().rss / 2**20, 1)
                    r["open_files"] = proc.num_fds()
                    r["threads"] = proc.num_threads()
                    r["cpu_s"] = round(sum(proc.cpu_times()[:2]), 2)
            except psutil.Error as exc:
                r["error"] = repr(exc)
            try:
                s = time.perf_counter()
                with urllib.request.urlopen(f"http://127.0.0.1:{args.port}/metrics",
                                            timeout=5) as resp:
                    body = resp.read()
                r["scrape_ms"] = round((time.perf_counter() - s) * 1000, 1)
                r["scrape_lines"] = body.count(b"\n")
            except OSError as exc:
                r["scrape_error"] = repr(exc)
            readings.append(r)
        time.sleep(0.2)
    for p in running.values():
        kill(p)
    if monitor.poll() is None:
        monitor.send_signal(signal.SIGINT)
        try:
            monitor.wait(timeout=30)
        except subprocess.TimeoutExpired:
            monitor.kill()
            event("monitor did not stop within 30 s of SIGINT")
    frames = max(0, len(trace.read_text().splitlines()) - 1) if trace.exists() else 0
    with sqlite3.connect(db) as conn:
        tables = [r[0] for r in conn.execute("select name from sqlite_master where type='table'")]
        counts = {t: conn.execute(f'select count(*) from "{t}"').fetchone()[0] for t in tables}
    rss = [r["rss_mib"] for r in readings if "rss_mib" in r]
    fds = [r["open_files"] for r in readings if "open_files" in r]
    summary = {
        "monitor_rc": monitor.returncode, "seconds": round(time.monotonic() - t0, 1),
        "interval": args.interval, "trace_frames": frames, "store_rows": counts,
        "rss_mib_first_min_max_last": [rss[0], min(rss), max(rss), rss[-1]] if rss else None,
        "rss_mib_after_60s_min_max": ([min(r["rss_mib"] for r in readings if r["t_s"] >= 60),
                                       max(r["rss_mib"] for r in readings if r["t_s"] >= 60)]
                                      if len(rss) > 12 else None),
        "open_files_min_max": [min(fds), max(fds)] if fds else None,
        "scrape_ms_max": max((r.get("scrape_ms", 0) for r in readings), default=None),
        "scrape_errors": sum("scrape_error" in r for r in readings),
        "monitor_log_tail": (out / "soak-monitor.log").read_text()[-3000:],
    }
    (out / "soak.json").write_text(json.dumps({"summary": summary, "events": events,
                                               "readings": readings}, indent=1))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main()
