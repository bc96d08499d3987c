"""`gpuaudit predict` on models it was not written for: the operator classes of every family of
the zoo (examples/predict/zoo) read from one step each recorded on an H200 (the profiler's
traces, tests/fixtures/predict/zoo/*-bf16-step.json.gz), the unfused attention found among
its neighbours, the checks that refuse to guess, the batch-size arithmetic with exact values, and
predictions from three recorded zoo runs (the timeline replay: test_predict_timeline.py; another
size of the model: test_predict_size_count.py)."""

from __future__ import annotations

import copy
import dataclasses
import gzip
import json
import math
import sys
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.model import load_run
from gpuaudit.model.opprofile import OpClassRecord, TimedUnit, UnitGroup, UnitTime
from gpuaudit.predict import Change, alone, grouped, load_profile, predict
from gpuaudit.predict import groups as grp
from gpuaudit.specs.catalog import load_catalog
from gpuaudit.workloads.kernelview import parse_trace
from tests.conftest import FIXTURES
from tests.support.predict import h100_rates, h200_rates, zoo_plain_run

ZOO = FIXTURES / "predict" / "zoo"
SPECS = load_catalog()
EXAMPLES = Path(__file__).resolve().parents[2] / "examples" / "predict"


def view(family: str):
    with gzip.open(ZOO / f"{family}-bf16-step.json.gz", "rt") as f:
        return parse_trace(json.load(f)["traceEvents"], 1)


# --- classes by what a unit is -----------------------------------------------------------------

# family → (class, unit) groups its step must hold
HOLDS = {
    "vit": {("gemm", "linear"), ("attention", "scaled_dot_product_attention"),
            ("conv", "conv2d"), ("norm", "layer_norm")},
    "gpt_manual": {("gemm", "linear"), ("attention", "matmul"), ("attention", "softmax"),
                   ("attention", "masked_fill"), ("embedding", "embedding")},
    "gru": {("rnn", "gru"), ("gemm", "linear"), ("embedding", "embedding")},
    "cnn": {("conv", "conv2d"), ("norm", "batch_norm"), ("gemm", "linear")},
    "mlp": {("gemm", "linear"), ("norm", "layer_norm")},
    "bert": {("gemm", "linear"), ("attention", "scaled_dot_product_attention"),
             ("embedding", "embedding"), ("norm", "layer_norm")},
    "mixer": {("gemm", "linear"), ("conv", "conv2d"), ("norm", "layer_norm")},
    "unet": {("conv", "conv2d"), ("conv", "conv_transpose2d"), ("norm", "batch_norm")},
    "lstm": {("rnn", "lstm"), ("gemm", "linear")},
    "recsys": {("embedding", "embedding_bag"), ("gemm", "linear"), ("gemm", "bmm")},
    "moe": {("gemm", "linear"), ("attention", "scaled_dot_product_attention")},
    "diffusion": {("conv", "conv2d"), ("norm", "group_norm"), ("attention", "bmm"),
                  ("attention", "softmax"), ("gemm", "linear")},
    "convnext": {("conv", "conv2d"), ("norm", "layer_norm"), ("gemm", "linear")},
    # recorded on an H100: its reparameterization, its pad before a strided convolution and
    # its nearest upsampling are elementwise work, not convolution
    "vae": {("conv", "conv2d"), ("norm", "group_norm"), ("elementwise", "silu"),
            ("elementwise", "pad"), ("elementwise", "upsample_nearest2d"),
            ("elementwise", "randn_like")},
    # recorded on an H100: its hand-written RMSNorm (pow, mean, rsqrt), the complex rotary
    # multiply and repeat_kv's expanded keys and values are elementwise work; attention is
    # SDPA's alone
    "llama": {("gemm", "linear"), ("attention", "scaled_dot_product_attention"),
              ("embedding", "embedding"), ("elementwise", "mul"), ("elementwise", "pow"),
              ("elementwise", "rsqrt"), ("elementwise", "expand"), ("elementwise", "silu")},
}


@pytest.mark.parametrize("family", sorted(HOLDS))
def test_each_family_is_classed_by_what_its_units_are(family):
    v = view(family)
    groups = {k for k, us in v.group_us.items() if us > 0}
    assert HOLDS[family] <= groups
    # every kernel charged to a unit, and none contradicting its unit's class
    assert not v.unknown and not v.us.get("unknown") and not v.us.get("unattributed")
    assert ("gemm", "matmul") not in groups or family != "gpt_manual"


def test_a_vits_linear_layers_are_gemm_and_its_patch_convolution_is_small():
    # The case that hid a ViT's matmuls in conv (936 % of conv's roofline): each kernel is now
    # the linear layer's that launched it, cuBLAS's or not.
    v = view("vit")
    total = sum(v.us.values())
    assert v.us["gemm"] / total > 0.4 and v.us["conv"] / total < 0.05
    assert v.group_us[("conv", "conv2d")] == v.us["conv"]


