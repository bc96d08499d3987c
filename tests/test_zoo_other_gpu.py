"""The model zoo recorded on a second GPU model (an H100, `predict-zoo-h100`): its published
counts, its tables without a set it did not record, and docs/predict.md's reading of the
bf16 step's held host work in the two recording processes."""

from __future__ import annotations

import json
import statistics
from pathlib import Path

import pytest

from tests.support.predict import h100_rates, zoo_run
from validation.predict.held_pace import autocast
from validation.predict.zoo_tables import current, current_cases

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "predict"
H100 = FIXTURES / "zoo-results-h100.json"


def test_the_h100_recordings_are_held_out_families_each_with_every_case():
    """docs/predict.md: the fourteen held-out families, 86 of 98 cases within 10 %, 96
    inside their band; the five development families apart, 32 of 35 within 10 %, 33 in
    band."""
    rows = json.loads(H100.read_text())["rows"]
    manifest = json.loads((ROOT / "examples" / "predict" / "zoo" / "manifest.json")
                          .read_text())
    now = current(rows)
    held = {fam for w, fam in now if w == "held_out"}
    # families declared since the last recording wait for theirs
    assert held <= {f["family"] for f in manifest["held_out"]} and len(held) == 14
    assert {fam for w, fam in now if w == "development"} == {
        "ResNet-18 at 64 px (batch norm)", "deep MLP (tabular)",
        "GPT with hand-written attention", "ViT-B/16 (nn.TransformerEncoder, pre-norm)",
        "GRU language model"}

    def scored(which: str) -> list[dict]:
        return [r for (w, fam), rec in now.items() if w == which for r in rows
                if r["family"] == fam and r.get("recording") == rec and "error_pct" in r]

    held_rows, dev_rows = scored("held_out"), scored("development")
    assert len(held_rows) == 98 and len(dev_rows) == 35
    assert sum(abs(r["error_pct"]) <= 10 for r in held_rows) == 86
    # out of band, both on the 24th: the MoE's smaller batch and larger model, its bf16
    # source at its profiled pace in 1 round of 20, every case predicted slower than
    # measured. ConvNeXt's 24th (its bf16 source at its profiled pace in no round) missed
    # from bf16 twice; its 25th, in 9 of 32 rounds, has all 7 within 10 % and in band
    missed = [(r["family"].split()[0], r["case"], r["recording"]) for r in held_rows
              if not r["in_band"]]
    assert missed == [("mixture-of-experts", "batch ×0.5", "twenty-fourth"),
                      ("mixture-of-experts", "size", "twenty-fourth")]
    convnext = [r for r in held_rows if r["family"] == "ConvNeXt"]
    assert {r["recording"] for r in convnext} == {"twenty-fifth"}
    assert all(abs(r["error_pct"]) <= 10 for r in convnext)
    assert all(r["error_pct"] < 0 for r in held_rows
               if r["recording"] == "twenty-fourth" and r["family"].startswith("mixture"))
    # the GRU's first recording here: its size (-13.3 %) out of band; its batch ×0.5 came
    # inside (-8.4 % → -7.0 %) once a shortfall was the host's only by its typical pace, and
    # went out again (-8.4 %) with the device's gap kept in its host-bound replay, which
    # brought its ×2 from -4.0 to -0.1 %; its bf16 → tf32 went from -7.9 to +4.3 % with its
    # GRU's time alone less the gaps the replay puts back
    assert [(r["family"].split()[0], r["case"]) for r in dev_rows if not r["in_band"]] == \
        [("GRU", "batch ×0.5"), ("GRU", "size")]
    # the hand-written GPT's size step, first recorded here: -7.8 % and out of its band with
    # its copies kept, -4.1 % moved by their units' traffic, -1.4 % with its casts (2.1 ms
    # of `to`) moved by their class's traffic as well
    gpt = next(r for r in dev_rows if r["family"].startswith("GPT") and r["case"] == "size")
    assert gpt["error_pct"] == pytest.approx(-1.4, abs=0.05)
    assert sum(abs(r["error_pct"]) <= 10 for r in dev_rows) == 32
    # ResNet-18's size step, its batch norm marked by bytes per SM cycle (+51 % at 10 % of
    # the H100's bandwidth)
    size = next(r for r in dev_rows if r["family"].startswith("ResNet") and r["case"] == "size")
    assert size["error_pct"] == pytest.approx(11.4, abs=0.1)
    # the three families declared since, first recorded here, all bound by the device: all 21
    # within 5 % (WaveNet's size step -13.2 % as first compared, its convolutions' terms
    # weighted by their calls; +0.7 % now, wider calls reaching more of the matmul rate)
    new = [r for r in rows if r.get("recording") in ("eleventh", "twelfth") and
           "error_pct" in r]
    assert len(new) == 21 and all(r["rounds_at_pace"] == r["rounds"] for r in new)
    assert sum(abs(r["error_pct"]) <= 5 for r in new) == 21
    wavenet = next(r for r in new if r["family"].startswith("WaveNet") and r["case"] == "size")
    assert wavenet["error_pct"] == pytest.approx(0.7, abs=0.1)
    # WaveNet again on the 28th, its convolutions timed wider too, on a host that took 37.5
    # ms for its step at batch 1 (17.1 on the 12th): all 7 in band, its batch ×0.5 -13.9 %
    again = [r for r in held_rows if r["family"].startswith("WaveNet")]
    assert {r["recording"] for r in again} == {"twenty-eighth"} and all(
        r["in_band"] for r in again)
    assert [r["case"] for r in again if abs(r["error_pct"]) > 10] == ["batch ×0.5"]
    # the two declared after those, each bound by the device (its source at its pace in every
    # round): the VAE's first recording, the Llama's third (its first, the 13th, bound by
    # a host whose pace its bf16 step kept in 1 round of 10)
    later = {(r["family"].split()[0], r["case"]): r for r in held_rows
             if r["recording"] in ("fourteenth", "seventeenth")}
    assert len(later) == 14 and all(r["rounds_at_pace"] == r["rounds"] for r in later.values())
    assert sum(abs(r["error_pct"]) <= 10 for r in later.values()) == 13
    # the VAE's size step, -17.7 % out of band with its convolutions' fitted terms alone, now
    # between those and the matmul rate (tests/predict/test_predict_convfit.py)
    vae = later[("convolutional", "size")]
    assert vae["error_pct"] == pytest.approx(-11.8, abs=0.1) and vae["in_band"]
    # the Llama's fp32 → bf16, its casts carried (+15.6 % without them on the 16th) and its
    # strided traffic at its own ratio (+8.1 % without it)
    cast = later[("Llama-style", "fp32 → bf16")]
    assert cast["error_pct"] == pytest.approx(7.1, abs=0.1) and cast["in_band"]


