"""Host↔device, GPU↔GPU and latency suites, PCIe rate math and the nvbandwidth reader.

On CPU: the pure helpers with exact values, the suites' no-GPU path, the nvbandwidth parsers on
real outputs (tests/fixtures/nvbandwidth/README.md says where each comes from) and run_native
against a stand-in executable. Tests marked `gpu` run the suites on the real devices.
"""

from __future__ import annotations

import json
import os
import stat
import sys

import pytest

from gpuaudit.bench import latency, nvbandwidth, p2p, transfer
from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.nvbandwidth import NvbRow, parse_nvbandwidth_json, parse_nvbandwidth_text
from gpuaudit.bench.pcie import below_max_note, link_rate_gbps
from gpuaudit.bench.stats import reason_of
from gpuaudit.model import LinkKind, Machine, PcieLink
from tests.conftest import FIXTURES, fixture_machine

NVB = FIXTURES / "nvbandwidth"
GEN5_X16 = 32 * 128 / 130 * 16 / 8  # 63.015 GB/s


def machine(name: str = "h200-2gpu") -> Machine:
    return fixture_machine(name)


def ctx_for(m: Machine, **kw) -> BenchContext:
    return BenchContext(machine=m, devices=(), **kw)


def with_link(m: Machine, **changes) -> Machine:
    (link,) = m.links
    return m.model_copy(update={"links": (link.model_copy(update=changes),)})


def with_pcie(m: Machine, index: int, **changes) -> Machine:
    gpus = tuple(g.model_copy(update={"pcie": g.pcie.model_copy(update=changes)})
                 if g.index == index else g for g in m.gpus)
    return m.model_copy(update={"gpus": gpus})


# ---- PCIe link rates ----

@pytest.mark.parametrize(("gen", "width", "expected"), [
    (1, 16, 4.0),  # 2.5 GT/s × 8/10 × 16 / 8
    (2, 16, 8.0),
    (3, 16, 15.753846153846155),
    (4, 16, 31.50769230769231),
    (5, 16, 63.01538461538462),
    (5, 8, 31.50769230769231),
    (4, 1, 1.9692307692307693),
    (6, 16, 121.0),  # 64 GT/s PAM4, FLIT 242/256
])
def test_pcie_link_rate_is_exact(gen, width, expected):
    assert link_rate_gbps(gen, width) == pytest.approx(expected, rel=1e-12)


def test_pcie_rates_people_quote():
    assert round(link_rate_gbps(5, 16), 3) == 63.015
    assert round(link_rate_gbps(4, 16), 1) == 31.5


@pytest.mark.parametrize(("gen", "width"), [(None, 16), (5, None), (0, 16), (9, 16), (5, 0)])
def test_unknown_pcie_link_has_no_rate(gen, width):
    assert link_rate_gbps(gen, width) is None


def test_note_when_link_below_its_max():
    assert below_max_note(PcieLink(gen_current=5, gen_max=5, width_current=16,
                                   width_max=16)) is None
    assert below_max_note(PcieLink(gen_max=5, width_max=16)) is None  # unknown: no claim
    note = below_max_note(PcieLink(gen_current=1, gen_max=5, width_current=8, width_max=16))
    assert note is not None and "Gen1 x8" in note and "Gen5 x16" in note


# ---- transfer helpers ----

def test_gbps_is_decimal():
    assert transfer.gbps(1 << 30, 0.5) == pytest.approx(2.147483648, rel=1e-12)
    with pytest.raises(ValueError):
        transfer.gbps(1, 0)


def test_concurrent_total_spans_first_start_to_last_end():
    windows = [[(0.0, 1.0), (10.0, 10.5)],  # GPU 0
               [(0.2, 2.0), (10.0, 11.0)]]  # GPU 1 finishes last
    assert transfer.aggregate_gbps(windows, [1_000_000_000, 3_000_000_000]) == [2.0, 4.0]


def test_concurrent_total_drops_when_one_gpu_is_slow():
    fast = transfer.aggregate_gbps([[(0.0, 1.0)], [(0.0, 1.0)]], [10**9, 10**9])
    shared = transfer.aggregate_gbps([[(0.0, 1.0)], [(0.0, 4.0)]], [10**9, 10**9])
    assert fast == [2.0] and shared == [0.5]


def test_concurrent_total_needs_one_window_list_per_gpu():
    with pytest.raises(ValueError):
        transfer.aggregate_gbps([[(0.0, 1.0)]], [1, 2])