def test_nn_multihead_attentions_default_path_is_attention():
    # The diffusion U-Net calls nn.MultiheadAttention(h, h, h): need_weights=True, so
    # PyTorch runs bmm, softmax, bmm (no SDPA); its projections stay linear layers.
    v = view("diffusion")
    assert v.group_us[("attention", "bmm")] > 0 and v.group_us[("gemm", "linear")] > 0
    assert ("gemm", "bmm") not in v.group_us


def test_batch_norms_backward_is_batch_norms_not_the_counter_before_it():
    # nn.BatchNorm2d adds 1 to num_batches_tracked just before batch norm: that add_ records
    # the sequence number batch norm's node takes, so the node's forward op is the last one.
    v = view("cnn")
    assert v.group_us.get(("elementwise", "add_"), 0.0) < 0.01 * v.group_us[("norm",
                                                                               "batch_norm")]


# --- batch-size arithmetic -------------------------------------------------------------------


def test_a_units_time_at_another_batch_interpolates_log_log_and_extends_linearly():
    pts = [(0.5, 1.0), (1.0, 1.6), (2.0, 3.0)]
    # between 1 and 2: log-log, exactly
    t, past = alone.scaled_time(pts, 1.5)
    assert t == pytest.approx(math.exp(math.log(1.6) + math.log(1.5) * (math.log(3.0 / 1.6)
                                                                          / math.log(2.0))))
    assert past == 0.0
    # past ×2: along (1, 1.6)–(2, 3.0), 1.4 per unit of scale; two doublings past it at ×8
    t, past = alone.scaled_time(pts, 8.0)
    assert t == pytest.approx(1.6 + 1.4 * 7.0) and past == pytest.approx(2.0)
    assert alone.scaled_time(pts, 0.5) == (1.0, 0.0)


def test_past_the_largest_batch_timed_timings_that_fell_extend_in_proportion():
    # timings that fell as the batch grew say nothing of the slope: in proportion
    t, past = alone.scaled_time([(0.5, 0.41), (1.0, 0.38)], 2.0)
    assert t == pytest.approx(0.76) and past == pytest.approx(1.0)
    # a rising line is kept, steeper than proportion or not
    assert alone.scaled_time([(1.0, 1.0), (2.0, 3.0)], 4.0)[0] == pytest.approx(7.0)
    assert alone.scaled_time([(1.0, 1.0), (2.0, 1.5)], 4.0)[0] == pytest.approx(2.5)
    # below the smallest: no less than in proportion, as before
    assert alone.scaled_time([(1.0, 1.0), (2.0, 3.0)], 0.25)[0] == pytest.approx(0.25 * 1.0 / 2)
    assert alone.scaled_time([(1.0, 1.0), (2.0, 1.2)], 0.25)[0] == pytest.approx(0.85)


def _unit(ms_by_setting, count=2.0, flops=10.0):
    return TimedUnit(op_class="gemm", unit="linear", signature="", count=count, flops=flops,
                     times=tuple(UnitTime(precision=p, batch_scale=s, ms=ms)
                                 for (p, s), ms in ms_by_setting.items()))


def test_the_batch_ratio_is_time_weighted_over_the_units_timed_at_both_sizes():
    a = _unit({("bf16", 1.0): 1.0, ("bf16", 2.0): 1.8, ("bf16", 0.5): 0.6}, count=2.0)
    b = _unit({("bf16", 1.0): 3.0, ("bf16", 2.0): 6.0, ("bf16", 0.5): 1.5}, count=1.0)
    ratio, share, past = alone.batch_ratio([a, b], "bf16", 2.0)
    assert ratio == pytest.approx((2 * 1.8 + 6.0) / (2 * 1.0 + 3.0))
    assert (share, past) == (1.0, 0.0)
    # timed alone slower than TRUST × what the group took in the step: not trusted
    assert alone.batch_ratio([a, b], "bf16", 2.0, in_step_us=3000.0) is None
    assert alone.batch_ratio([a, b], "bf16", 2.0, in_step_us=5000.0) is not None


def test_memory_bound_work_follows_the_line_through_two_batch_sizes_past_a_floor():
    # 1,000 bytes at batch 8 and 600 at batch 4: 200 fixed, 100 a sample; at 16, 1,800
    assert grp._line(1000.0, 600.0, 8, 4, 16) == 1800.0
    ch = grp.GroupChange(UnitGroup(op_class="elementwise", unit="add"))
    ch.then(1.8, grp.FLOOR_US, 0.08, "")
    assert ch.apply(2.0) == 2.0  # a kernel under the floor keeps its time
    assert ch.apply(12.5) == pytest.approx(2.5 + 10.0 * 1.8)