def test_a_set_with_no_family_recorded_gets_no_table():
    row = {"set": "held_out", "family": "a", "case": "size", "recording": "first",
           "predicted": 100.0, "low": 95.0, "high": 105.0, "measured": 98.0,
           "error_pct": 2.0, "in_band": True}
    not_recorded = {"set": "development", "family": "b", "case": "all",
                    "error": "not recorded", "recording": "first"}
    text = current_cases([row, not_recorded])
    assert "**Held-out families, current** (1 of 1" in text
    assert "Development families" not in text


def test_the_fp32_process_reads_the_bf16_steps_host_work_either_way():
    """docs/predict.md: the bf16 ÷ fp32 held host work read in the fp32 recording's process
    against the bf16 one's, over the fourteen runs that kept both: higher in eight
    (1.00–1.19×), lower in six (0.89–0.95×, MobileNetV2's on both GPUs among them); on the
    H100, 0.97–1.34 in the fp32 process against 1.02–1.44 in the bf16 one."""
    runs = sorted((FIXTURES / "zoo").glob("*-held-*-run.json.gz"))
    got = {r["run"]: r for r in autocast(runs)}
    assert len(got) == 14
    higher = [r["fp32_over_bf16"] for r in got.values() if r["fp32_over_bf16"] >= 1]
    lower = [r["fp32_over_bf16"] for r in got.values() if r["fp32_over_bf16"] < 1]
    assert len(higher) == 8 and len(lower) == 6
    assert round(min(higher), 2) == 1.00 and round(max(higher), 2) == 1.19
    assert round(min(lower), 2) == 0.89 and round(max(lower), 2) == 0.95
    assert got["mobilenet-held-h200-run"]["fp32_over_bf16"] < 1
    assert got["mobilenet-held-h100-run"]["fp32_over_bf16"] < 1
    h100 = [r for name, r in got.items() if "h100" in name]
    assert len(h100) == 10
    assert [round(f(r["in_fp32_process"] for r in h100), 2) for f in (min, max)] == [0.97, 1.34]
    assert [round(f(r["in_bf16_process"] for r in h100), 2) for f in (min, max)] == [1.02, 1.44]