def test_link_spec_from_the_snapshot():
    ctx = ctx_for(machine())
    assert transfer.link_spec(ctx, 0) == (pytest.approx(GEN5_X16), ())
    idle = ctx_for(with_pcie(machine(), 1, gen_current=1))
    rate, notes = transfer.link_spec(idle, 1)
    assert rate == pytest.approx(GEN5_X16)  # judged against the max, not the idle state
    assert len(notes) == 1 and "Gen1 x16" in notes[0]


def test_link_spec_falls_back_to_the_datasheet():
    blind = ctx_for(with_pcie(machine(), 0, gen_max=None, width_max=None))
    assert transfer.link_spec(blind, 0)[0] == pytest.approx(GEN5_X16)  # H200: Gen5 x16
    assert transfer.link_spec(ctx_for(machine()), 7) == (None, ())  # no such GPU


def test_numa_binding_only_with_several_nodes():
    m = machine()
    assert transfer.numa_cpus(m, m.gpus[0]) is None  # one NUMA node: nothing to place
    two = m.model_copy(update={"host": m.host.model_copy(update={"numa_nodes": 2})})
    assert transfer.numa_cpus(two, two.gpus[0]) == tuple(range(32))
    bare = two.gpus[0].model_copy(update={"cpu_affinity": None})
    assert transfer.numa_cpus(two, bare) is None
    assert transfer.numa_cpus(two, None) is None


@pytest.mark.skipif(not hasattr(os, "sched_setaffinity"), reason="Linux affinity API")
def test_on_cpus_binds_the_thread_and_restores_it():
    before = os.sched_getaffinity(0)
    one = min(before)
    with transfer.on_cpus([one]) as bound:
        assert bound and os.sched_getaffinity(0) == {one}
    assert os.sched_getaffinity(0) == before
    with transfer.on_cpus([10**6]) as bound:  # not a CPU we may use: left alone
        assert not bound and os.sched_getaffinity(0) == before
    with transfer.on_cpus(None) as bound:
        assert not bound


def test_reason_keeps_the_first_line_only():
    err = RuntimeError("CUDA out of memory. Tried to allocate 4.00 GiB\nlong advice")
    assert reason_of(err) == "RuntimeError: CUDA out of memory. Tried to allocate 4.00 GiB"


def test_profiles_size_the_host_buffers():
    sizes = [transfer.plan_for(ctx_for(machine(), profile=p)).nbytes
             for p in ("quick", "standard", "full")]
    assert sizes == [256 << 20, 1 << 30, 4 << 30]


def test_pageable_copies_at_the_sizes_people_copy():
    plans = [transfer.pageable_plan(ctx_for(machine(), profile=p))
             for p in ("quick", "standard", "full")]
    assert [pl.headline for pl in plans] == [256 << 20, 1 << 30, 4 << 30]
    assert plans[0].sizes == (4 << 20, 64 << 20, 256 << 20)
    assert plans[1].sizes == (4 << 20, 16 << 20, 64 << 20, 256 << 20, 1 << 30)
    assert all(pl.headline in pl.sizes for pl in plans)
    assert [pl.sweep_all_gpus for pl in plans] == [False, True, True]


def test_pageable_iterations_fill_the_time_within_bounds():
    from gpuaudit.bench.pageable import iterations

    assert iterations(64 << 20, 0.1) == 12  # 0.8 GB at 8 GB/s in 0.1 s: 12 copies of 64 MiB
    assert iterations(1 << 30, 0.1) == 3 and iterations(4 << 20, 0.3) == 40


def test_each_copy_reads_the_next_slice_of_the_ring():
    from gpuaudit.bench.pageable import ring_offsets

    mib = 1 << 20
    assert ring_offsets(4 * mib, 16 * mib, 6) == [0, 4 * mib, 8 * mib, 12 * mib, 0, 4 * mib]
    # a size larger than the ring is read from its start each time (it does not fit a cache)
    assert ring_offsets(1 << 30, 512 * mib, 3) == [0, 0, 0]
    offsets = ring_offsets(64 * mib, 512 * mib, 8)
    assert len(set(offsets)) == 8  # 8 copies, 8 different 64 MiB slices: none cache-hot


def test_the_headline_note_gives_the_rate_by_size():
    from gpuaudit.bench.pageable import size_note

    assert size_note([(4 << 20, 12.14), (1 << 30, 7.0)]) == "by size: 4 MiB 12.1, 1 GiB 7 GB/s"


# ---- p2p expected rates ----

def test_nv18_pair_expects_450_per_direction():
    ctx = ctx_for(machine())
    assert ctx.machine.link(0, 1).label == "NV18"
    assert p2p.expected_gbps(ctx, 0, 1) == 450.0
    assert p2p.expected_gbps(ctx, 1, 0) == 450.0
    assert p2p.expected_gbps(ctx, 0, 1, bidir=True) == 900.0


