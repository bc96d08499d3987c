"""Workloads without torch: FLOP formulas and MFU, percentiles, scaling, the Poisson
generator, the dynamic batcher and the QPS search (on a virtual clock), the crop sampler,
the entry-point loader's errors, OOM reasons and the findings. Exact values throughout."""

from __future__ import annotations

import math
import random
import statistics

import pytest

from gpuaudit.bench.workload_findings import workload_findings
from gpuaudit.errors import BadInputError
from gpuaudit.model import Measurement, Severity
from gpuaudit.percentile import percentile
from gpuaudit.specs import lookup
from gpuaudit.workloads import data, serving
from gpuaudit.workloads.entry import resolve, split_batch
from gpuaudit.workloads.flops import (
    FlopCount,
    mfu,
    palm_forward_flops_per_token,
    palm_train_flops_per_token,
    resnet_flops,
)
from gpuaudit.workloads.memory import is_oom, oom_reason, requested_bytes
from gpuaudit.workloads.models import PRESETS
from gpuaudit.workloads.precision import TrainMode, parse_mode, unsupported
from gpuaudit.workloads.stats import gpus_needed, p50_p90_p99, scaling_efficiency

# -- FLOPs and MFU ----------------------------------------------------------------------------


def test_palm_formula_by_hand_for_gpt_124m():
    p = PRESETS["gpt-124m"]
    # 12 layers × 12·768² (QKV, output, MLP in, MLP out) + the tied 768 × 50304 output layer
    assert p.matmul_params == 12 * 12 * 768 * 768 + 768 * 50304 == 123_568_128
    attention = 12 * 12 * 12 * 64 * 1024  # 12·L·H·Q·T
    assert palm_train_flops_per_token(p.matmul_params, 12, 12, 64, 1024) == \
        6 * 123_568_128 + attention
    assert palm_forward_flops_per_token(p.matmul_params, 12, 12, 64, 1024) == \
        2 * 123_568_128 + attention // 3
    assert p.train_flops_per_token(1024) == 854_654_976


def test_the_issue_targets_agree_500k_tokens_is_43_percent_mfu_on_an_h200():
    peak = lookup(nvml_name="NVIDIA H200").peak("bf16")  # dense datasheet figure
    per_token = PRESETS["gpt-124m"].train_flops_per_token(1024)
    assert mfu(500_000 * per_token, peak) == pytest.approx(500_000 * 854_654_976 / 989.5e12)
    assert 0.43 < mfu(500_000 * per_token, peak) < 0.433
    assert mfu(1e15, None) is None


def test_flop_count_takes_flash_attentions_recomputation_out():
    c = FlopCount(total=1000 + 100 + 250, attention_forward=100, attention_backward=250)
    assert c.dense == 1000
    assert c.model == 1000 + 100 + 200  # backward = 2 × forward, as PaLM counts it


def test_resnet_flops_by_hand_for_one_bottleneck_stage():
    f = resnet_flops((1,), width=8, image_size=32, num_classes=10)
    stem = 2 * 49 * 3 * 8 * 16 * 16  # 7×7/2 → 16×16
    # max pool → 8×8; block: 1×1 8→8, 3×3 8→8, 1×1 8→32, projection 8→32, all at 8×8
    block = 2 * 8 * 8 * 64 + 2 * 9 * 8 * 8 * 64 + 2 * 8 * 32 * 64 + 2 * 8 * 32 * 64
    assert f.stem == stem
    assert f.forward == stem + block + 2 * 32 * 10
    assert f.train == 3 * f.forward and f.train_executed == 3 * f.forward - stem


# -- statistics ------------------------------------------------------------------------------


def test_percentiles_interpolate_like_numpy():
    np = pytest.importorskip("numpy")
    assert p50_p90_p99([1, 2, 3, 4]) == (2.5, pytest.approx(3.7), pytest.approx(3.97))
    assert percentile([7.0], 99) == 7.0
    rng = random.Random(3)
    xs = [rng.expovariate(1) for _ in range(101)]
    for p in (0, 1, 50, 90, 99, 100):
        assert percentile(xs, p) == pytest.approx(float(np.percentile(xs, p)), rel=1e-12)
    with pytest.raises(ValueError):
        percentile([], 50)


def test_scaling_efficiency_and_gpus_needed():
    assert scaling_efficiency(190.0, 2, 100.0) == 0.95
    assert scaling_efficiency(100.0, 1, 100.0) == 1.0
    assert gpus_needed(100_000, 12_031) == 9
    assert gpus_needed(24_062, 12_031) == 2  # exactly two, not three
    assert gpus_needed(5, 12_031) == 1
    assert gpus_needed(10, 0) is None


