"""Time the cost commands as whole processes (start-up, imports, catalog, work, output)
against `python3 -c pass`, the floor any Python command pays.

Each command runs `--repeat` times after one warm-up, alternating with the baseline; the
median and range of each are printed, with the median of the pairwise differences (command −
baseline). Catalogs are synthetic (scripts/bench_recommend.py's real-catalog shapes) and
written to a temporary directory. Usage:

    python3 scripts/bench_cost_cli.py [--repeat 9]
"""

from __future__ import annotations

import argparse
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent))

from bench_recommend import synthetic_offers

from gpuaudit.cost.catalog import write_catalog


def run_once(argv: list[str], env: dict[str, str]) -> float:
    start = time.perf_counter()
    proc = subprocess.run(argv, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
                          text=True, check=False)
    took = time.perf_counter() - start
    if proc.returncode != 0:
        raise SystemExit(f"{' '.join(argv)} exited {proc.returncode}: {proc.stderr[-300:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeat", type=int, default=9)
    args = ap.parse_args()
    gpuaudit = shutil.which("gpuaudit") or "gpuaudit"
    with tempfile.TemporaryDirectory() as tmp:
        big, mid = Path(tmp) / "c10000.csv", Path(tmp) / "c2000.csv"
        write_catalog(synthetic_offers(10_000), big)
        write_catalog(synthetic_offers(2_000), mid)
        env = {**os.environ, "COLUMNS": "120", "GPUAUDIT_USER_CATALOG": str(Path(tmp) / "u")}
        cases = {
            "gpuaudit --help": [gpuaudit, "--help"],
            "catalog list, 2,000 offers": [gpuaudit, "catalog", "list", "--catalog", str(mid)],
            "recommend train 7B × 1T, 10,000 offers": [
                gpuaudit, "recommend", "train", "--params", "7B", "--tokens", "1T",
                "--catalog", str(big)],
            "recommend finetune 70B LoRA, 10,000 offers": [
                gpuaudit, "recommend", "finetune", "--params", "70B", "--catalog", str(big)],
            "recommend serve 70B 20 QPS, 10,000 offers": [
                gpuaudit, "recommend", "serve", "--params", "70B", "--qps", "20",
                "--latency-ms", "50", "--catalog", str(big)],
        }
        base_argv = [sys.executable, "-c", "pass"]
        load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
        print(f"{platform.node()} · {os.cpu_count()} CPUs · load {load:.2f} · Python "
              f"{platform.python_version()} · median of {args.repeat} (after 1 warm-up)")
        for label, argv in cases.items():
            run_once(argv, env)
            run_once(base_argv, env)
            cmd, base = [], []
            for _ in range(args.repeat):
                cmd.append(run_once(argv, env))
                base.append(run_once(base_argv, env))
            diff = statistics.median(c - b for c, b in zip(cmd, base, strict=True))
            print(f"{label}: {statistics.median(cmd) * 1e3:.0f} ms "
                  f"({min(cmd) * 1e3:.0f}–{max(cmd) * 1e3:.0f}); python3 -c pass "
                  f"{statistics.median(base) * 1e3:.0f} ms; difference {diff * 1e3:.0f} ms")


if __name__ == "__main__":
    main()