def test_fewer_nvlinks_expect_their_share():
    ctx = ctx_for(with_link(machine(), nvlink_count=9))
    assert p2p.expected_gbps(ctx, 0, 1) == 225.0


def test_pcie_pair_expects_the_link_rate():
    sys_path = ctx_for(with_link(machine(), kind=LinkKind.SYSTEM, nvlink_count=0))
    assert p2p.expected_gbps(sys_path, 0, 1) == pytest.approx(GEN5_X16)
    assert p2p.expected_gbps(sys_path, 0, 1, bidir=True) == pytest.approx(2 * GEN5_X16)
    # The slower GPU link bounds the path.
    slow = with_pcie(with_link(machine(), kind=LinkKind.PCIE_SWITCH, nvlink_count=0), 1,
                     gen_max=4)
    assert p2p.expected_gbps(ctx_for(slow), 0, 1) == pytest.approx(GEN5_X16 / 2)


def test_unknown_topology_has_no_expected_rate():
    m = machine()
    assert p2p.expected_gbps(ctx_for(m.model_copy(update={"links": ()})), 0, 1) is None
    assert p2p.per_direction_gbps(with_link(m, kind=None).links[0], None, [1.0]) is None
    assert p2p.per_direction_gbps(m.links[0], None, []) is None  # NVLink without a spec


# ---- the suites without a GPU ----

@pytest.mark.parametrize(("module", "names"), [
    (transfer, {"h2d_pinned", "d2h_pinned", "h2d_pageable", "d2h_pageable",
                "d2h_pageable_reused", "h2d_pinned_all_total", "d2h_pinned_all_total"}),
    (p2p, {"p2p_unidir", "p2p_bidir", "p2p_latency"}),
    (latency, {"launch", "launch_graph", "roundtrip"}),
])
def test_without_a_gpu_every_figure_is_skipped_with_a_reason(module, names):
    found = list(module.run(ctx_for(machine())))
    assert {m.name for m in found} == names
    assert {m.suite for m in found} == {module.SUITE}
    for m in found:
        assert m.skipped and m.value is None
        assert m.skipped_reason and len(m.skipped_reason) > 5


def test_p2p_says_it_needs_two_gpus():
    found = list(p2p.run(ctx_for(machine("h200-1gpu"))))
    assert all(m.skipped_reason.startswith("needs 2 or more GPUs") for m in found)
    assert {m.unit for m in found} == {"GB/s", "us"}


def test_cpu_only_torch_is_named_as_the_reason():
    torch = pytest.importorskip("torch")
    if torch.cuda.is_available():
        pytest.skip("CUDA is available here")
    (first, *_) = transfer.run(ctx_for(machine()))
    assert first.skipped_reason in (f"torch {torch.__version__} is a CPU-only build",
                                    "no CUDA device is visible to torch")


# ---- nvbandwidth parsers on real outputs ----

def cell(rows: list[NvbRow], testcase: str, r: int, c: int) -> NvbRow:
    return next(x for x in rows if x.testcase == testcase and (x.row, x.col) == (r, c))


def test_json_from_a_real_run():
    rows = parse_nvbandwidth_json((NVB / "dcgm_v0.5_1gpu.json").read_text())
    h2d = cell(rows, "host_to_device_memcpy_ce", 0, 0)
    assert (h2d.value, h2d.unit, h2d.status) == (12.3964, "GB/s", "Passed")
    assert h2d.sum == 12.396361291250001
    assert cell(rows, "device_to_host_memcpy_ce", 0, 0).value == 13.2001
    lat = cell(rows, "host_device_latency_sm", 0, 0)
    assert (lat.value, lat.unit) == (649.879, "ns")
    waived = next(x for x in rows if x.testcase == "device_to_device_memcpy_read_ce")
    assert (waived.status, waived.row, waived.value) == ("Waived", None, None)
    assert len({x.testcase for x in rows}) == 32


def test_json_with_warnings_around_it():
    body = (NVB / "dcgm_v0.5_1gpu.json").read_text()
    noisy = f"WARNING: lock busy {{\nWARNING: more {{{{}}}}}}\n{body}\nWARNING: done }}}}\n"
    assert parse_nvbandwidth_json(noisy) == parse_nvbandwidth_json(body)