def test_the_autocast_probe_reads_the_rounds_ratio_as_predict_does_and_runs_off_a_gpu(
        monkeypatch):
    """`autocast_probe.py`: the held rounds' bf16 ÷ fp32 ratio is the median of the rounds'
    ratios (None under two rounds); one condition runs end to end on the CPU, where nothing
    is held, so it gives the loop's ratio alone."""
    pytest.importorskip("torch")
    from validation.predict import autocast_probe

    held = {"fp32": [10.0, 10.0, 20.0], "bf16": [12.0, 13.0, 20.0]}
    assert autocast_probe.ratio(held) == pytest.approx(1.2)
    assert autocast_probe.ratio({"fp32": [10.0], "bf16": [12.0]}) is None
    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))
    got = autocast_probe.worker("zoo.mlp:build", "fp32-second-model", 2, batch=2)
    assert got["held_ms"] == {} and got["held_ratio"] is None and got["batch"] == 2
    assert all(len(got["loop_ms"][p]) == autocast_probe.LOOP_ROUNDS
               for p in ("bf16", "fp32", "tf32"))
    assert got["loop_ratio"] > 0 and got["loop_tf32_ratio"] > 0
    assert got["loop_tf32_ratio"] == pytest.approx(
        autocast_probe.ratio(got["loop_ms"], "tf32", "bf16"))
    # tf32 ÷ bf16 is tf32's rounds over bf16's, not over fp32's
    three = {"fp32": [10.0, 10.0, 10.0], "bf16": [20.0, 20.0, 20.0], "tf32": [15.0] * 3}
    assert autocast_probe.ratio(three, "tf32", "bf16") == pytest.approx(0.75)
    table = autocast_probe.summary([got, {"entry": "e", "condition": "bf16", "error": "x"}])
    assert "| zoo.mlp:build | fp32-second-model | — |" in table
    assert "| e | bf16 | — | — | — | — | x |" in table


def test_gpu_change_between_the_h100_and_the_h200_meets_the_steps_the_device_binds():
    """docs/predict.md: every step recorded on both GPUs predicted on the other from one
    recording; the 18 the device binds on both (the step at batch 1 under 0.8 of the step)
    each within 3.5 % of the step measured there and inside its band. The 14 the host binds
    on either GPU are listed apart."""
    from validation.predict.gpu_change import rows

    got = rows()
    assert len(got) == 32
    scored = [r for r in got if r["device_bound"]]
    assert len(scored) == 18
    assert {(r["from"], r["to"]) for r in scored} == {("h100-sxm", "h200-sxm"),
                                                       ("h200-sxm", "h100-sxm")}
    assert all(abs(r["error_pct"]) < 3.55 and r["in_band"] for r in scored)
    assert all(max(r["batch1_share"]) < 0.8 for r in scored)
    assert all(max(r["batch1_share"]) >= 0.8 for r in got if not r["device_bound"])