# -- the Poisson generator, the batcher, the search -------------------------------------------


def test_unit_arrivals_are_the_seeded_exponential_gaps():
    rng = random.Random(7)
    gaps = [rng.expovariate(1.0) for _ in range(5)]
    expected = [sum(gaps[:i + 1]) for i in range(5)]
    assert serving.unit_arrivals(5, seed=7) == pytest.approx(expected, rel=1e-15)
    assert serving.poisson_arrivals(200.0, 5, seed=7) == pytest.approx(
        [t / 200 for t in expected])


def test_poisson_arrivals_have_the_rate_and_the_dispersion_of_a_poisson_process():
    arrivals = serving.poisson_arrivals(1000.0, 50_000, seed=1)
    assert 50_000 / arrivals[-1] == pytest.approx(1000, rel=0.02)
    counts = [0] * int(arrivals[-1] / 0.01)  # requests per 10 ms window: mean 10
    for t in arrivals:
        if int(t / 0.01) < len(counts):
            counts[int(t / 0.01)] += 1
    mean, var = statistics.fmean(counts), statistics.pvariance(counts)
    assert mean == pytest.approx(10, rel=0.03)
    assert var / mean == pytest.approx(1.0, abs=0.06)  # Poisson: variance = mean


def _serve(arrivals_ms, max_batch, wait_ms, service_ms):
    clock = serving.VirtualClock(lambda k: service_ms(k) / 1e3)
    return serving.serve([a / 1e3 for a in arrivals_ms], serving.BatchPolicy(max_batch,
                         wait_ms / 1e3), clock.serve, clock)


def test_batcher_waits_for_the_oldest_requests_deadline():
    r = _serve([0, 1, 2], max_batch=4, wait_ms=5, service_ms=lambda k: 10)
    assert r.batches == (3,)  # dispatched at 5 ms with the three that had come
    assert [x * 1e3 for x in r.latencies_s] == pytest.approx([15, 14, 13])
    assert r.duration_s == pytest.approx(0.015)


def test_batcher_dispatches_a_full_batch_at_once_and_serves_backlog_oldest_first():
    r = _serve([0, 1, 2, 3, 30], max_batch=2, wait_ms=10, service_ms=lambda k: 4)
    # full at 1 ms → done 5; requests 2 and 3 waited during service → full → done 9;
    # request 4 alone: waits its 10 ms → done 44.
    assert r.batches == (2, 2, 1)
    assert [x * 1e3 for x in r.latencies_s] == pytest.approx([5, 4, 7, 6, 14])


def test_qps_search_brackets_the_slo_boundary():
    # A queue whose p99 is 1 ms / (1 − load): 5 ms is met up to 800 QPS exactly.
    def p99(q):
        return 0.001 / (1 - q / 1000) if q < 1000 else math.inf

    s = serving.find_max_qps(p99, 0.005, 50, 1000, rel_tol=0.01, max_trials=30)
    assert 800 * 0.99 <= s.max_qps <= 800
    assert all((t.qps <= 800) == t.ok for t in s.trials)
    assert (s.trials[0].qps, s.trials[0].ok, s.trials[1].qps) == (1000, False, 50)
    assert s.p99_at_max_s == pytest.approx(p99(s.max_qps))
    assert serving.find_max_qps(lambda q: 0.001, 0.005, 50, 1000).max_qps == 1000
    assert serving.find_max_qps(lambda q: 0.5, 0.005, 50, 1000).max_qps == 0


def test_qps_search_against_the_simulated_batching_server():
    unit = serving.unit_arrivals(4000, seed=0)
    policy = serving.BatchPolicy(32, 0.002)

    def p99_at(q):
        clock = serving.VirtualClock(lambda k: 0.001 + 0.0001 * k)  # 1 ms + 0.1 ms a request
        return serving.serve([t / q for t in unit], policy, clock.serve, clock).p99_s

    capacity = 32 / (0.001 + 0.0032)
    s = serving.find_max_qps(p99_at, 0.010, 0.05 * capacity, capacity, rel_tol=0.01)
    assert 0 < s.max_qps < capacity
    assert p99_at(s.max_qps) <= 0.010
    assert p99_at(s.max_qps * 1.05) > 0.010  # the bracket is tight
    again = serving.find_max_qps(p99_at, 0.010, 0.05 * capacity, capacity, rel_tol=0.01)
    assert again == s  # deterministic: same arrivals, same clock


def test_requests_per_trial():
    assert serving.requests_for(10_000, 1.5, 600) == 15_000
    assert serving.requests_for(100, 1.5, 600) == 600