def test_the_precision_ratio_is_time_weighted_and_distrusts_slow_timings():
    a = _unit({("bf16", 1.0): 1.0, ("fp32", 1.0): 9.0})
    b = _unit({("bf16", 1.0): 0.5, ("fp32", 1.0): 7.0}, count=4.0)
    ratio, held = alone.timed_ratio([a, b], "bf16", "fp32")
    assert ratio == pytest.approx((2 * 9.0 + 4 * 7.0) / (2 * 1.0 + 4 * 0.5)) and held == 1.0
    assert alone.timed_ratio([a, b], "bf16", "tf32") is None  # not timed in tf32
    assert alone.timed_ratio([a, b], "bf16", "fp32", in_step_us=2000.0) is None


def test_a_group_that_grows_keeps_the_steps_time_past_its_units_and_scales_up_their_share():
    # the units alone: 2 × 1.0 + 4 × 0.5 = 4 ms in bf16, 2 × 9 + 4 × 7 = 46 ms in fp32; the
    # group took 5 ms in the step: its 1 ms past them is kept, not × 11.5
    a = _unit({("bf16", 1.0): 1.0, ("fp32", 1.0): 9.0})
    b = _unit({("bf16", 1.0): 0.5, ("fp32", 1.0): 7.0}, count=4.0)
    g = UnitGroup(op_class="gemm", unit="linear", kernel_us=5000.0, flops=60.0)
    ratio, _ = alone.timed_ratio([a, b], "bf16", "fp32")
    assert 5000.0 * alone.grown_in_step([a, b], "bf16", "fp32", g, ratio) == \
        pytest.approx(5000.0 + 46000.0 - 4000.0)
    # a step shorter than its units alone (their gaps between kernels) keeps that deficit
    short = g.model_copy(update={"kernel_us": 3000.0})
    assert 3000.0 * alone.grown_in_step([a, b], "bf16", "fp32", short, ratio) == \
        pytest.approx(3000.0 + 42000.0)
    # half the group's FLOPs timed (120 counted): the units' time stands for half of it
    half = g.model_copy(update={"flops": 120.0, "kernel_us": 10000.0})
    assert 10000.0 * alone.grown_in_step([a, b], "bf16", "fp32", half, ratio) == \
        pytest.approx(10000.0 + 2 * 42000.0)
    # a group that shrinks moves by the units' ratio, its time past theirs with it
    back, _ = alone.timed_ratio([a, b], "fp32", "bf16")
    assert alone.grown_in_step([a, b], "fp32", "bf16", g, back) == back


def test_an_untimed_group_carries_its_share_of_the_roofline_to_the_other_rate():
    # 1 TFLOP and 1 GB in 4 ms at 500 TFLOP/s (2 ms of compute: half its roofline) → 50
    # TFLOP/s: the roofline there 20 ms; the share there 0.5^((50/500)^δ)
    g = UnitGroup(op_class="gemm", unit="linear", kernel_us=4000.0, flops=1e12, bytes=1e9)
    share = 0.5 ** ((50 / 500) ** grp.DELTA["gemm"])
    assert grp.efficiency_ratio(g, (500.0, 50.0), 4000.0, 2e9) == pytest.approx(
        0.020 / share / 0.004)
    # the lower rate reaches a larger share of itself, never more than all of it
    assert 0.5 < share < 1.0
    # towards the higher rate the share falls: 0.5^((500/50)^δ)
    g32 = g.model_copy(update={"kernel_us": 40000.0})  # 20 ms of roofline in 40: half
    up = 0.5 ** ((500 / 50) ** grp.DELTA["gemm"])
    assert grp.efficiency_ratio(g32, (50.0, 500.0), 4000.0, 0.5e9) == pytest.approx(
        0.002 / up / 0.040)
    # cuDNN's RNNs keep nearly their share: latency-bound at every precision
    rnn = g.model_copy(update={"op_class": "rnn"})
    assert grp.efficiency_ratio(rnn, (500.0, 50.0), 4000.0, 2e9) > \
        grp.efficiency_ratio(g, (500.0, 50.0), 4000.0, 2e9)


def test_switching_autocast_off_or_on_moves_the_hosts_work():
    run = zoo_plain_run("mlp")
    prof = load_profile(run, "tabular-mlp/bf16")
    p = predict(prof, h200_rates(), Change(precision="fp32"), SPECS)
    assert any(f"× {grouped.AUTOCAST_OFF_HOST:.2f}" in b and "autocast switched off" in b
               for b in p.basis)
    back = predict(load_profile(run, "tabular-mlp/fp32"), h200_rates(), Change(precision="bf16"),
                   SPECS)
    assert any(f"× {1 / grouped.AUTOCAST_OFF_HOST:.2f}" in b and "switched on" in b
               for b in back.basis)
    same = predict(load_profile(run, "tabular-mlp/fp32"), h200_rates(), Change(precision="tf32"),
                   SPECS)
    assert not any("autocast switched" in b for b in same.basis)


