"""Tables for `validation/bench/fidelity.sh` (markdown, for docs/benchmarks.md).

  matmul BENCH_JSON PREC:GPU:MAMF_OUTPUT...   our burst (mean, median, max) and sustained beside
                                              mamf-finder's best, per precision
  collectives RUN_JSON                        ours beside nccl-tests per op and size, with its
                                              run-to-run spread over the repeated runs, one
                                              table per nccl-tests launch form
  times RUN_JSON                              each suite's wall time; the micro benchmarks' sum
  contended RUN_JSON yes|no                   which figures were marked contended, and whether
                                              that is what was expected (exit 1 if not)
  pageable OUT_JSON                           pageable copies: ours (the transfer suite,
                                              standard sizes, GPU 0) beside plain torch copy_
                                              at the same sizes, measured here (needs a GPU)
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

from gpuaudit.bench import fidelity as fid
from gpuaudit.model import load_run
from gpuaudit.parse import human_bytes
from gpuaudit.report.terminal import suite_times_line


def _f(x: float | None, fmt: str = ".1f") -> str:
    return "—" if x is None else format(x, fmt)


def matmul(bench_json: str, specs: list[str]) -> int:
    run = load_run(Path(bench_json).read_text())
    print("| precision | GPU | our shape | ours burst mean | median | max | ours sustained "
          "| mamf-finder best mean @ shape | its median / max | shapes it tried | "
          "ours/mamf (mean) | verdict |")
    print("| --- | ---: | --- | ---: | ---: | ---: | ---: | --- | --- | ---: | ---: | --- |")
    for spec in specs:
        prec, gpu, path = spec.split(":", 2)
        text = Path(path).read_text(errors="replace") if Path(path).is_file() else ""
        res = fid.parse_mamf(text)
        (row,) = fid.matmul_rows(run.measurements, {prec: res}, gpu_index=int(gpu))
        shape = "×".join(map(str, row.ours_shape)) if row.ours_shape else "—"
        mamf = (f"{res.best['mean'][0]:.1f} @ {'×'.join(map(str, res.best['mean'][1]))}"
                if res and "mean" in res.best else "no result")
        other = (f"{_f(res.best.get('median', (None,))[0])} / "
                 f"{_f(res.best.get('max', (None,))[0])}" if res else "—")
        print(f"| {prec} | {gpu} | {shape} | {_f(row.ours_mean)} | {_f(row.ours_median)} | "
              f"{_f(row.ours_max)} | {_f(row.ours_sustained)} | {mamf} | {other} | "
              f"{res.tried if res else '—'} | {_f(row.ratio, '.3f')} | {row.verdict} |")
    return 0


def collectives(run_json: str) -> int:
    """One table per nccl-tests launch form in the run (threads, group, mpi)."""
    run = load_run(Path(run_json).read_text())
    for launch in fid.reference_launches(run.measurements) or [None]:
        print(f"\n### against nccl-tests launched as {launch or '—'}\n")
        _collectives_table(fid.compare_collectives(run.measurements, launch))
    return 0


def _collectives_table(rows: list[fid.CollectiveRow]) -> None:
    print("| op | size | ours busbw | nccl-tests (median) | nccl-tests min–max (runs) | "
          "spread | column | ours/nccl | verdict |")
    print("| --- | ---: | ---: | ---: | --- | ---: | --- | ---: | --- |")
    for r in rows:
        spread = f"{r.spread_pct:.1f}%" if r.spread_pct is not None else "—"
        span = f"{_f(r.ref_low)}–{_f(r.ref_high)} ({r.ref_runs})" if r.ref_runs else "—"
        print(f"| {r.op} | {human_bytes(r.size_bytes)} | {_f(r.ours_gbps)} | {_f(r.ref_gbps)} "
              f"| {span} | {spread} | {r.column} | "
              f"{_f(r.ratio, '.3f')} | {r.verdict} |")
    met = sum(r.verdict.startswith("met") for r in rows)
    print(f"\n{met} of {len(rows)} (op, size) met: within {100 * fid.TOLERANCE:.0f}% of "
          "nccl-tests' median, or inside the range of its runs")


# The suites the quick profile's 60 s budget was set for; train/infer have their own (≤ 20 s)
MICRO = ("latency", "matmul", "memory", "transfer", "p2p", "collectives")


def times(run_json: str) -> int:
    """Where the wall time went, per suite, and the micro benchmarks' share."""
    run = load_run(Path(run_json).read_text())
    sec = run.suite_seconds
    groups = {"micro benchmarks": MICRO, "train + infer": ("train", "infer")}
    print(suite_times_line(sec))
    for label, names in groups.items():
        print(f"{label}: {sum(v for k, v in sec.items() if k in names):.1f} s")
    rest = sum(v for k, v in sec.items() if not any(k in g for g in groups.values()))
    print(f"the rest (host, storage, network): {rest:.1f} s")
    return 0