# -- data loading helpers --------------------------------------------------------------------


def test_random_resized_crop_box_stays_inside_and_is_reproducible():
    for seed in range(200):
        left, top, right, bottom = data.random_resized_crop_box(500, 375, random.Random(seed))
        assert 0 <= left < right <= 500 and 0 <= top < bottom <= 375
        area = (right - left) * (bottom - top) / (500 * 375)
        assert 0.07 <= area <= 1.01
        assert 3 / 4 - 0.05 <= (right - left) / (bottom - top) <= 4 / 3 + 0.05
    assert data.random_resized_crop_box(500, 375, random.Random(5)) == \
        data.random_resized_crop_box(500, 375, random.Random(5))


def test_crop_falls_back_to_a_centred_crop_at_the_nearest_ratio():
    class NeverFits(random.Random):
        def uniform(self, a, b):  # every try asks for 100× the image
            return 100.0 if a == 0.08 else 0.0

    assert data.random_resized_crop_box(1000, 10, NeverFits()) == (493, 0, 506, 10)
    assert data.random_resized_crop_box(30, 30, NeverFits()) == (0, 0, 30, 30)


def test_worker_counts_and_the_workers_needed():
    assert data.worker_counts(16) == [0, 1, 2, 4, 8, 16]
    assert data.worker_counts(6) == [0, 1, 2, 4, 6]
    assert data.worker_counts(64, limit=8) == [0, 1, 2, 4, 8]
    assert data.workers_needed(2512, 16, 6812) == math.ceil(6812 / (2512 / 16)) == 44
    assert data.keeps_up(7000, 6812) is True and data.keeps_up(2512, 6812) is False
    assert data.keeps_up(2512, None) is None


# -- modes, precisions, entry points, OOM ------------------------------------------------------


def test_modes_parse_in_any_order_and_print_canonically():
    assert parse_mode("bf16+compile+cl") == TrainMode("bf16", compile=True, channels_last=True)
    assert parse_mode("bf16+compile+cl").id == "bf16+cl+compile"
    assert parse_mode("fp32+foreach").fused is False
    for bad in ("fp64", "bf16+turbo"):
        with pytest.raises(BadInputError):
            parse_mode(bad)


def test_unsupported_precisions_say_why():
    assert unsupported("bf16", (9, 0), training=True) is None
    assert "8.0 or newer (this GPU: 7.5)" in unsupported("bf16", (7, 5), training=True)
    assert unsupported("fp8", (8, 9), training=False) is None
    assert "8.9" in unsupported("fp8", (8, 0), training=False)
    assert "inference only" in unsupported("fp8", (9, 0), training=True)
    assert "convolution" in unsupported("int8", (9, 0), training=False, image_model=True)
    assert "CPU" in unsupported("tf32", None, training=True)
    assert unsupported("bf16", None, training=True) is None


def test_entry_point_errors_are_one_line_bad_input(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "broken_mod.py").write_text("raise RuntimeError('no GPU driver\\nmore')\n")
    (tmp_path / "fine_mod.py").write_text("def build():\n    return 1\nVALUE = 3\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    cases = {"not-a-spec": "expected pkg.module:function",
             "no_such_mod:build": "cannot import no_such_mod: ModuleNotFoundError",
             "broken_mod:build": "cannot import broken_mod: RuntimeError: no GPU driver",
             "fine_mod:nope": "has no attribute 'nope'",
             "fine_mod:VALUE": "not callable",
             # a file's path typed for the module: the name to type instead
             "fine_mod.py:build": "not a file's: fine_mod:build from its folder$",
             "./fine_mod.py:build": "not a file's: fine_mod:build from its folder$",
             "src/models/fine_mod.py:build": "fine_mod:build from src/models \\(or with it"}
    for spec, text in cases.items():
        with pytest.raises(BadInputError, match=text) as err:
            resolve(spec)
        assert "\n" not in str(err.value)
    assert resolve("fine_mod:build")() == 1


def test_batches_split_into_inputs_and_target():
    assert split_batch(((1, 2), 3)) == ((1, 2), 3)
    assert split_batch((1, 2)) == ((1, 2), None)
    assert split_batch(5) == ((5,), None)