def test_the_hosts_cost_of_autocast_is_the_models_own_where_its_recording_timed_it():
    prof = load_profile(zoo_plain_run("mlp"), "tabular-mlp/fp32")
    assert grouped.host_ratio(prof.record) is None  # recorded before the rounds
    # planted: four rounds of the step at batch 1, each beside the same under autocast
    rounds = (10.0, 12.0, 11.0, 10.0)

    def planted(alt):
        return dataclasses.replace(prof, record=prof.record.model_copy(update={
            "host_rounds_ms": rounds, "alt_host_rounds_ms": alt}))

    # ratios 1.5, 1.5, 1.2, 1.6: median 1.5; quartiles 1.425 and 1.525, half their
    # distance ÷ 1.5 = 3.3 % under the floor
    steady = planted((15.0, 18.0, 13.2, 16.0))
    assert grouped.host_ratio(steady.record) == (pytest.approx(1.5), grouped.U_HOST_RATIO)
    # ratios 1.5, 2.0, 1.0, 1.6: median 1.55; quartiles 1.375 and 1.7 → ±10.5 %
    ratio, unc = grouped.host_ratio(planted((15.0, 24.0, 11.0, 16.0)).record)
    assert ratio == pytest.approx(1.55) and unc == pytest.approx(0.1625 / 1.55)
    # a pair with a round missing is dropped; fewer than two pairs time nothing
    assert grouped.host_ratio(planted((15.0,)).record) is None
    p = predict(steady, h200_rates(), Change(precision="bf16"), SPECS)
    assert any("× 1.50 ±5 %" in b and "switched on" in b and "round by round" in b
               for b in p.basis)
    # a host 2.5 × slower with autocast, not the families' 1.18: the step becomes
    # host-bound and longer than the fitted ratio's
    fitted = predict(prof, h200_rates(), Change(precision="bf16"), SPECS)
    slow = predict(planted((25.0, 30.0, 27.5, 25.0)), h200_rates(), Change(precision="bf16"), SPECS)
    assert slow.step_ms > fitted.step_ms * 1.1 and slow.step_ms_high > fitted.step_ms_high


# --- predictions from recorded zoo runs --------------------------------------------------------


def test_a_batch_change_alone_is_predicted_from_the_units_timed_at_other_batches():
    run = zoo_plain_run("recsys")  # a second-session recording: the host's own time measured
    prof = load_profile(run, "dlrm/bf16")
    p = predict(prof, h200_rates(), Change(batch=8192), SPECS)
    assert p.target.batch_per_gpu == 8192 and p.changes == ("batch",)
    assert p.step_ms_low <= p.step_ms <= p.step_ms_high
    assert any("replayed from its recorded timeline" in b for b in p.basis)
    assert any("host time × " in b and "to match" in b for b in p.basis)


def test_a_model_whose_batch_makes_the_same_work_refuses_a_batch_change():
    """make_batch(N) that ignores N (a whole graph a step): the work counted at the recorded
    batch and at the other one is the same, so no batch change is this model's to predict."""
    prof = load_profile(zoo_plain_run("recsys"), "dlrm/bf16")
    rec = prof.record
    assert rec is not None and rec.alt_batch not in (None, rec.batch)
    same = rec.model_copy(update={"groups": tuple(
        g.model_copy(update={"alt_batch_flops": g.flops, "alt_batch_bytes": g.bytes})
        for g in rec.groups)})
    with pytest.raises(BadInputError, match=r"--batch-size 8192: dlrm/bf16 did the same work "
                                            r"at batch \d+ and \d+"):
        predict(dataclasses.replace(prof, record=same), h200_rates(), Change(batch=8192), SPECS)
    # its precision still changes (the batch is not touched)
    p = predict(dataclasses.replace(prof, record=same), h200_rates(), Change(precision="fp32"),
                SPECS)
    assert p.changes == ("precision",)


def test_batch_and_precision_combine():
    run = zoo_plain_run("mlp")
    prof = load_profile(run, "tabular-mlp/bf16")
    both = predict(prof, h200_rates(), Change(batch=4096, precision="fp32"), SPECS)
    assert both.changes == ("precision", "batch") and both.target.mode == "fp32"
    assert both.target.batch_per_gpu == 4096


def _with_unknown(run, share: float):
    doc = json.loads(run.model_dump_json())
    for p in doc["op_profiles"]:
        total = sum(c["ms_per_step"] for c in p["classes"])
        ms = total * share / (1 - share)
        p["classes"].append(OpClassRecord(op_class="unknown", ms_per_step=ms).model_dump())
        p["unknown"] = [{"op": "mylib::fused_thing", "ms_per_step": ms,
                         "why": "an operator outside aten"}]
    return load_run(json.dumps(doc))


