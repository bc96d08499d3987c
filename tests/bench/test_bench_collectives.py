"""The collectives suite (torch.distributed, gloo on CPU here) and the nccl-tests wrapper."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path

import psutil
import pytest

from gpuaudit.bench import collectives as coll
from gpuaudit.bench import nccl_tests as nt
from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.errors import BadInputError
from gpuaudit.hw.torch_env import CudaDevice
from gpuaudit.model import LinkKind, Machine
from tests.conftest import fixture_machine

FIXTURES = Path(__file__).parents[1] / "fixtures"
NCCL_FIXTURES = FIXTURES / "nccl-tests"


def machine(name: str = "h200-1gpu") -> Machine:
    return fixture_machine(name)


def fake_devices(n: int) -> tuple[tuple[CudaDevice, int], ...]:
    return tuple((CudaDevice(cuda_index=i, name="NVIDIA H200", uuid=f"GPU-{i:04d}-test",
                             total_memory_bytes=150_000_000_000, multiprocessor_count=132,
                             l2_cache_bytes=50 << 20, capability=(9, 0)), i) for i in range(n))


def cpu_ctx(steps: list[str] | None = None, *, timeout_s: float = 60,
            size_range: tuple[int, int] = (1024, 4096), **options: object) -> BenchContext:
    return BenchContext(machine=machine(), devices=(), size_range=size_range,
                        timeout_s=timeout_s, options=dict(options),
                        step=steps.append if steps is not None else lambda _: None)


def worker_pids() -> list[int]:
    found = []
    for p in psutil.Process().children(recursive=True):
        try:
            if any("collectives_worker" in part for part in p.cmdline()):
                found.append(p.pid)
        except psutil.Error:
            continue
    return found


# --- definitions (nccl-tests doc/PERFORMANCE.md, src/<op>.cu) --------------------------------

@pytest.mark.parametrize(("op", "expected"), [
    ("all_reduce", {1: 0.0, 2: 1.0, 4: 1.5, 8: 1.75}),
    ("all_gather", {1: 0.0, 2: 0.5, 4: 0.75, 8: 0.875}),
    ("reduce_scatter", {1: 0.0, 2: 0.5, 4: 0.75, 8: 0.875}),
    ("all_to_all", {1: 0.0, 2: 0.5, 4: 0.75, 8: 0.875}),
    ("broadcast", {1: 1.0, 2: 1.0, 4: 1.0, 8: 1.0}),
])
def test_bus_factor_exact(op, expected):
    assert {n: coll.bus_factor(op, n) for n in expected} == expected


@pytest.mark.parametrize(("op", "per_rank_blocks"), [
    ("all_reduce", False), ("broadcast", False),
    ("all_gather", True), ("reduce_scatter", True), ("all_to_all", True),
])
@pytest.mark.parametrize("n", [1, 2, 4, 8])
def test_algbw_bytes_exact(op, per_rank_blocks, n):
    # nccl-tests: count × typesize, times nranks for the ops whose count is one rank's block
    assert coll.algbw_bytes(op, 1024, 4, n) == 4096 * (n if per_rank_blocks else 1)
    assert coll.algbw_bytes(op, 3, 2, n) == 6 * (n if per_rank_blocks else 1)


def test_unknown_op_is_an_error():
    with pytest.raises(ValueError):
        coll.bus_factor("all_reduce_typo", 2)
    with pytest.raises(ValueError):
        coll.algbw_bytes("gather", 1, 4, 2)


def test_sweep_counts_and_plan_match_nccl_tests_size_column():
    assert coll.size_sweep(8, 64) == [8, 16, 32, 64]
    assert coll.size_sweep(1 << 20, 256 << 20, 4) == [1 << 20, 4 << 20, 16 << 20, 64 << 20,
                                                      256 << 20]
    assert coll.size_sweep(5, 5) == [5]
    with pytest.raises(ValueError):
        coll.size_sweep(0, 8)
    # the GB300 all_gather fixture: 4096 B on 8 ranks is count 128 (per-rank block)
    assert coll.op_count("all_gather", 4096, 4, 8) == 128
    assert coll.op_count("all_reduce", 4096, 4, 8) == 1024
    # tiny sizes on 8 ranks round to the same count: measured once, never a 0-byte op
    items = coll.plan(["all_gather"], [8, 16, 32, 64, 128], 4, 8)
    assert [(i.count, i.size_bytes) for i in items] == [(1, 32), (2, 64), (4, 128)]


def test_default_sweeps_by_profile_and_override():
    gpu = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2))
    assert coll.sweep_range(gpu) == (1 << 20, 256 << 20, 4)
    std = BenchContext(machine=gpu.machine, devices=gpu.devices, profile=Profile.STANDARD)
    assert coll.sweep_range(std) == (8, 4 << 30, 2)
    full = BenchContext(machine=gpu.machine, devices=gpu.devices, profile=Profile.FULL)
    assert coll.sweep_range(full) == (8, 16 << 30, 2)
    assert coll.sweep_range(BenchContext(machine=gpu.machine, devices=gpu.devices,
                                         size_range=(64, 1024))) == (64, 1024, 2)
    _, hi, _ = coll.sweep_range(BenchContext(machine=machine(), devices=()))
    assert hi <= 4 << 20  # CPU: small, so CI stays fast
    assert coll.human_bytes(256 << 20) == "256 MiB" and coll.human_bytes(8) == "8 B"


def test_line_rate_is_half_the_nvlink_total_when_every_pair_is_nvlink():
    m = machine("h200-2gpu")
    assert m.link(0, 1).kind is LinkKind.NVLINK  # NV18 on the recorded box
    ctx = BenchContext(machine=m, devices=fake_devices(2))
    assert coll.line_rate_gbps(ctx) == 450.0  # 900 GB/s bidirectional datasheet figure / 2
    pcie = m.model_copy(update={"links": (m.links[0].model_copy(
        update={"kind": LinkKind.PCIE_HOST_BRIDGE, "nvlink_count": 0}),)})
    assert coll.line_rate_gbps(BenchContext(machine=pcie, devices=fake_devices(2))) is None
    assert coll.line_rate_gbps(BenchContext(machine=m, devices=fake_devices(1))) is None


def test_one_gpu_is_skipped_without_starting_workers():
    ctx = BenchContext(machine=machine(), devices=fake_devices(1))
    out = list(coll.run(ctx))
    assert [m.name for m in out] == [f"{op}_busbw" for op in coll.OPS]
    assert all(m.skipped and m.skipped_reason == "needs 2 or more GPUs" for m in out)


# --- nccl-tests output parser -----------------------------------------------------------------

def test_parse_h100_all_reduce():
    text = (NCCL_FIXTURES / "h100-16rank-all_reduce.txt").read_text()
    rows = nt.parse_nccl_tests(text)
    assert len(rows) == 31
    assert rows[0].size_bytes == 8 and rows[-1].size_bytes == 8 << 30
    r = next(r for r in rows if r.size_bytes == 2147483648)
    assert (r.count, r.dtype, r.redop, r.root) == (536870912, "float", "sum", -1)
    assert (r.time_us, r.algbw_gbps, r.busbw_gbps, r.wrong) == (12646.0, 169.81, 318.40, 0)
    assert (r.in_place_time_us, r.in_place_algbw_gbps, r.in_place_busbw_gbps,
            r.in_place_wrong) == (12641.0, 169.88, 318.52, 0)
    assert nt.avg_bus_bandwidth(text) == 70.742
    assert nt.out_of_bounds(text) == 0
    # the footer is the mean of every printed busbw, both columns (how nccl-tests computes it)
    busbw = [r.busbw_gbps for r in rows] + [r.in_place_busbw_gbps for r in rows]
    assert sum(busbw) / len(busbw) == pytest.approx(70.742, abs=1e-3)


def test_parse_single_spaced_all_gather():
    text = (NCCL_FIXTURES / "gb300-8rank-all_gather.txt").read_text()
    rows = nt.parse_nccl_tests(text)
    assert len(rows) == 23
    r = rows[-1]
    assert (r.size_bytes, r.count, r.redop, r.busbw_gbps, r.in_place_busbw_gbps) == (
        17179869184, 536870912, "none", 357.13, 373.54)
    # the size column is our algbw bytes: count is one rank's block on 8 ranks
    assert coll.algbw_bytes("all_gather", r.count, 4, 8) == r.size_bytes
    assert nt.avg_bus_bandwidth(text) == 146.047


def test_parse_per_iteration_columns_na_and_timestamps():
    text = (NCCL_FIXTURES / "constructed-2gpu-reduce_scatter-I1-c0.txt").read_text()
    rows = nt.parse_nccl_tests(text)
    assert [r.size_bytes for r in rows] == [1 << 20, 4 << 20, 16 << 20, 64 << 20, 256 << 20]
    r = rows[-1]
    assert (r.time_us, r.algbw_gbps, r.busbw_gbps) == (781.40, 343.53, 171.77)
    assert (r.in_place_time_us, r.in_place_busbw_gbps) == (779.80, 172.12)
    assert r.wrong is None and r.in_place_wrong is None  # "N/A": run with -c 0
    assert nt.avg_bus_bandwidth(text) == 105.985


def test_parse_older_layouts_and_noise():
    text = "\n".join([
        "NCCL INFO comm 0x7f rank 0 nranks 2 - Init COMPLETE",
        "#       size         count    type   redop     time   algbw   busbw  error",
        # before the root column (2019): redop, then the blocks; error printed as %g
        "     1048576        262144   float     sum    100.0   10.49   18.35  0e+00"
        "    101.0   10.38   18.17  0e+00",
        # mpirun --tag-output prefix
        "[1,0]<stdout>:     2097152        524288     float     sum      -1    200.0   10.49"
        "   18.35      3    201.0   10.43   18.26      0",
        "# Out of bounds values : 1 FAILED",
    ])
    rows = nt.parse_nccl_tests(text)
    assert [(r.size_bytes, r.root, r.wrong) for r in rows] == [(1048576, None, 0),
                                                               (2097152, -1, 3)]
    assert nt.out_of_bounds(text) == 1 and nt.avg_bus_bandwidth(text) is None


# --- nccl-tests runner (a stand-in binary: no GPU needed to run a program) ---------------------

def test_run_native_not_found_and_too_few_gpus(monkeypatch, tmp_path):
    monkeypatch.setenv(nt.ENV_DIR, str(tmp_path))
    monkeypatch.setenv("PATH", str(tmp_path))
    two = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2))
    out = list(nt.run_native(two))
    assert len(out) == 5 and all(m.skipped_reason == nt.NOT_FOUND for m in out)
    one = BenchContext(machine=machine(), devices=fake_devices(1))
    assert all(m.skipped_reason == "needs 2 or more GPUs" for m in nt.run_native(one))


def fake_all_reduce_perf(folder: Path, record: str) -> Path:
    """A stand-in all_reduce_perf in `folder`: runs the Python line `record` (json, os and
    sys imported), then prints the recorded H100 table."""
    fake = folder / "all_reduce_perf"
    table = str(NCCL_FIXTURES / "h100-16rank-all_reduce.txt")
    fake.write_text("#!/usr/bin/env python3\nimport json, os, sys\n" + record + "\n"
                    f"sys.stdout.write(open({table!r}).read())\n")
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    return fake


def test_run_native_runs_parses_and_passes_safe_env(monkeypatch, tmp_path):
    log = tmp_path / "call.json"
    fake_all_reduce_perf(
        tmp_path, f"json.dump({{'argv': sys.argv[1:], 'env': dict(os.environ)}}, "
                  f"open({str(log)!r}, 'w'))")
    monkeypatch.setenv(nt.ENV_DIR, str(tmp_path))
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    monkeypatch.setattr(nt.shutil, "which", lambda name: None)  # only the stand-in exists
    ctx = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2),
                       size_range=(8, 8 << 30))
    out = list(nt.run_native(ctx))
    ar = [m for m in out if m.name == "all_reduce_busbw"]
    assert len(ar) == 31
    assert all(m.params["tool"] == "nccl-tests" and m.verified is True for m in ar)
    big = ar[-1]
    assert (big.value, big.params["size_bytes"], big.params["algbw_gbps"]) == (338.82, 8 << 30,
                                                                               180.71)
    assert big.spec_value == 450.0 and big.pct_of_spec == pytest.approx(75.29, abs=0.01)
    peak = next(m for m in out if m.name == "all_reduce_busbw_peak")
    assert peak.value == 338.82
    skipped = [m for m in out if m.skipped]
    assert {m.params["op"] for m in skipped} == {"all_gather", "reduce_scatter", "all_to_all",
                                                  "broadcast"}
    call = json.loads(log.read_text())
    assert call["argv"][:10] == ["-g", "2", "-b", "8", "-e", str(8 << 30), "-f", "2", "-c", "1"]
    assert call["env"]["NCCL_NVLS_ENABLE"] == "0"  # through apply_safe_env
    assert call["env"]["CUDA_VISIBLE_DEVICES"] == "GPU-0000-test,GPU-0001-test"
    lib = nt._pip_nccl_lib()  # torch's NCCL wheel, where a source build of nccl-tests links
    assert lib is None or call["env"]["LD_LIBRARY_PATH"].split(os.pathsep)[-1] == lib


def test_run_native_repeated_gives_each_run_its_number(monkeypatch, tmp_path):
    calls = tmp_path / "calls"
    fake_all_reduce_perf(tmp_path, f"open({str(calls)!r}, 'a').write('x')")
    monkeypatch.setenv(nt.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(nt.RUNS_ENV, "3")
    monkeypatch.setenv(nt.ITERS_ENV, "100")
    monkeypatch.setattr(nt.shutil, "which", lambda name: None)
    ctx = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2),
                       size_range=(8, 8 << 30), options={"ops": ["all_reduce"]})
    out = [m for m in nt.run_native(ctx) if m.params.get("op") == "all_reduce"]
    assert calls.read_text() == "xxx"
    rows = [m for m in out if m.name == "all_reduce_busbw"]
    assert [sum(m.params["run"] == r for m in rows) for r in (1, 2, 3)] == [31, 31, 31]
    assert {m.params["iters"] for m in rows} == {100}  # -n 100
    assert len([m for m in out if m.name == "all_reduce_busbw_peak"]) == 3


def test_run_native_wrong_elements_mark_the_row_unverified(monkeypatch, tmp_path):
    text = (NCCL_FIXTURES / "h100-16rank-all_reduce.txt").read_text().replace(
        "12646  169.81  318.40      0", "12646  169.81  318.40      7")
    src = tmp_path / "out.txt"
    src.write_text(text)
    fake = tmp_path / "all_reduce_perf"
    fake.write_text(f"#!/bin/sh\ncat {src}\nexit 1\n")  # nccl-tests fails the run on errors
    fake.chmod(fake.stat().st_mode | stat.S_IXUSR)
    monkeypatch.setenv(nt.ENV_DIR, str(tmp_path))
    monkeypatch.setattr(nt.shutil, "which", lambda name: None)
    ctx = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2))
    ar = [m for m in nt.run_native(ctx) if m.params.get("op") == "all_reduce"]
    bad = [m for m in ar if m.verified is False]
    assert [m.params["size_bytes"] for m in bad] == [2147483648]
    assert not any(m.skipped for m in ar)  # the exit status is explained by the wrong row


# --- timing: batches of back-to-back ops, as nccl-tests times them -----------------------------

def test_time_per_op_is_the_batch_over_its_ops():
    from gpuaudit.bench.collectives_worker import per_op_seconds

    # nccl-tests all_reduce 1 MiB on the H200s: 20 ops in 0.3056 ms → 15.28 µs per op
    assert per_op_seconds([0.3056, 0.4], 20) == pytest.approx([15.28e-6, 20e-6])
    with pytest.raises(ValueError):
        per_op_seconds([1.0], 0)


def test_the_hold_covers_the_hosts_queueing_of_the_whole_batch():
    from gpuaudit.bench.timing import HOLD_MARGIN_US, hold_us

    # 21 ops (the aligning op + 20 timed) at 30 µs of Python each: 630 µs to queue
    assert hold_us(30.0, 21) == pytest.approx(2 * 630 + HOLD_MARGIN_US)
    assert hold_us(0.0, 21) > 21  # a host too fast to measure still gets a hold
    assert hold_us(30.0, 101) > hold_us(30.0, 21)


def test_the_spins_clock_leaves_out_its_first_launch_and_a_rising_clock(monkeypatch):
    """A simulated device whose spin kernel's first launch loads its module for 40 ms (the
    event before it has fired) and whose clock runs at 900 cycles a µs until its first spin
    ends, 1,980 after: the clock measured is the running one, where a first spin timed alone
    counted 1M cycles in 41.1 ms (24 a µs: holds 80× shorter than counted)."""
    import types

    from gpuaudit.bench import timing

    class Dev:
        now = 0.0  # ms, the device's clock
        loaded = False
        clock = 900.0

    class Event:
        def __init__(self, enable_timing=False):
            self.at = 0.0

        def record(self):
            self.at = Dev.now

        def synchronize(self):
            pass

        def elapsed_time(self, other):
            return other.at - self.at

    def sleep(cycles):
        if not Dev.loaded:
            Dev.now += 40.0
            Dev.loaded = True
        Dev.now += cycles / Dev.clock / 1e3
        Dev.clock = 1980.0

    cuda = types.SimpleNamespace(current_device=lambda: 7, _sleep=sleep, Event=Event,
                                 synchronize=lambda: None)
    monkeypatch.setattr(timing, "_SPIN_CYCLES_PER_US", {})
    assert timing.spin_cycles_per_us(types.SimpleNamespace(cuda=cuda)) == pytest.approx(1980.0)


# --- the suite end to end on CPU (gloo, real processes) -----------------------------------------

def test_cpu_gloo_end_to_end():
    pytest.importorskip("torch")
    steps: list[str] = []
    out = list(coll.run(cpu_ctx(steps)))
    per_size = [m for m in out if not m.name.endswith("_peak")]
    assert not [m for m in out if m.skipped], [m.skipped_reason for m in out if m.skipped]
    for op in coll.OPS:
        rows = [m for m in per_size if m.name == f"{op}_busbw"]
        assert [m.params["size_bytes"] for m in rows] == [1024, 2048, 4096]
        for m in rows:
            assert m.verified is True and m.value > 0 and m.unit == "GB/s"
            assert m.gpu_index is None and len(m.samples) == 5 and m.warmup == 2
            assert (m.params["ops_per_batch"], m.params["batches"]) == (5, 5)
            assert {k: m.params[k] for k in ("op", "dtype", "ranks", "backend", "wrong")} == {
                "op": op, "dtype": "float32", "ranks": 2, "backend": "gloo", "wrong": 0}
            # busbw = algbw × the nccl-tests factor, algbw = bytes / time (medians of samples)
            assert m.params["busbw_factor"] == coll.bus_factor(op, 2)
            assert m.value == pytest.approx(m.params["algbw_gbps"] * coll.bus_factor(op, 2),
                                            rel=1e-5)
            t_range = [m.params["size_bytes"] / (b / coll.bus_factor(op, 2)) / 1e3
                       for b in (m.spread_high, m.spread_low)]  # µs at the IQR's ends
            assert t_range[0] <= m.params["time_us"] <= t_range[1]
            assert m.params["in_place"] is (op in ("all_reduce", "broadcast"))
        peak = next(m for m in out if m.name == f"{op}_busbw_peak")
        assert peak.value == max(m.value for m in rows) and peak.params["sizes_measured"] == 3
    assert "collectives all_reduce 1 KiB" in steps and len(steps) == 15
    assert worker_pids() == []


def test_cpu_three_ranks_odd_sizes_bf16_check_exactly():
    pytest.importorskip("torch")
    # 3 ranks and a size that is no multiple of 3 blocks nor of the pattern period: the offsets
    # of reduce-scatter and all-to-all blocks are exercised; bf16 sums stay exact
    ctx = cpu_ctx(cpu_ranks=3, dtype="bfloat16", size_range=(65536, 65536), iters=3)
    out = [m for m in coll.run(ctx) if not m.name.endswith("_peak")]
    assert len(out) == 5 and all(m.verified is True for m in out), [m.notes for m in out]
    a2a = next(m for m in out if m.name == "all_to_all_busbw")
    assert a2a.params["size_bytes"] == 65532 and a2a.params["ranks"] == 3  # 10922 × 2 B × 3


def test_planted_wrong_result_is_not_verified():
    pytest.importorskip("torch")
    out = list(coll.run(cpu_ctx(corrupt_rank=1, ops=["all_reduce", "all_gather"])))
    rows = [m for m in out if not m.name.endswith("_peak")]
    assert len(rows) == 6
    assert all(m.verified is False and m.params["wrong"] == 1 for m in rows)
    assert all(any("wrong" in n for n in m.notes) for m in rows)


def test_hung_collective_times_out_and_keeps_what_finished():
    pytest.importorskip("torch")
    # 10 s: the first size also pays for starting the workers (torch, gloo), which takes
    # seconds on a loaded 2-core machine; the hang is at the second size.
    ctx = cpu_ctx(hang_rank=1, hang_at=1, ops=["all_reduce", "broadcast"], timeout_s=10)
    started = time.monotonic()
    out = list(coll.run(ctx))
    assert time.monotonic() - started < 10 + 20
    first, *rest = [m for m in out if not m.name.endswith("_peak")]
    assert first.verified is True and first.params["size_bytes"] == 1024
    assert len(rest) == 5
    assert all(m.skipped_reason == "timed out after 10 s (hung collective?)" for m in rest)
    assert worker_pids() == []


def test_worker_crash_gives_its_error_as_the_reason():
    pytest.importorskip("torch")
    out = list(coll.run(cpu_ctx(crash_rank=1, hang_at=0, ops=["reduce_scatter"])))
    assert len(out) == 3 and all(m.skipped for m in out)
    assert all("RuntimeError: planted crash" in (m.skipped_reason or "") for m in out)


def test_stopping_the_consumer_kills_the_workers():
    pytest.importorskip("torch")
    gen = coll.run(cpu_ctx(hang_rank=0, hang_at=1, timeout_s=120))
    first = next(gen)  # measured; the workers now hang on the next size
    assert first.verified is True and worker_pids()
    gen.close()  # what Ctrl-C in the consumer does to the generator (finally: kill)
    assert worker_pids() == []


def test_launch_forms_and_their_command_lines():
    assert nt.launch_command("threads", "/x/all_reduce_perf", 4) == [
        "/x/all_reduce_perf", "-t", "4", "-g", "1"]
    assert nt.launch_command("group", "/x/all_reduce_perf", 4) == ["/x/all_reduce_perf", "-g", "4"]
    assert nt.launch_command("mpi", "/m/all_reduce_perf", 2, "/usr/bin/mpirun") == [
        "/usr/bin/mpirun", "-np", "2", "/m/all_reduce_perf", "-g", "1"]
    ctx = BenchContext(machine=machine(), devices=(),
                       options={"native_launch": "group,threads,group"})
    assert nt.launches(ctx) == ["group", "threads"]
    with pytest.raises(BadInputError, match=r"fast.*threads, group, mpi"):
        nt.preflight(BenchContext(machine=machine(), devices=(),
                                  options={"native_launch": "threads,fast"}))


def test_run_native_runs_each_launch_form_and_labels_its_figures(monkeypatch, tmp_path):
    calls = tmp_path / "calls.jsonl"
    fake_all_reduce_perf(
        tmp_path, f"open({str(calls)!r}, 'a').write(json.dumps(sys.argv[1:]) + '\\n')")
    monkeypatch.setenv(nt.ENV_DIR, str(tmp_path))
    monkeypatch.setenv(nt.LAUNCH_ENV, "threads,group,mpi")
    monkeypatch.delenv(nt.MPI_DIR_ENV, raising=False)
    monkeypatch.setattr(nt.shutil, "which", lambda name: None)
    ctx = BenchContext(machine=machine("h200-2gpu"), devices=fake_devices(2),
                       size_range=(8, 8 << 30), options={"ops": ["all_reduce"]})
    out = [m for m in nt.run_native(ctx) if m.params.get("op") == "all_reduce"]
    argv = [json.loads(x) for x in calls.read_text().splitlines()]
    assert [a[:4] for a in argv] == [["-t", "2", "-g", "1"], ["-g", "2", "-b", "8"]]
    rows = [m for m in out if m.name == "all_reduce_busbw"]
    assert [sum(m.params["launch"] == f for m in rows) for f in ("threads", "group")] == [31, 31]
    (mpi,) = [m for m in out if m.params.get("launch") == "mpi"]
    assert mpi.skipped and nt.MPI_DIR_ENV in mpi.skipped_reason


def test_bad_launch_form_is_refused_before_anything_runs(monkeypatch):
    from gpuaudit.bench import runner

    monkeypatch.setenv(nt.LAUNCH_ENV, "fast")
    monkeypatch.setattr(runner, "suite", lambda name: pytest.fail("must not measure"))
    with pytest.raises(BadInputError, match="nccl-tests launch fast"):
        runner.run_bench(["collectives"], machine=machine())


def test_the_mpi_form_takes_only_the_mpi_build(monkeypatch, tmp_path):
    plain = tmp_path / "plain"
    plain.mkdir()
    (plain / "all_reduce_perf").write_text("#!/bin/sh\n")
    (plain / "all_reduce_perf").chmod(0o755)
    monkeypatch.setenv("PATH", str(plain))  # a build without MPI on PATH must not be used
    monkeypatch.delenv(nt.MPI_DIR_ENV, raising=False)
    exe, why = nt._binary("all_reduce_perf", "mpi", "/usr/bin/mpirun")
    assert exe is None and nt.MPI_DIR_ENV in why
    mpi = tmp_path / "mpi"
    mpi.mkdir()
    monkeypatch.setenv(nt.MPI_DIR_ENV, str(mpi))
    assert nt._binary("all_reduce_perf", "mpi", "/usr/bin/mpirun")[0] is None
    (mpi / "all_reduce_perf").write_text("#!/bin/sh\n")
    (mpi / "all_reduce_perf").chmod(0o755)
    assert nt._binary("all_reduce_perf", "mpi", "/usr/bin/mpirun") == (
        str(mpi / "all_reduce_perf"), "")
    assert nt._binary("all_reduce_perf", "mpi", None) == (None, "mpirun not found (launch mpi)")
    assert nt._binary("all_reduce_perf", "group", None)[0] == str(plain / "all_reduce_perf")