def test_a_batch_norm_short_of_the_bandwidth_moves_with_the_sms_not_the_bandwidth():
    """MobileNetV2's bf16 step recorded on the H200, its batch norm at 5 % of the copy
    bandwidth (15.7 of 28.0 ms): on the H100, 30 % less bandwidth and the same SMs, it is
    predicted within 1 % of its measured 28.89 ms (the median of three recordings), where moving
    the whole class by the bandwidth put it at 35.4 (+22 %)."""
    from gpuaudit.model import load_run
    from gpuaudit.predict import Change, load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog
    from validation.predict.gpu_change import FAMILIES, measured_ms

    specs = load_catalog()
    rates = machine_rates(load_run((FIXTURES / "h200-1gpu-bench-quick.json").read_text()),
                          specs)
    p = predict(load_profile(zoo_run("mobilenet-held-h200-run"), "mobilenet-v2/bf16"),
                rates, Change(gpu="h100-sxm"), specs)
    norm = next(c for c in p.classes if c.op_class == "norm")
    assert norm.achieved_pct is not None and norm.achieved_pct < 6
    assert norm.predicted_ms < 1.03 * norm.measured_ms  # bandwidth alone: × 1.43
    h100, _ = measured_ms(FAMILIES["mobilenet"][0], "h100-sxm", "bf16")
    assert h100 == pytest.approx(28.89, abs=0.01)
    assert p.step_ms == pytest.approx(h100, rel=0.01)


def test_a_gpu_of_the_same_sms_and_matmul_rate_keeps_a_tensor_classs_time():
    """Wave scaling between GPUs of as many SMs at one matmul rate moves nothing: the class
    keeps its recorded time, scaled or not, whatever its grids' raw times sum to (H200 →
    H100 SXM, both 132 SMs, the H100's rate from the H200's efficiency × the same peak)."""
    from gpuaudit.model import load_run
    from gpuaudit.predict import Change, load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    run = zoo_run("convnext-h200-run")
    rates = machine_rates(load_run((FIXTURES / "h200-1gpu-bench-quick.json").read_text()),
                          specs)
    prof = load_profile(run, "convnext-s/fp32")
    raw = sum(k.us for k in prof.classes["conv"].kernels) / 1e3
    p = predict(prof, rates, Change(gpu="h100-sxm"), specs)
    conv = next(c for c in p.classes if c.op_class == "conv")
    assert raw > 1.5 * conv.measured_ms  # the grids' raw sum is not the class's time
    assert conv.predicted_ms == pytest.approx(conv.measured_ms, rel=1e-3)


def test_a_gpu_change_of_a_host_bound_step_says_another_gpu_barely_moves_it():
    """The DLRM's fp32 step on the H100, its device waiting on the host half the step: on the
    H200 it is predicted as it was recorded, and the note says it follows its host, not the
    GPU (its H200 loan's faster host ran it at 4.69 ms); ConvNeXt's, the device's, keeps the
    plain note that the host is taken as fast."""
    from gpuaudit.predict import Change, load_profile, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    rates = h100_rates(specs)

    def notes(run: str, workload: str) -> tuple[float, float, list[str]]:
        prof = load_profile(zoo_run(run), workload)
        p = predict(prof, rates, Change(gpu="h200-sxm"), specs)
        return p.measured_step_ms, p.step_ms, list(p.notes)

    recorded, step, said = notes("recsys-held-h100-run", "dlrm/fp32")
    assert step == pytest.approx(recorded, rel=0.02)
    host = [n for n in said if "follows the host that issues it" in n]
    assert len(host) == 1 and "on the h200-sxm" in host[0]
    assert not any("taken to be as fast" in n for n in said)
    _, _, said = notes("convnext-held-h100-run", "convnext-s/fp32")
    assert any("taken to be as fast" in n for n in said)
    assert not any("follows the host" in n for n in said)


def test_the_autocast_probe_on_the_h100_names_no_cause_the_steps_follow():
    """docs/predict.md: in the kept probe the fp32 process read bf16's held host work higher
    than the bf16 process for both families; the DLRM's steps (host-bound in both
    precisions) ran at 1.13–1.17× in every process, the fp32 one's held reading (1.165)
    within 2 % of its steps, and emptying the allocator lowered the held reading, not the
    steps."""
    from validation.predict import autocast_probe

    kept = json.loads((FIXTURES / "zoo" / "autocast-probe-h100.json").read_text())
    got = {(r["entry"], r["condition"]): r for r in kept["rows"]}
    assert len(got) == 8 and not any("error" in r for r in got.values())
    for entry in autocast_probe.ENTRIES:
        assert got[entry, "fp32"]["held_ratio"] > got[entry, "bf16"]["held_ratio"]
        # the kept ratio is the one the probe computes from its rounds
        assert autocast_probe.ratio(got[entry, "fp32"]["held_ms"]) == \
            pytest.approx(got[entry, "fp32"]["held_ratio"])
    dlrm = {c: got["zoo.recsys:build", c] for c in autocast_probe.CONDITIONS}
    loops = [r["loop_ratio"] for r in dlrm.values()]
    assert min(loops) >= 1.13 and max(loops) <= 1.17
    assert dlrm["fp32"]["held_ratio"] == pytest.approx(dlrm["fp32"]["loop_ratio"], rel=0.02)
    assert dlrm["fp32-emptied"]["held_ratio"] < dlrm["fp32"]["held_ratio"] - 0.05
    assert dlrm["fp32-emptied"]["loop_ratio"] >= dlrm["fp32"]["loop_ratio"]