def test_time_the_model_does_not_understand_refuses_or_widens_the_band():
    run = zoo_plain_run("mlp")
    with pytest.raises(BadInputError, match=r"30 % .*mylib::fused_thing.*no prediction"):
        predict(load_profile(_with_unknown(run, 0.3), "tabular-mlp/bf16"), h200_rates(),
                Change(precision="fp32"), SPECS)
    p = predict(load_profile(_with_unknown(run, 0.1), "tabular-mlp/bf16"), h200_rates(),
                Change(precision="fp32"), SPECS)
    assert any("does not understand" in n and "mylib::fused_thing" in n for n in p.notes)
    unknown = next(c for c in p.classes if c.op_class == "unknown")
    assert unknown.uncertainty_pct == 50.0


def test_a_class_above_its_roofline_is_said():
    run = zoo_plain_run("cnn")
    doc = json.loads(run.model_dump_json())
    for p in doc["op_profiles"]:
        for c in p["classes"]:
            if c["op_class"] == "gemm":
                c["flops"] *= 1e4  # far more work counted than its time allows
    planted = load_run(json.dumps(doc))
    p = predict(load_profile(planted, "resnet18-64px/bf16"), h200_rates(),
                Change(gpu="a100-sxm4-80gb"), SPECS)
    note = next(n for n in p.notes if n.startswith("gemm ran at"))
    assert "undercounted" in note and "gpu change" in note



def test_a_run_recorded_before_the_unit_groups_refuses_a_batch_change_it_cannot_make():
    doc = json.loads((FIXTURES / "predict" / "h200-1gpu-2026-12-01d-runs.json").read_text())
    legacy = load_run(json.dumps(doc["runs"]["P1"]))
    prof = load_profile(legacy, "resnet50/bf16")
    with pytest.raises(BadInputError, match="recorded before the unit groups"):
        predict(prof, h200_rates(), Change(batch=128), SPECS)


def test_cli_predicts_another_batch_alone(tmp_path):
    import subprocess

    path = tmp_path / "run.json"
    path.write_text(zoo_plain_run("mlp").model_dump_json())
    out = subprocess.run([sys.executable, "-m", "gpuaudit", "predict", str(path), "--workload",
                          "tabular-mlp/bf16", "--batch-size", "4096", "--rates",
                          str(FIXTURES / "predict" / "h200-2gpu-bench-quick.json"), "--json"],
                         capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["target"]["batch_per_gpu"] == 4096 and doc["changes"] == ["batch"]


def test_the_recorded_zoo_runs_read_back_typed():
    for name in ("mlp", "cnn", "recsys"):
        run = zoo_plain_run(name)
        assert run.schema_version == 3 and len(run.op_profiles) == 2
        for p in run.op_profiles:
            assert p.timeline is not None and len(p.timeline.group) == len(p.timeline.dur_us)
            assert all(-1 <= g < len(p.groups) for g in p.timeline.group)
            assert copy.deepcopy(p) == p


def test_the_docs_tables_counts_are_the_recorded_results():
    """The docs' held-out and development tables hold each family's current recording's
    cases, counted as the fixture's rows give them; every recording's own tables (`--all`)
    count theirs."""
    import re

    from validation.predict.zoo_tables import RECORDER, current, table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "predict.md").read_text()
    rows = json.loads((FIXTURES / "predict" / "zoo-results.json").read_text())["rows"]
    now = current(rows)
    every = table(rows)
    recs = list(dict.fromkeys(r["recording"] for r in rows))

    def said(text: str, name: str) -> tuple[int, ...] | None:
        m = re.search(rf"\*\*{name}\*\* \((\d+) of (\d+) (?:cases )?within 10 %, "
                      r"(\d+) (?:measurements )?inside their band", text)
        return tuple(map(int, m.groups())) if m else None

    def counts(mine: list[dict]) -> tuple[int, int, int]:
        return (sum(abs(r["error_pct"]) <= 10 for r in mine), len(mine),
                sum(r["in_band"] for r in mine))

    for title, which in (("Held-out families", "held_out"),
                         ("Development families", "development")):
        mine = [r for r in rows if r["set"] == which and "error_pct" in r
                and now.get((which, r["family"])) == r["recording"]]
        assert said(doc, f"{title}, current") == counts(mine)
        assert {r["family"] for r in mine} == {f for w, f in now if w == which}
        for rec in recs:  # a table per recording where there are several
            mine = [r for r in rows if r["set"] == which and "error_pct" in r
                    and r["recording"] == rec]
            if any(r["set"] == which and r["recording"] == rec for r in rows):
                assert said(every, f"{title}, {RECORDER[rec]} recording") == counts(mine)
    # the docs keep the current evidence only
    assert "recording** (" not in doc
    # each recording's table names every held-out family: those it recorded with their 7
    # cases predicted, refused or left unmeasured with the reason, the others (declared after
    # it, or left out of a partial recording) said not recorded; one recording holds 8 or more
    # (a recording of the development set alone has no held-out table)
    declared = {f["family"] for f in json.loads(
        (EXAMPLES / "zoo" / "manifest.json").read_text())["held_out"]}
    recorded = []
    for rec in recs:
        held = [r for r in rows if r["set"] == "held_out" and r["recording"] == rec]
        if not held:
            assert any(r["set"] == "development" and r["recording"] == rec for r in rows)
            continue
        later = [r for r in held if r["case"] == "all"]
        assert all(r.get("error") == "not recorded" for r in later)
        families = {r["family"] for r in held} - {r["family"] for r in later}
        assert families | {r["family"] for r in later} == declared
        assert len(held) - len(later) == 7 * len(families)
        assert all("error_pct" in r or r.get("refused") or r.get("error")
                   for r in held if r not in later)
        recorded.append(len(families))
    assert max(recorded) >= 8