def test_a_tensor_pair_is_input_and_target_where_the_forward_takes_one_argument():
    """`return x, y` as a user writes it: the input and its target for a forward of one
    positional argument (others defaulted), two inputs for a forward that needs two."""
    torch = pytest.importorskip("torch")

    class One(torch.nn.Module):
        def forward(self, x, mask=None):
            return x

    class Two(torch.nn.Module):
        def forward(self, a, b):
            return a + b

    x, y = torch.zeros(2, 3), torch.ones(2)
    assert split_batch((x, y), One()) == ((x,), y)
    assert split_batch((x, y), torch.nn.Sequential(torch.nn.Identity())) == ((x,), y)
    assert split_batch((x, y), Two()) == ((x, y), None)
    assert split_batch([x, y], One()) == ((x,), y)
    assert split_batch(((x,), y), Two()) == ((x,), y)  # the documented form is unchanged


def test_a_flat_batch_ends_with_its_target_where_the_forward_takes_one_fewer():
    """`return src, tgt_in, tgt_out` (an encoder-decoder's teacher forcing): two inputs and the
    target for a forward of two; three inputs for a forward that needs three."""
    torch = pytest.importorskip("torch")

    class Two(torch.nn.Module):
        def forward(self, src, tgt, src_mask=None):
            return src + tgt

    class Three(torch.nn.Module):
        def forward(self, a, b, c):
            return a + b + c

    a, b, y = torch.zeros(2, 3), torch.ones(2, 3), torch.ones(2)
    assert split_batch((a, b, y), Two()) == ((a, b), y)
    assert split_batch([a, b, y], Two()) == ((a, b), y)
    assert split_batch((a, b, y), Three()) == ((a, b, y), None)
    assert split_batch((a, b, y)) == ((a, b, y), None)  # no model: the inputs, as before


def test_oom_reason_says_what_was_needed():
    msg = ("CUDA out of memory. Tried to allocate 20.00 GiB. GPU 0 has a total capacity of "
           "139.81 GiB of which 3.1 GiB is free.")
    assert requested_bytes(msg) == 20 * 2**30
    assert requested_bytes("DefaultCPUAllocator: can't allocate memory: you tried to "
                           "allocate 1234 bytes") == 1234
    reason = oom_reason(msg, in_use_bytes=140_000_000_000, total_bytes=150_000_000_000)
    assert reason == ("out of memory: needs more than 161.5 GB (140.0 GB in use, 21.5 GB more "
                      "requested, the GPU has 150.0 GB)")
    assert is_oom(MemoryError()) and not is_oom(ValueError("shape mismatch"))


# -- findings ---------------------------------------------------------------------------------


def _m(name, value, **params):
    return Measurement(suite="train", name=name, unit="x", value=value, params=params)


def test_an_input_pipeline_slower_than_training_is_a_warning():
    (f,) = workload_findings([_m("data/jpeg/best", 2512.0, keeps_up=False, train_rate=6812.3,
                                 workers=16, cpu_cores=16, workers_needed=44)])
    assert (f.code, f.severity) == ("workloads.input-bound", Severity.WARN)
    assert "2,512 images/s with 16 workers on 16 CPU cores" in f.message
    assert "6,812 images/s" in f.message and "wait 63%" in f.message
    assert "about 44 workers" in f.advice
    assert workload_findings([_m("data/jpeg/best", 9000.0, keeps_up=True)]) == []


def test_poor_gpu_scaling_is_a_warning_cpu_ranks_are_not():
    low = _m("gpt-124m/ddp/n2/scaling", 85.0, gpus=2, device="cuda", model="gpt-124m",
             mode="bf16+compile")
    (f,) = workload_findings([low])
    assert f.code == "workloads.poor-scaling" and "85.0%" in f.message
    assert workload_findings([low.model_copy(update={"params": {**low.params,
                                                                 "device": "cpu"}})]) == []
    assert workload_findings([low.model_copy(update={"value": 95.0})]) == []


def test_infer_mode_plan_orders_modes_by_cost_and_keeps_batch_one_modes() -> None:
    """A run cut short keeps the cheap figures: at batch 1 the standard plan for a bf16 CNN
    measures compile+cudagraph (seconds of compiling) before max-autotune (minutes)."""
    from gpuaudit.bench.context import BenchContext, Profile
    from gpuaudit.model import Host, Machine
    from gpuaudit.model.run import utc_now
    from gpuaudit.workloads.suite_infer import mode_plan

    def ctx(profile: Profile, **options: object) -> BenchContext:
        return BenchContext(machine=Machine(captured_at=utc_now(), host=Host(
            hostname="h", python_version="3")), devices=(), profile=profile,
            options=dict(options))

    std = mode_plan(ctx(Profile.STANDARD), "resnet50", "bf16", (1, 8, 64), on_gpu=True)
    assert std[-3:] == [("compile", 64), ("compile+cudagraph", 1), ("max-autotune", 1)]
    assert std[:3] == [("eager", 1), ("eager", 8), ("eager", 64)]
    # transformers and other precisions: no compiled inference in standard
    assert all(m in ("eager", "cudagraph")
               for m, _ in mode_plan(ctx(Profile.STANDARD), "gpt-124m", "bf16", (1, 8), True))
    assert mode_plan(ctx(Profile.STANDARD), "resnet50", "bf16", (1, 8), on_gpu=False) == [
        ("eager", 1), ("eager", 8)]
    # modes chosen by the caller come cheapest first, whatever order they were given in
    chosen = ctx(Profile.STANDARD, infer_modes="max-autotune,eager,compile+cudagraph")
    assert mode_plan(chosen, "resnet50", "bf16", (1,), on_gpu=True) == [
        ("eager", 1), ("compile+cudagraph", 1), ("max-autotune", 1)]
    assert mode_plan(ctx(Profile.QUICK), "resnet50", "bf16", (1, 256), on_gpu=True) == [
        ("cudagraph", 256)]


