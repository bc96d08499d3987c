"""compare_runs on real H200 runs with planted changes: noise, direction, ranking, threshold,
findings appeared/cleared, machine and software differences."""

from __future__ import annotations

import pytest

from gpuaudit.compare import caveats, compare_runs, figure_key
from gpuaudit.model import RunStatus
from tests.support.reportkit import ONE_GPU, TWO_GPU, contended, figure, load, with_figure


def test_a_run_against_itself_changes_nothing():
    run = load(TWO_GPU)
    c = compare_runs(run, run)
    measured = [f for f in c.figures if f.a_value is not None]
    assert measured and all(f.verdict == "no change" and f.change_pct == 0 for f in measured)
    assert not c.failed and not c.regressions and not c.improvements
    assert c.differences == () and c.findings == ()
    assert len(c.figures) == len({figure_key(m) for m in run.measurements})


def test_a_drop_beyond_noise_and_threshold_fails_and_ranks_first():
    a = load(ONE_GPU)
    bf16 = figure(a, "matmul", "bf16")
    b = with_figure(with_figure(a, "matmul", "bf16", 0.90), "memory", "copy", 0.97)
    c = compare_runs(a, b, threshold_pct=5)
    worst = c.regressions[0]
    assert (worst.suite, worst.name) == ("matmul", "bf16")
    assert worst.change_pct == pytest.approx(-10.0)
    # The combined noise: half the range of A's repetitions plus half of B's (B's scaled by
    # 0.9): each figure's own spread.
    span = max(bf16.samples) - min(bf16.samples)
    assert worst.noise_pct == pytest.approx(100 * (span / 2 + 0.9 * span / 2) / bf16.value)
    assert worst.beyond_threshold and c.failed
    copy = next(f for f in c.regressions if f.name == "copy")
    assert copy.verdict == "regression" and not copy.beyond_threshold  # 3 % < 5 %
    assert [f.name for f in c.regressions] == ["bf16", "copy"]
    assert not compare_runs(a, b, threshold_pct=12).failed


def test_a_change_inside_the_spread_is_no_change():
    a = load(ONE_GPU)
    m = figure(a, "matmul", "bf16")
    half_iqr_pct = 50 * (max(m.samples) - min(m.samples)) / m.value
    b = with_figure(a, "matmul", "bf16", 1 - half_iqr_pct / 100 * 0.5)
    f = next(f for f in compare_runs(a, b, 0).figures if f.key == figure_key(m))
    assert f.verdict == "no change" and not f.beyond_threshold


def test_lower_latency_is_an_improvement():
    a = load(ONE_GPU)
    b = with_figure(a, "latency", "launch", 0.5)
    c = compare_runs(a, b)
    best = c.improvements[0]
    assert (best.suite, best.name, best.better) == ("latency", "launch", "lower")
    assert best.change_pct == pytest.approx(-50.0) and best.gain_pct == pytest.approx(50.0)
    slower = compare_runs(b, a)
    assert slower.regressions[0].name == "launch" and slower.failed


def test_findings_appear_and_clear():
    a = load(ONE_GPU)
    b = contended(a)
    appeared = compare_runs(a, b).findings
    assert [(f.code, f.change, f.gpu_index) for f in appeared] == [
        ("memory.in-use", "appeared", 0)]
    cleared = compare_runs(b, a).findings
    assert [(f.code, f.change) for f in cleared] == [("memory.in-use", "cleared")]


def test_other_machine_and_software_are_flagged():
    one, two = load(ONE_GPU), load(TWO_GPU)
    c = compare_runs(one, two)
    what = {d.what: d for d in c.differences}
    assert what["GPUs"].a == "1× NVIDIA H200" and what["GPUs"].b == "2× NVIDIA H200"
    assert what["GPUs"].kind == "machine" and "GPU serials/UUIDs" in what
    newer = two.machine.model_copy(update={"driver_version": "590.1"})
    d = {x.what: x for x in compare_runs(two, two.model_copy(update={"machine": newer}))
         .differences}
    assert set(d) == {"driver"} and d["driver"].kind == "software"
    assert (d["driver"].a, d["driver"].b) == ("580.159.04", "590.1")
    # Figures that exist only on the 2-GPU box are listed, not judged.
    p2p = [f for f in c.figures if f.suite == "p2p" and f.gpu_index == 0]
    assert p2p and all(f.verdict == "only in B" for f in p2p)