def test_the_docs_current_table_is_the_recorded_results():
    """The docs' per-family table is what the fixture's rows give now (a table published
    before a change to how misses are marked would still say the old marks)."""
    from validation.predict.zoo_tables import current_table

    doc = (Path(__file__).resolve().parents[2] / "docs" / "predict.md").read_text()
    rows = json.loads((FIXTURES / "predict" / "zoo-results.json").read_text())["rows"]
    assert current_table(rows).strip() in doc


def test_a_convolutions_backward_is_charged_to_a_convolution_unit():
    # Seen on CUDA in fp32: the gradients of ResNet's convolutions tallied under the ReLU
    # after their batch norm (2.1 of 3.4 TFLOP a step in elementwise): the tally names the
    # convolution unit from the backward's own arguments instead.
    import torch

    from gpuaudit.workloads.tally import _conv_unit

    def args(weight, transposed):
        return (None, None, weight, None, (1, 1), (0, 0), (1, 1), transposed)

    assert _conv_unit("aten.convolution_backward", args(torch.zeros(8, 4, 3, 3), False),
                      torch) == "conv2d"
    assert _conv_unit("aten.convolution_backward", args(torch.zeros(8, 4, 3, 3), True),
                      torch) == "conv_transpose2d"
    assert _conv_unit("aten.convolution_backward", args(torch.zeros(8, 4, 3), False),
                      torch) == "conv1d"
    assert _conv_unit("aten.mm", args(torch.zeros(8, 4, 3, 3), False), torch) is None


def test_flops_counted_under_a_memory_bound_unit_join_the_busiest_matmul_bound_group():
    # the fp32 ResNet-18 recording: its convolutions' gradients tallied under the ReLUs
    prof = next(p for p in zoo_plain_run("cnn").op_profiles if p.precision == "fp32")
    stray = sum(g.flops for g in prof.groups if g.op_class == "elementwise")
    conv = next(g for g in prof.groups if (g.op_class, g.unit) == ("conv", "conv2d"))
    assert stray > conv.flops  # the backward's two thirds
    fixed, note = grouped.repair_flops(prof)
    assert sum(g.flops for g in fixed.groups if g.op_class == "elementwise") == 0
    moved = next(g for g in fixed.groups if (g.op_class, g.unit) == ("conv", "conv2d"))
    assert moved.flops == pytest.approx(conv.flops + stray)
    assert sum(g.flops for g in fixed.groups) == pytest.approx(sum(g.flops for g in prof.groups))
    assert note is not None and "conv/conv2d" in note and "elementwise/relu" in note
    # the bf16 recording counted them where they belong: nothing to move
    bf16 = next(p for p in zoo_plain_run("cnn").op_profiles if p.precision == "bf16")
    assert grouped.repair_flops(bf16) == (bf16, None)


def test_a_wider_layer_reaches_more_of_its_roofline_by_the_precision_rules_delta():
    from gpuaudit.predict import retarget as rt

    r = h200_rates()
    bf16 = r.roofs.matmul("bf16")
    # 1 TFLOP in 4 calls, taking twice its roofline: share 0.5
    g = UnitGroup(op_class="gemm", unit="linear", kernel_us=2e6 / bf16, flops=1e12,
                  bytes=1.0)
    key = ("gemm", "linear")

    def counted(calls):
        return rt.Counted("m", {}, {}, {}, 1, 1, [], {key: calls})

    # the target: the same 4 calls, each with 4 × the ideal time
    share = rt._share_ratio(g, 4.0, counted(4), counted(4), key, r.roofs, "bf16")
    there = 0.5 ** (4.0 ** -grp.DELTA["gemm"])
    assert share == pytest.approx(0.5 / there) and share < 1.0
    # 16 calls for 4 × the ideal: each call as long as before, the share kept
    assert rt._share_ratio(g, 4.0, counted(4), counted(16), key, r.roofs,
                           "bf16") == pytest.approx(1.0)
    # calls not counted: kept
    assert rt._share_ratio(g, 4.0, rt.Counted("m", {}, {}, {}, 1, 1, []), counted(4), key,
                           r.roofs, "bf16") == 1.0