def test_the_steps_registered_before_their_measurement_are_what_predict_gives_now():
    """`gpu_change.py register`: the H200's recordings of three families, predicted on the
    H100 before any measurement there. The kept figures are the present method's but for
    the diffusion U-Net's bf16 step, whose host binds: its replay keeps the device's gap
    between queued kernels since, 38.14 ms against the 37.60 kept (measured 37.91). Measured
    since: docs/predict.md, five of six within 5 % and inside their band; the MLP's bf16
    step +34 %, out of band, where predict said its device waits on the host 31 % of the
    step it kept."""
    from validation.predict.gpu_change import AHEAD_CASES, REGISTERED, predicted, registered

    kept = json.loads(REGISTERED.read_text())["rows"]
    assert [(r["run"], r["workload"]) for r in kept] == \
        [(c.run, c.workload) for c in AHEAD_CASES]
    for r, case in zip(kept, AHEAD_CASES, strict=True):
        p = predicted(case)
        now = (r["predicted_ms"], r["low_ms"], r["high_ms"])
        if case.workload == "diffusion-unet/bf16":
            now = (38.1413, 33.5397, r["high_ms"])
        assert (p.step_ms, p.step_ms_low, p.step_ms_high) == pytest.approx(now, rel=1e-5)
    table = registered()
    assert "not yet recorded" not in table
    lines = [line for line in table.splitlines() if line.startswith("| ") and " ms " in line]
    assert len(lines) == 6
    errors = {tuple(line.split(" | ")[:2]): float(line.split("**")[1].split()[0])
              for line in lines}
    off = [k for k, e in errors.items() if abs(e) > 5]
    assert off == [("| deep MLP (tabular)", "bf16")]
    assert errors[off[0]] == pytest.approx(34.2, abs=0.05)
    mlp = next(line for line in lines if line.startswith("| deep MLP (tabular) | bf16"))
    assert "(out of band)" in mlp and "its device waits on the host 31 %" in mlp
    assert sum("(out of band)" in line for line in lines) == 1


def test_convnexts_bf16_step_runs_as_slow_in_a_process_of_its_own_as_in_the_targets():
    """docs/predict.md (ConvNeXt's 21st recording): its bf16 step, profiled at 12.22 ms, ran
    at ~20 ms in the targets' process; on the next loan, in a process of its own before and
    after that process, it ran as slow, at the pace of its step at batch 1: the host moved,
    not the process."""
    pace = json.loads((FIXTURES / "zoo" / "convnext-pace-h100.json").read_text())
    alone = {(r["order"], r["batch"]): statistics.median(r["steps_ms"]) for r in pace["runs"]
             if r["precision"] == "bf16"}
    at_128 = [ms for (_, batch), ms in sorted(alone.items()) if batch == 128]
    assert [round(ms, 1) for ms in at_128] == [21.0, 17.6]
    fresh = pace["fresh_process"]["bf16"]
    there = fresh["alone"] + fresh["alone_again"]  # its 6 steps' medians, alone in turn
    assert (round(min(fresh["alone"]), 1), round(max(fresh["alone"]), 1)) == (19.3, 23.8)
    assert all(min(there) <= ms <= max(there) for ms in at_128)
    # bound by the host: its step at batch 1, just after, within 5 % of the one at 128
    for order in (0, 4):
        assert alone[(order + 1, 1)] == pytest.approx(alone[(order, 128)], rel=0.05)
    # never near the profiled pace the 21st's cases start from
    assert min(at_128 + fresh["alone"]) > 12.22 * 1.05