def test_caveats_say_partial_contended_noisy():
    # The recorded 1-GPU run has one noisy figure (fp16 burst: IQR 11 % of the median).
    (only,) = caveats(load(ONE_GPU))
    assert only.startswith("noisy: 1 figure(s)") and "matmul/fp16_burst" in only
    run = load(TWO_GPU)
    assert caveats(run) == ()
    partial = run.model_copy(update={"status": RunStatus.PARTIAL})
    assert caveats(partial)[0].startswith("partial:")
    text = " ".join(caveats(contended(run)))
    assert "contended" in text and "GPU 0" in text
    bf16 = figure(run, "matmul", "bf16")
    noisy = bf16.model_copy(update={"notes": ("noisy: IQR is 80% of the median",)})
    loud = run.model_copy(update={"measurements": (noisy,)})
    assert "noisy: 1 figure(s)" in caveats(loud)[0] and "matmul/bf16" in caveats(loud)[0]



# -- runs measured on a CPU -------------------------------------------------------------------

CPU_A, CPU_B = "cpu-bench-quick-a", "cpu-bench-quick-b"  # `gpuaudit bench` twice, back to back


def quiet(run, scale: dict[str, float] | None = None):
    """A copy of a CPU run as if nothing else had used the host (its recorded other load
    cleared), with some figures scaled: what a quiet CI machine would measure."""
    out = []
    for m in run.measurements:
        if "host_others_cores" in m.params:
            m = m.model_copy(update={"params": {**m.params, "host_others_cores": 0.0}})
        factor = (scale or {}).get(f"{m.suite}/{m.name}")
        if factor and m.value is not None:
            m = m.model_copy(update={"value": m.value * factor,
                                     "samples": tuple(x * factor for x in m.samples)})
        out.append(m)
    return run.model_copy(update={"measurements": tuple(out)})


def test_two_cpu_runs_back_to_back_are_not_a_regression():
    a, b = load(CPU_A), load(CPU_B)
    c = compare_runs(a, b)
    assert not c.failed and not c.regressions, [f.key for f in c.regressions]
    # the host was shared while they ran (other processes on ~1.1-1.5 of its 2 cores):
    # their CPU figures are not judged, and the compare says why
    busy = [f for f in c.figures if f.verdict == "host busy"]
    assert len(busy) == 57 and all(f.suite != "latency" for f in busy)
    # a peak found at another size is still the same figure
    assert not [f.key for f in c.figures if f.verdict.startswith("only in")]
    assert not any("GPU" in x for x in (*c.a.caveats, *c.b.caveats))
    assert any("host's CPUs" in x for x in (*c.a.caveats, *c.b.caveats))


def test_on_a_quiet_host_a_cpu_figure_is_judged_against_its_spread_and_the_floor():
    a = quiet(load(CPU_A))
    same = compare_runs(a, quiet(load(CPU_A), {"memory/copy": 0.85}))
    copy = next(f for f in same.figures if f.key.startswith("memory/copy"))
    assert copy.verdict == "no change" and copy.noise_pct >= 25  # -15 % inside the floor
    # its repetitions there ranged 3.5-9.0 GB/s: the noise is that wide; -70 % is beyond it
    slower = compare_runs(a, quiet(load(CPU_A), {"memory/copy": 0.3}))
    copy = next(f for f in slower.figures if f.key.startswith("memory/copy"))
    assert copy.verdict == "regression" and copy.beyond_threshold and slower.failed