def contended(run_json: str, expect: str) -> int:
    run = load_run(Path(run_json).read_text())
    marked = [m for m in run.measurements if m.contended]
    measured = [m for m in run.measurements if m.value is not None]
    print(f"{len(marked)} of {len(measured)} figures marked contended; findings: "
          + (", ".join(f"{f.code} (GPU {f.gpu_index})" for f in run.findings
                       if f.code == "bench.contended") or "none"))
    for m in marked[:6]:
        print(f"  {m.suite}/{m.name} GPU {m.gpu_index}: {m.value:.4g} {m.unit}: "
              f"{m.contention.summary if m.contention else ''}"[:300])
    ok = bool(marked) == (expect == "yes")
    print(f"expected contended={expect}: {'as expected' if ok else 'NOT AS EXPECTED'}")
    return 0 if ok else 1


def _host_timed(torch: object, fn: object, iters: int) -> float:
    """Median seconds per call of fn() followed by a synchronize (after one untimed call)."""
    import statistics

    times = []
    for i in range(iters + 1):
        t0 = time.perf_counter()
        fn()  # type: ignore[operator]
        torch.cuda.synchronize()  # type: ignore[attr-defined]
        if i:
            times.append(time.perf_counter() - t0)
    return statistics.median(times)


def pageable(out_json: str) -> int:
    import torch

    if not torch.cuda.is_available():
        print("pageable: no GPU here")
        return 0
    from gpuaudit.bench.context import Profile
    from gpuaudit.bench.runner import run_bench

    run = run_bench(["transfer"], gpus=[0], profile=Profile.STANDARD)
    Path(out_json).write_text(run.model_dump_json(indent=1))
    ours = {(m.name, m.params.get("size_bytes")): m.value for m in run.measurements
            if m.value is not None and m.gpu_index == 0}
    print("| size | ours h2d `x.to('cuda')`, fresh data | plain h2d `copy_`, same tensor | "
          "ours d2h `y.cpu()`, new memory | plain d2h `copy_` into a reused buffer |")
    print("| ---: | ---: | ---: | ---: | ---: |")
    for size in (4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30):
        src = torch.empty(size, dtype=torch.uint8).fill_(7)
        dev = torch.empty(size, dtype=torch.uint8, device="cuda")
        back = torch.empty(size, dtype=torch.uint8)
        iters = max(3, min(30, (2 << 30) // size))
        h2d = size / _host_timed(torch, lambda d=dev, s=src: d.copy_(s), iters) / 1e9
        d2h = size / _host_timed(torch, lambda b=back, d=dev: b.copy_(d), iters) / 1e9
        print(f"| {human_bytes(size)} | {_f(ours.get(('h2d_pageable_by_size', size)), '.2f')} "
              f"| {h2d:.2f} | {_f(ours.get(('d2h_pageable_by_size', size)), '.2f')} | "
              f"{d2h:.2f} |")
        del src, dev, back
    reused = next((m.value for m in run.measurements if m.name == "d2h_pageable_reused"), None)
    print(f"\nours d2h into a reused buffer at the headline size: {_f(reused, '.2f')} GB/s")
    return 0


def main(argv: list[str]) -> int:
    cmd, *args = argv
    if cmd == "matmul":
        return matmul(args[0], args[1:])
    if cmd == "collectives":
        return collectives(args[0])
    if cmd == "contended":
        return contended(args[0], args[1])
    if cmd == "times":
        return times(args[0])
    if cmd == "pageable":
        return pageable(args[0])
    raise SystemExit(f"unknown table {cmd!r}: {__doc__}")


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
