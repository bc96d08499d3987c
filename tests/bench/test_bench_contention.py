"""Figures measured while something else used the GPU: found through NVML (replayed from the
real H200 recordings), marked contended, left out of spec and straggler judgements, and
`--exclusive` refusing to start."""

from __future__ import annotations

import json
import re
import sys

import pytest

from gpuaudit.bench import contention, runner
from gpuaudit.bench.contention import Watch, others
from gpuaudit.bench.stats import measure, skipped
from gpuaudit.errors import BadInputError
from gpuaudit.hw.telemetry_trace import TraceReplay
from gpuaudit.model import GpuSample, ProcessSample, Severity
from tests.conftest import FIXTURES, fixture_machine
from tests.support.bench import fake_suites

REAL = FIXTURES / "telemetry" / "real"
NEIGHBOUR = "/srv/torch/.venv/bin/python3 -c import torch a = torch.randn(8192, 8192"


def watch(trace: str | dict, *, skip: int = 0, own: set[int] | None = None,
          settle_s: float = contention.SETTLE_S) -> Watch:
    """A Watch over a real telemetry trace: each wait (settling, idle window) advances one
    tick."""
    doc = trace if isinstance(trace, dict) else json.loads((REAL / f"{trace}.json").read_text())
    src = TraceReplay(doc)
    w = Watch(src, [0], wait=lambda _: src.advance(), own_pids=lambda: own or set(),
              settle_s=settle_s)
    for _ in range(skip + 1):
        src.advance()
    return w


def noisy_run(monkeypatch, trace: str, skip: int = 0, **kw):
    """Two suites whose figures are those `gpuaudit run` printed beside the noisy neighbour
    (bf16 718.4 TFLOP/s, IQR 156.7–731.1; memory copy 4228 GB/s, IQR 3340–4231)."""
    def matmul(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [150.0, 156.7, 718.4, 731.1, 740.0],
                      warmup=10, spec_value=989.5, gpu_index=0, params={"device": "cuda"})

    def memory(ctx):
        yield measure("memory", "copy", "GB/s", [3000.0, 3340.0, 4228.0, 4231.0, 4240.0],
                      warmup=3, spec_value=4800.0, gpu_index=0)

    fake_suites(monkeypatch, {"matmul": matmul, "memory": memory})
    return runner.run_bench(["matmul", "memory"], machine=fixture_machine("h200-1gpu"),
                            watch=watch(trace, skip=skip), **kw)


def test_the_real_noisy_neighbour_makes_every_figure_contended(monkeypatch):
    # the recorded trace: another python3 runs a bf16 8192² matmul loop, holding 874 MiB
    run = noisy_run(monkeypatch, "h200-1gpu-matmul", skip=1)
    bf16, copy = run.measurements
    for m in (bf16, copy):
        assert m.contended and m.pct_of_spec is None and m.spec_value is not None
        (p,) = m.contention.processes
        assert (p.pid, p.gpu_index, p.used_memory_bytes) == (692, 0, 916455424)
        assert p.command.startswith(NEIGHBOUR)
        assert m.contention.activity_source == "gpm_sm_activity"
        assert m.contention.activity_pct > 90  # the neighbour's SMs, while we were idle
        assert m.notes[0].startswith("CONTENDED: measured while other work ran on the GPU")
    assert bf16.contention.spread_pct == pytest.approx(100 * (731.1 - 156.7) / 718.4, abs=0.1)
    assert copy.contention.spread_pct is None  # 21 %: not enough alone, the pid says it
    (f,) = run.findings
    assert (f.code, f.severity, f.gpu_index) == ("bench.contended", Severity.WARN, 0)
    assert "do not describe the server" in f.message and f.evidence["pids"] == "692"
    assert f.evidence["figures"] == 2 and run.verdict is Severity.WARN
    doc = json.loads(run.model_dump_json())
    assert doc["measurements"][0]["contention"]["processes"][0]["pid"] == 692


def test_an_idle_gpu_is_not_contended(monkeypatch):
    run = noisy_run(monkeypatch, "h200-1gpu-idle")
    bf16, copy = run.measurements
    assert not copy.contended and copy.pct_of_spec == pytest.approx(88.08, abs=0.01)
    # bf16's 80 % IQR alone still marks it (nothing else was seen)
    assert bf16.contended and bf16.contention.processes == ()
    assert "no other process seen" in bf16.contention.summary
    assert [f.code for f in run.findings] == ["bench.contended"]