def test_json_with_na_cells_and_errors():
    text = json.dumps({"nvbandwidth": {"testcases": [{
        "name": "device_to_device_memcpy_read_ce", "status": "Passed",
        "bandwidth_description": "memcpy CE GPU(row) <- GPU(column) bandwidth (GB/s)",
        "bandwidth_matrix": [["N/A", "371.5"], ["370.25", "N/A"]], "sum": 741.75}]}})
    rows = parse_nvbandwidth_json(text)
    assert [(x.row, x.col, x.value) for x in rows] == [
        (0, 0, None), (0, 1, 371.5), (1, 0, 370.25), (1, 1, None)]
    with pytest.raises(ValueError, match="invalid arguments"):
        parse_nvbandwidth_json('{"nvbandwidth": {"error": "invalid arguments"}}')
    with pytest.raises(ValueError):
        parse_nvbandwidth_json("nvbandwidth: command not found")


def test_text_from_a_real_two_gpu_run():
    rows = parse_nvbandwidth_text((NVB / "azure_nhc_v0.10_2gpu.txt").read_text())
    assert cell(rows, "host_to_device_memcpy_ce", 0, 1).value == 25.94
    assert cell(rows, "device_to_host_memcpy_ce", 0, 0).value == 25.97
    d2d = "device_to_device_memcpy_read_ce"
    assert cell(rows, d2d, 0, 1).value == 276.07
    assert cell(rows, d2d, 1, 0).value == 276.19
    assert cell(rows, d2d, 1, 1).value is None
    assert nvbandwidth.testcase_sums(rows) == {
        "host_to_device_memcpy_ce": 51.97, "device_to_host_memcpy_ce": 51.97, d2d: 552.26}
    assert len(rows) == 2 + 2 + 4


def test_text_matrix_without_its_running_line():
    rows = parse_nvbandwidth_text((NVB / "issue50_a6000_6gpu.txt").read_text())
    assert {x.testcase for x in rows} == {"device_to_device_memcpy_read_ce"}  # from SUM
    assert len(rows) == 36
    assert cell(rows, "device_to_device_memcpy_read_ce", 3, 5).value == 26.35
    assert cell(rows, "device_to_device_memcpy_read_ce", 5, 1).value == 22.67
    values = [x.value for x in rows if x.value is not None]
    assert len(values) == 30
    assert sum(values) == pytest.approx(715.53, abs=0.05)  # the SUM line, up to rounding


def test_text_waived_testcase():
    text = "Running device_to_device_memcpy_read_ce.\nWaived.\n\nRunning device_local_copy.\n"
    rows = parse_nvbandwidth_text(text)
    assert [(x.testcase, x.status) for x in rows] == [
        ("device_to_device_memcpy_read_ce", "Waived"), ("device_local_copy", "No result")]


# ---- nvbandwidth rows → our measurements ----

def test_nvbandwidth_rows_become_our_figures():
    ctx = ctx_for(machine())
    rows = parse_nvbandwidth_text((NVB / "azure_nhc_v0.10_2gpu.txt").read_text())
    found = {(m.suite, m.name, m.gpu_index, m.params.get("dst")): m
             for m in nvbandwidth.to_measurements(ctx, rows)}
    h2d = found[("transfer", "h2d_pinned", 1, None)]
    assert (h2d.value, h2d.unit) == (25.94, "GB/s")
    assert h2d.spec_value == pytest.approx(GEN5_X16)
    assert h2d.pct_of_spec == 41.16
    assert h2d.params["tool"] == "nvbandwidth"
    # Read test: row 0 read from column 1, so the data went GPU 1 → GPU 0.
    p = found[("p2p", "p2p_unidir", 1, 0)]
    assert (p.value, p.params["src"], p.spec_value, p.pct_of_spec) == (276.07, 1, 450.0, 61.35)
    assert len(found) == 6  # the diagonal N/A cells are not figures


def test_nvbandwidth_cuda_numbers_map_to_nvml():
    ctx = ctx_for(machine())
    rows = parse_nvbandwidth_text((NVB / "azure_nhc_v0.10_2gpu.txt").read_text())
    found = nvbandwidth.to_measurements(ctx, rows, {0: 1, 1: 0})
    h2d = {m.gpu_index: m.value for m in found if m.name == "h2d_pinned"}
    assert h2d == {1: 26.03, 0: 25.94}


def test_local_copy_counts_read_plus_write():
    ctx = ctx_for(machine("h200-1gpu"))
    row = NvbRow("device_local_copy", "Passed", 0, 0, 1558.0, "GB/s", 1558.0)
    (m,) = nvbandwidth.to_measurements(ctx, [row])
    assert (m.suite, m.name, m.value, m.spec_value) == ("memory", "copy", 3116.0, 4800.0)
    assert m.pct_of_spec == 64.92
    assert any("doubled" in n for n in m.notes)