def test_a_group_far_below_its_roofline_is_never_slower_at_a_higher_rate():
    # 7 % of fp32's roofline: its share raised to the power for bf16 is nearly nothing
    g = UnitGroup(op_class="gemm", unit="linear", kernel_us=40.0, flops=1.5e8, bytes=1e5)
    assert grp.efficiency_ratio(g, (53.0, 743.0), 4224.0, 0.5e5) == 1.0
    assert grp.efficiency_ratio(g, (743.0, 53.0), 4224.0, 2e5) >= 1.0


def test_a_profile_that_caught_no_kernels_is_refused_not_carried_unchanged():
    # as recorded on the H200 when a GPU profile started during an earlier profile's CUPTI
    # teardown: every class's work counted, no kernel time, busy and span 0
    doc = json.loads(zoo_plain_run("mlp").model_dump_json())
    for p in doc["op_profiles"]:
        p["busy_ms"] = p["span_ms"] = 0.0
        p["timeline"] = None
        for c in p["classes"]:
            c["ms_per_step"] = c["kernels_per_step"] = 0.0
    prof = load_profile(load_run(json.dumps(doc)), "tabular-mlp/bf16")
    for change in (Change(precision="fp32"), Change(batch=4096)):
        with pytest.raises(BadInputError, match=r"holds no kernel time.*record it again"):
            predict(prof, h200_rates(), change, SPECS)


def test_predicts_progress_lines_reach_stderr_only_while_it_runs():
    import io
    import logging

    from rich.console import Console

    from gpuaudit.cli import common

    buf = io.StringIO()
    logger = logging.getLogger("gpuaudit.predict.retarget")
    with common.logs_to(Console(file=buf, width=200), "gpuaudit.predict"):
        logger.info("counting %s on the CPU", "moe:build_large")
    logger.info("after the command")
    assert buf.getvalue() == "predict.retarget: counting moe:build_large on the CPU\n"
    assert not logging.getLogger("gpuaudit.predict").handlers