def test_the_biggest_layers_of_the_first_family_share_the_timing_budget():
    from gpuaudit.workloads.timing import biggest_first

    fp32 = {"a": [2, 10], "b": [1, 30], "c": [4, 30], "d": [1, 5]}
    families = {"fp32": fp32, "bf16": {"a": [2, 5]}}
    top, each = biggest_first(families, 3, 6.0)
    # by size, ties in the order seen; the second family's tally does not choose
    assert [k for k, _ in top] == ["b", "c", "a"]
    assert each == 6.0 / (3 * 2)
    assert biggest_first({}, 3, 6.0) == ([], 0.0)
    assert biggest_first({"fp32": {}}, 3, 6.0) == ([], 0.0)


def test_the_default_loss_reads_the_outputs_users_models_return():
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.entry import default_loss

    F = torch.nn.functional
    torch.manual_seed(0)
    tokens = torch.randn(4, 7, 11)  # (N, L, classes): a language model's logits
    per_step = torch.randn(4, 11, 7)  # (N, classes, L): a conv1d net's, torch's own layout
    seq_y = torch.randint(0, 11, (4, 7))
    assert torch.equal(default_loss(tokens, seq_y),
                       F.cross_entropy(tokens.flatten(0, 1), seq_y.flatten()))
    assert torch.equal(default_loss(per_step, seq_y), F.cross_entropy(per_step, seq_y))
    pixels = torch.randn(2, 5, 8, 8)  # a segmentation net's (N, classes, H, W)
    pix_y = torch.randint(0, 5, (2, 8, 8))
    assert torch.equal(default_loss(pixels, pix_y), F.cross_entropy(pixels, pix_y))
    # both layouts fit (N, C, C) against (N, C): the last dimension's classes, as before
    square = torch.randn(3, 6, 6)
    square_y = torch.randint(0, 6, (3, 6))
    assert torch.equal(default_loss(square, square_y),
                       F.cross_entropy(square.flatten(0, 1), square_y.flatten()))
    # a Hugging Face style output: its own loss where it has one, else its logits
    y = torch.randint(0, 11, (4, 7))
    own = torch.tensor(2.5)
    assert default_loss({"loss": own, "logits": tokens}, y) is own
    assert torch.equal(default_loss({"loss": None, "logits": tokens}, y), default_loss(tokens, y))
    assert torch.equal(default_loss(((tokens, 1),), y), default_loss(tokens, y))
    with pytest.raises(TypeError, match="needs a tensor output"):
        default_loss({"hidden": [1, 2]}, y)
    # a torchvision detector in training returns its losses by name: all of them train
    parts = {"loss_classifier": torch.tensor(0.5), "loss_box_reg": torch.tensor(0.25),
             "loss_objectness": torch.tensor(2.0)}
    assert default_loss(parts, None).item() == 2.75
    # nanoGPT's `logits, loss = model(x, y)`: the model's own loss, not the logits' mean
    assert default_loss((tokens, own), None) is own
    assert default_loss([tokens, None, own], None) is own
    # with a target, a scalar beside the logits is an auxiliary term: the loss is the target's
    assert torch.equal(default_loss((tokens, own), y), default_loss(tokens, y))
    # a dataclass output reads as its fields
    from dataclasses import dataclass

    @dataclass
    class Out:
        hidden: object
        logits: object

    assert torch.equal(default_loss(Out(None, tokens), y), default_loss(tokens, y))
    # a mapping of outputs (a segmentation net's out and aux) is not summed: its first
    seg = {"out": pixels, "aux": pixels * 2}
    assert torch.equal(default_loss(seg, pix_y), F.cross_entropy(pixels, pix_y))