def test_waived_and_na_become_skipped():
    ctx = ctx_for(machine("h200-1gpu"))
    rows = parse_nvbandwidth_json((NVB / "dcgm_v0.5_1gpu.json").read_text())
    found = nvbandwidth.to_measurements(ctx, rows)
    by_name = {m.name: m for m in found}
    assert set(by_name) == {"h2d_pinned", "d2h_pinned", "p2p_unidir"}
    assert by_name["p2p_unidir"].skipped_reason == (
        "nvbandwidth device_to_device_memcpy_read_ce: Waived")
    assert by_name["h2d_pinned"].value == 12.3964
    na = NvbRow("device_to_device_memcpy_read_ce", "Passed", 0, 1, None, "GB/s", 0.0)
    (m,) = nvbandwidth.to_measurements(ctx_for(machine()), [na])
    assert m.skipped and "N/A" in m.skipped_reason and m.params["src"] == 1


# ---- running nvbandwidth ----

def test_run_native_without_nvbandwidth(monkeypatch, tmp_path):
    monkeypatch.delenv(nvbandwidth.ENV_VAR, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    (m,) = nvbandwidth.run_native(ctx_for(machine()))
    assert m.skipped_reason == "nvbandwidth not found (set GPUAUDIT_NVBANDWIDTH or put it on PATH)"


def fake_tool(tmp_path, body: str):
    """A stand-in nvbandwidth: a Python script that records its argv and environment."""
    script = tmp_path / "nvbandwidth"
    script.write_text(f"#!{sys.executable}\n" + body)
    script.chmod(script.stat().st_mode | stat.S_IXUSR)
    return script


def test_run_native_runs_the_tool_and_maps_its_json(monkeypatch, tmp_path):
    out = NVB / "dcgm_v0.5_1gpu.json"
    seen = tmp_path / "seen.json"
    script = fake_tool(tmp_path, (
        "import json, os, sys\n"
        f"json.dump({{'argv': sys.argv[1:], 'nvls': os.environ.get('NCCL_NVLS_ENABLE')}}, "
        f"open({str(seen)!r}, 'w'))\n"
        f"print('WARNING: something'); print(open({str(out)!r}).read())\n"))
    monkeypatch.setenv(nvbandwidth.ENV_VAR, str(script))
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    found = list(nvbandwidth.run_native(ctx_for(machine("h200-1gpu"))))
    called = json.loads(seen.read_text())
    assert called["argv"] == ["-j", "-t", *nvbandwidth.TESTCASES]
    assert called["nvls"] == "0"  # the safe environment reached the tool
    h2d = next(m for m in found if m.name == "h2d_pinned")
    assert (h2d.value, h2d.gpu_index, h2d.params["tool"]) == (12.3964, 0, "nvbandwidth")
    missing = next(m for m in found if m.name == "copy")  # v0.5 had no device_local_copy
    assert missing.skipped_reason == "nvbandwidth did not report device_local_copy"


def test_run_native_times_out(monkeypatch, tmp_path):
    script = fake_tool(tmp_path, "import time\ntime.sleep(30)\n")
    monkeypatch.setenv(nvbandwidth.ENV_VAR, str(script))
    (m,) = nvbandwidth.run_native(ctx_for(machine(), timeout_s=0.5))
    assert m.skipped_reason == "nvbandwidth timed out after 0.5 s"


def test_run_native_reports_garbage(monkeypatch, tmp_path):
    script = fake_tool(tmp_path, "import sys\nprint('oops', file=sys.stderr)\nsys.exit(3)\n")
    monkeypatch.setenv(nvbandwidth.ENV_VAR, str(script))
    (m,) = nvbandwidth.run_native(ctx_for(machine()))
    assert m.skipped and "exit 3: oops" in m.skipped_reason


# ---- on real GPUs ----

def live_context():
    from gpuaudit.bench.runner import select_devices
    from gpuaudit.hw import take_snapshot

    m = take_snapshot()
    return BenchContext(machine=m, devices=select_devices(m, None))


@pytest.mark.gpu
@pytest.mark.parametrize("module", [transfer, latency, p2p])
def test_suite_on_real_gpus(module):
    ctx = live_context()
    if not ctx.on_gpu:
        pytest.skip("torch sees no CUDA device")
    found = list(module.run(ctx))
    measured = [m for m in found if not m.skipped]
    if module is p2p and len(ctx.devices) < 2:
        assert not measured
        return
    assert measured, [m.skipped_reason for m in found]
    for m in measured:
        assert m.value > 0 and m.verified is True, m
        if m.spec_value:  # a copy never beats its link
            assert m.value < 1.02 * m.spec_value, m