def test_a_clean_idle_run_has_no_contention_at_all(monkeypatch):
    def steady(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [700.0, 702.0, 705.0, 706.0, 708.0],
                      warmup=10, spec_value=989.5, gpu_index=0)

    fake_suites(monkeypatch, {"matmul": steady})
    w = watch("h200-1gpu-idle")
    run = runner.run_bench(["matmul"], machine=fixture_machine("h200-1gpu"), watch=w)
    (m,) = run.measurements
    assert not m.contended and m.pct_of_spec is not None and run.findings == ()
    assert [lk.where for lk in w.looks] == ["before matmul", "after matmul"]


def test_our_own_kernels_counted_late_by_gpm_do_not_mark_a_clean_run(monkeypatch):
    # On an H200, GPM still counted a synchronized matmul burst in readings up to ~180 ms
    # after it (validation/bench/gpm_settle.py): a look right after a clean suite read 22-36 %.
    # Planted in a copy of the idle trace: the reading right after the suite shows 30 % SM activity.
    doc = json.loads((REAL / "h200-1gpu-idle.json").read_text())
    gpm = next(k for k in doc["frames"][3]["calls"] if k.startswith("gpm_metrics("))
    doc["frames"][3]["calls"][gpm]["value"]["2"] = 30.0

    def steady(ctx):
        yield measure("matmul", "bf16", "TFLOP/s", [700.0, 702.0, 705.0, 706.0, 708.0],
                      warmup=10, spec_value=989.5, gpu_index=0)

    fake_suites(monkeypatch, {"matmul": steady})
    settled = runner.run_bench(["matmul"], machine=fixture_machine("h200-1gpu"), watch=watch(doc))
    assert not settled.measurements[0].contended and settled.findings == ()
    # without the settling time the same readings mark it (the bug seen on the H200)
    hasty = runner.run_bench(["matmul"], machine=fixture_machine("h200-1gpu"),
                             watch=watch(doc, settle_s=0, skip=1))  # its window: frame 3
    (m,) = hasty.measurements
    assert m.contended and m.contention.activity_pct == 30.0
    assert [f.code for f in hasty.findings] == ["bench.contended"]


def idle_but_active_at(frame: int, pct: float = 84.0) -> dict:
    """The idle H200 trace with SM activity planted in one frame. Look k reads frames 2k,
    2k + 1 and 2k + 2 and takes activity from the last, so only look (frame - 2) / 2 sees it."""
    doc = json.loads((REAL / "h200-1gpu-idle.json").read_text())
    gpm = next(k for k in doc["frames"][frame]["calls"] if k.startswith("gpm_metrics("))
    doc["frames"][frame]["calls"][gpm]["value"]["2"] = pct
    return doc


def figures_of(*suites: str):
    """Fake suites: each named one yields a steady figure on GPU 0; p2p, collectives,
    storage and network yield only a skipped one, as they do on one GPU without a path or
    peer."""
    def steady(name):
        return lambda ctx: iter([measure(name, "x", "u/s", [100.0, 101.0, 102.0, 103.0, 104.0],
                                         warmup=1, gpu_index=0)])

    def empty(name):
        return lambda ctx: iter([skipped(name, "x", "u/s", "needs two GPUs")])

    return {n: steady(n) if n in suites else empty(n) for n in runner.SUITES}


def test_no_look_after_a_suite_that_measured_nothing(monkeypatch):
    fake_suites(monkeypatch, figures_of("matmul", "train"))
    w = watch("h200-1gpu-idle")
    run = runner.run_bench(["matmul", "p2p", "collectives", "train", "storage"],
                           machine=fixture_machine("h200-1gpu"), watch=w)
    # 3 looks, not 6: none before collectives or train (p2p and collectives measured
    # nothing since the look before p2p), none after storage
    assert [lk.where for lk in w.looks] == ["before matmul", "before p2p", "before storage"]
    assert [m.skipped for m in run.measurements] == [False, True, True, False, True]
    assert not any(m.contended for m in run.measurements)


def test_a_figure_after_empty_suites_is_judged_on_the_look_before_them(monkeypatch):
    # the only busy look is the first one, before p2p; the next is after train
    fake_suites(monkeypatch, figures_of("train"))
    w = watch(idle_but_active_at(2))
    run = runner.run_bench(["p2p", "collectives", "train"], machine=fixture_machine("h200-1gpu"),
                           watch=w)
    assert [lk.where for lk in w.looks] == ["before p2p", "after train"]
    assert [bool(lk.busy_gpus()) for lk in w.looks] == [True, False]
    train = next(m for m in run.measurements if m.suite == "train")
    assert train.contended and train.contention.activity_pct == 84.0
    assert [f.code for f in run.findings] == ["bench.contended"]