def test_a_batch_norm_far_below_its_roofline_barely_moves_under_a_size_change(monkeypatch):
    """ResNet-18 at half its width: its batch norm ran at a few % of its traffic's roofline
    (one block per channel), so its time is not its traffic's. It moves by the traffic's
    ratio to the `OFF_EXPONENT`, its band reaching unchanged and the traffic's square root,
    and a note says so; the MLP's layer norm, near its roofline, keeps its traffic's ratio."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from gpuaudit.predict import retarget as rt

    prof = load_profile(zoo_plain_run("cnn"), "resnet18-64px/bf16")
    bn = next(g for g in prof.record.groups if g.unit == "batch_norm")
    r = h200_rates()
    assert rt._off_roofline(rt._traffic_share(bn, r.roofs), r.roofs)
    # a group of kernels of a few µs is as far below its roofline, but that is its launches
    short = [g for g in prof.record.groups if g.op_class == "elementwise" and g.bytes > 0
             and g.kernel_us > 0
             and g.kernel_us / max(g.kernels, 1) < rt.LONG_KERNEL_US
             and g.bytes / (r.roofs.memory_gbps * 1e9) / (g.kernel_us * 1e-6) < 0.10]
    assert short and all(rt._traffic_share(g, r.roofs) == 1.0 for g in short)
    p = predict(prof, r, Change(model="zoo.cnn:build_small"), SPECS)
    assert any("batch_norm ran far below its traffic's roofline, under 1.6 bytes per SM "
               "cycle" in n for n in p.notes)
    assert sum("traffic's roofline" in n for n in p.notes) == 1  # batch norm alone
    norm = next(c for c in p.classes if c.op_class == "norm")
    # the traffic halves with the channels: the class lands near × 0.5^0.25, not × 0.5
    assert norm.predicted_ms / norm.measured_ms == pytest.approx(0.5 ** 0.25, rel=0.05)
    # and the band spans from the traffic's square root to unchanged: wider than ±8 %
    assert p.step_ms_high - p.step_ms_low > 0.15 * p.step_ms
    mlp = predict(load_profile(zoo_plain_run("mlp"), "tabular-mlp/bf16"), r,
                  Change(model="zoo.mlp:build_large"), SPECS)
    assert not any("its traffic's roofline" in n for n in mlp.notes)


def test_the_batch_norm_mark_is_the_same_bytes_per_sm_cycle_on_a_gpu_of_less_bandwidth(
        monkeypatch):
    """On an H100 (3.0 TB/s of copy against the H200's 4.2, the same 132 SMs at 1.98 GHz)
    ResNet-18's bf16 batch norm moved the bytes it moved on the H200, which is 10.1 % of the
    H100's roofline: a mark at 10 % of the copy rate took it as traffic-bound and halved it
    with the channels (the size step came out +51 %). In bytes per SM cycle it is marked on
    both; where the SMs are not known, the share of the copy rate decides."""
    pytest.importorskip("torch")
    monkeypatch.syspath_prepend(str(EXAMPLES))
    from gpuaudit.model.schema import read_run
    from gpuaudit.predict import retarget as rt

    h100 = h100_rates(SPECS)
    prof = load_profile(read_run(ZOO / "cnn-held-h100-run.json.gz"), "resnet18-64px/bf16")
    bn = next(g for g in prof.record.groups if g.unit == "batch_norm")
    share = rt._traffic_share(bn, h100.roofs)
    assert rt.OFF_ROOFLINE < share < 0.12  # over the old mark, by a little
    assert rt._off_roofline(share, h100.roofs)
    assert not rt._off_roofline(share, dataclasses.replace(h100.roofs, sms=None))
    p = predict(prof, h100, Change(model="zoo.cnn:build_small"), SPECS)
    norm = next(c for c in p.classes if c.op_class == "norm")
    assert norm.predicted_ms / norm.measured_ms == pytest.approx(0.5 ** 0.25, rel=0.05)
    # the step at the small size, as the same recording's targets timed it (256 samples at
    # 8,782 a second: 29.1 ms), inside the band; taken as its traffic it was 19.3 ms
    assert p.step_ms_low <= 256 / 8782.4 * 1e3 <= p.step_ms_high


def test_a_call_with_more_work_never_comes_out_faster_under_a_size_change():
    from gpuaudit.predict.retarget import _monotone

    assert _monotone(0.81, 2.25, 1, 1) == 1.0  # more work a call: at least as long
    assert _monotone(1.3, 4.0, 19, 19) == 1.3  # slower already: kept
    assert _monotone(0.9, 4.0, 10, 20) == 2.0  # twice the calls, each with twice the work
    assert _monotone(1.2, 0.25, 1, 1) == 1.0  # less work a call: no longer
    assert _monotone(0.3, 0.25, 1, 1) == 0.3
    assert _monotone(0.5, 2.0, 0, 1) == 0.5  # calls not counted: nothing to bound by


def test_a_precision_the_model_failed_in_is_refused_not_predicted():
    """`nn.AdaptiveLogSoftmaxWithLoss` does not run under CUDA autocast (its clusters'
    float32 log-probabilities are copied into an output made in the input's bfloat16), so on
    an H100 its bf16 mode raised while fp32 ran and was profiled. A bf16 step predicted from
    the fp32 profile would be of a step that does not run: with the failure in the same run
    (planted from the bf16 run's own measurement) it is refused, naming the error; tf32 and
    another batch are still predicted."""
    from gpuaudit.model.schema import read_run

    h100 = h100_rates(SPECS)
    run = read_run(ZOO / "adaptive-softmax-fp32-h100-run.json.gz")
    model = "styles.held_out_fifth:adaptive_softmax"
    assert predict(load_profile(run), h100, Change(precision="bf16"), SPECS).step_ms > 0
    failed = next(m for m in run.measurements if m.name == f"{model}/fp32/throughput")
    failed = failed.model_copy(update={
        "name": f"{model}/bf16/throughput", "value": None, "samples": [],
        "params": {**failed.params, "mode": "bf16"},
        "skipped_reason": "RuntimeError: index_copy_(): self and source expected to have the "
                          "same dtype, but got (self) BFloat16 and (source) Float"})
    planted = run.model_copy(update={"measurements": [*run.measurements, failed]})
    prof = load_profile(planted)
    assert set(prof.failed_modes) == {"bf16"}
    with pytest.raises(BadInputError, match=r"--precision bf16: .*adaptive_softmax failed in "
                                            r"bf16 in run .* \(RuntimeError: index_copy_"):
        predict(prof, h100, Change(precision="bf16"), SPECS)
    assert predict(prof, h100, Change(precision="tf32"), SPECS).step_ms > 0
    assert predict(prof, h100, Change(batch=64), SPECS).step_ms > 0
    # a mode skipped for memory is no failure of the model's code
    oom = failed.model_copy(update={"skipped_reason": "out of memory at batch 32"})
    run2 = run.model_copy(update={"measurements": [*run.measurements, oom]})
    assert load_profile(run2).failed_modes == {}