def test_a_figure_after_empty_suites_is_judged_on_the_look_right_after_it(monkeypatch):
    # busy only at the third look, the first after train (which ran after two empty suites)
    fake_suites(monkeypatch, figures_of("matmul", "train", "infer"))
    w = watch(idle_but_active_at(6))
    run = runner.run_bench(["matmul", "p2p", "collectives", "train", "infer"],
                           machine=fixture_machine("h200-1gpu"), watch=w)
    assert [lk.where for lk in w.looks] == ["before matmul", "before p2p", "before infer",
                                            "after infer"]
    assert [bool(lk.busy_gpus()) for lk in w.looks] == [False, False, True, False]
    marked = {m.suite: m.contended for m in run.measurements if not m.skipped}
    assert marked == {"matmul": False, "train": True, "infer": True}


def test_exclusive_refuses_a_busy_gpu_naming_the_process(monkeypatch):
    with pytest.raises(BadInputError) as err:
        noisy_run(monkeypatch, "h200-1gpu-matmul", skip=1, exclusive=True)
    line = str(err.value)
    assert "\n" not in line and line.startswith("--exclusive: the GPUs are busy: GPU 0: pid 692")
    assert NEIGHBOUR[:40] in line and "874 MiB" in line and "SM activity" in line
    # and an idle GPU is fine
    run = noisy_run(monkeypatch, "h200-1gpu-idle", exclusive=True)
    assert len(run.measurements) == 2


def test_exclusive_on_the_command_line_exits_2_with_one_line(monkeypatch, capsys):
    from gpuaudit.cli import app

    fake_suites(monkeypatch, {"latency": lambda ctx: iter(())})
    monkeypatch.setattr(runner, "_live_watch", lambda ctx, exclusive: watch(
        "ddp-2gpu-lm-bf16"))
    monkeypatch.setattr(sys, "argv", ["gpuaudit", "bench", "latency", "--exclusive",
                                      "--no-save"])
    import gpuaudit.hw as hw

    monkeypatch.setattr(hw, "take_snapshot", lambda: fixture_machine("h200-1gpu"))
    with pytest.raises(SystemExit) as code:
        app.main()
    assert code.value.code == 2
    # off a terminal the steps come as progress lines (`[   0s] looking for ...`); the
    # refusal itself is one line
    lines = [ln for ln in capsys.readouterr().err.strip().splitlines()
             if not re.match(r"\[ *\d+s\] ", ln)]
    assert len(lines) == 1 and "pid 3330 (python3 -u ./ddp-2gpu-lm-bf16.py" in lines[0]
    assert lines[0].startswith("gpuaudit: error: --exclusive")


def test_another_tenant_of_a_shared_gpu_is_named_even_in_a_container():
    def sample(*procs):
        return GpuSample(index=0, processes=tuple(ProcessSample(pid=p, command=c)
                                                  for p, c in procs))

    # our pid listed: everyone else is another process
    assert [p.pid for p in others([sample((10, "me"), (11, "them"))], {10})[0]] == [11]
    # NVML's pids from another namespace: one process we cannot see may be us...
    assert others([sample((5001, None))], {10}) == {}
    # ... a second one is not, nor one we can see and is not us
    assert [p.pid for p in others([sample((5001, None), (5002, None))], {10})[0]] == [5002]
    assert [p.pid for p in others([sample((5001, None), (7, "python3 x"))], {10})[0]] == [7]


def test_contended_figures_are_no_stragglers():
    fast = [measure("matmul", "bf16", "TFLOP/s", [790.0] * 5, warmup=0, gpu_index=g)
            for g in range(3)]
    slow = measure("matmul", "bf16", "TFLOP/s", [400.0] * 5, warmup=0, gpu_index=3)
    assert [f.code for f in runner.bench_findings([*fast, slow])] == ["bench.straggler"]
    marked = contention.contended(slow, contention.Contention(summary="x"))
    assert [f.code for f in runner.bench_findings([*fast, marked])] == ["bench.contended"]


def test_figures_of_no_one_gpu_take_every_gpus_evidence():
    busy = contention.Look(where="before collectives", activity={1: (84.0, "gpm_sm_activity")})
    m = measure("collectives", "all_reduce_busbw", "GB/s", [300.0] * 5, warmup=5,
                params={"op": "all_reduce", "size_bytes": 1 << 20})
    (marked,) = contention.mark([(0, m)], [busy], gpus=[0, 1])
    assert marked.contended and marked.contention.activity_pct == 84.0
    (clean,) = contention.mark([(0, m)], [busy], gpus=[0])
    assert not clean.contended
    f = contention.findings([marked])[0]
    assert f.gpu_index is None and "shared figures" in f.message


def test_host_figures_are_not_judged_on_the_gpus_looks():
    # A neighbour on the GPU says nothing about the disk, the NIC or the CPUs' JPEG decoding
    # (none of them carries "device": "cpu"; storage's "device" is the block device's name).
    # nvJPEG, on the GPU, is judged like any GPU figure.
    busy = contention.Look(where="before host", activity={0: (84.0, "gpm_sm_activity")})
    host = [measure("host", "jpeg_pil_all", "images/s", [3000.0] * 5, warmup=1),
            measure("storage", "seq_read", "GB/s", [1.3] * 5, warmup=0,
                    params={"device": "vda"}),
            measure("network", "tcp_send", "Gbit/s", [9.0] * 5, warmup=0)]
    nvjpeg = measure("host", "jpeg_nvjpeg", "images/s", [16000.0] * 5, warmup=1, gpu_index=0)
    marked = contention.mark([(0, m) for m in [*host, nvjpeg]], [busy], gpus=[0])
    assert [m.contended for m in marked] == [False, False, False, True]


def test_a_short_suite_shares_the_look_after_the_next_one(monkeypatch):
    """A look costs half a second; latency and memory take a fraction of one on an H200. Their
    figures are bracketed by the look before them and the one after the suite that follows."""
    import time

    def slow(name):
        def run(ctx):
            time.sleep(0.6)
            yield measure(name, "x", "u/s", [100.0, 101.0, 102.0, 103.0, 104.0], warmup=1,
                          gpu_index=0)
        return run

    fns = figures_of("latency", "memory")  # instant: short
    fns.update(matmul=slow("matmul"), transfer=slow("transfer"))
    fake_suites(monkeypatch, fns, look_every_s=0.3)
    # activity planted where only the look after transfer (the third) reads it
    w = watch(idle_but_active_at(6))
    run = runner.run_bench(["latency", "matmul", "memory", "transfer"],
                           machine=fixture_machine("h200-1gpu"), watch=w)
    assert [lk.where for lk in w.looks] == ["before latency", "before memory",
                                            "after transfer"]
    by = {m.suite: m for m in run.measurements}
    # memory ran between the second and the third look: it shares the third's evidence
    assert by["memory"].contended and by["transfer"].contended
    assert not by["latency"].contended and not by["matmul"].contended


def test_the_quick_profile_on_one_h200_takes_four_looks(monkeypatch):
    """The suites' times of a quick run on one H200 (2026-12-02): a look once the suites since
    the last one have measured LOOK_EVERY_S, so 4 looks of half a second, not 6."""
    took = {"latency": 0.3, "matmul": 12.71, "memory": 0.1, "transfer": 3.09, "train": 7.8,
            "infer": 4.73, "host": 6.02}
    now = [0.0]

    def timed(name):
        def run(ctx):
            now[0] += took[name]
            yield measure(name, "x", "u/s", [100.0, 101.0, 102.0, 103.0, 104.0], warmup=1,
                          gpu_index=0)
        return run

    fns = figures_of()
    fns.update({n: timed(n) for n in took})
    fake_suites(monkeypatch, fns)
    monkeypatch.setattr(runner, "LOOK_EVERY_S", 5.0)
    monkeypatch.setattr(runner.time, "perf_counter", lambda: now[0])
    w = watch("h200-1gpu-idle")
    runner.run_bench([], machine=fixture_machine("h200-1gpu"), watch=w)
    assert [lk.where for lk in w.looks] == ["before latency", "before memory", "before infer",
                                            "before storage"]


def test_the_first_look_is_taken_while_torch_loads(monkeypatch):
    import threading

    loading = threading.Thread(target=lambda: None)
    loading.start()
    monkeypatch.setattr(runner, "preload_torch", lambda names: loading)
    fake_suites(monkeypatch, figures_of("matmul"))
    steps: list[str] = []
    w = watch("h200-1gpu-idle")
    runner.run_bench(["matmul"], machine=fixture_machine("h200-1gpu"), watch=w, step=steps.append)
    assert steps[:3] == ["looking for other work on the GPUs before matmul", "loading torch",
                         "matmul"]
    assert [lk.where for lk in w.looks] == ["before matmul", "after matmul"]
