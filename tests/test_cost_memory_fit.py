"""memory_fit: exact values from the ZeRO paper, Korthikanti 2022, Llama-2-7B KV cache."""

from __future__ import annotations

import pytest

from gpuaudit.cost.memory_fit import (
    activation_bytes,
    finetune_memory,
    fit,
    inference_memory,
    kv_cache_bytes,
    lora_trainable_params,
    training_memory,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model.presets import model_shape

LLAMA2_7B = dict(layers=32, hidden=4096)  # 32 heads × 128, no GQA


def test_7b_full_finetune_adam_mixed_precision_is_112_gb_of_states():
    est = training_memory(model_shape(7e9, **LLAMA2_7B))
    assert est.weights_bytes == 14e9
    assert est.gradients_bytes == 14e9
    assert est.optimizer_bytes == 84e9
    assert est.states_total_bytes == 112e9
    assert est.sharding == "none"


@pytest.mark.parametrize(("stage", "per_gpu_gb"), [
    (0, 120.0), (1, 31.40625), (2, 16.640625), (3, 1.875)])
def test_zero_paper_figure_1_7_5b_on_64_gpus(stage, per_gpu_gb):
    # Rajbhandari et al. 2020, Figure 1: Ψ = 7.5B, Nd = 64, K = 12 → 120, 31.4, 16.6, 1.9 GB.
    est = training_memory(model_shape(7.5e9, **LLAMA2_7B), zero_stage=stage, gpus=64)
    states = est.weights_bytes + est.gradients_bytes + est.optimizer_bytes
    assert states == pytest.approx(per_gpu_gb * 1e9, rel=1e-12)
    assert est.sharding == ("none" if stage == 0 else f"zero-{stage}")


def test_optimizer_choices_and_fp32_training():
    shape = model_shape(1e9, **LLAMA2_7B)
    assert training_memory(shape, optimizer="adam8bit").states_total_bytes == 10e9
    assert training_memory(shape, optimizer="sgd").states_total_bytes == 12e9
    # fp32: 4 B weights + 4 B gradients + 8 B moments, still 16 B/param, no master copy.
    fp32 = training_memory(shape, precision="fp32")
    assert (fp32.weights_bytes, fp32.optimizer_bytes) == (4e9, 8e9)


def test_activations_korthikanti_eq2_selective_and_full():
    shape = model_shape(7e9, **LLAMA2_7B)
    s, b, h, a, n = 2048, 1, 4096, 32, 32
    none = activation_bytes(shape, micro_batch=b, seq_len=s, checkpointing="none")
    assert none == n * s * b * h * (34 + 5 * a * s / h)  # = 32 · 2048 · 4096 · 114
    assert none == 30_601_641_984
    assert activation_bytes(shape, micro_batch=b, seq_len=s, checkpointing="selective") == \
        n * 34 * s * b * h
    assert activation_bytes(shape, micro_batch=b, seq_len=s, checkpointing="full") == \
        n * 2 * s * b * h + s * b * h * 114
    # fp32 activations take twice the bytes of the 16-bit coefficients.
    assert activation_bytes(shape, micro_batch=b, seq_len=s, precision="fp32") == \
        2 * n * 34 * s * b * h


def test_kv_cache_llama2_7b_4k_context_batch_1_fp16_is_2_gib():
    shape = model_shape(6.74e9, **LLAMA2_7B)
    assert (shape.heads, shape.kv_heads, shape.head_dim) == (32, 32, 128)
    assert kv_cache_bytes(shape, batch=1, context=4096, dtype="fp16") == 2 * 2**30
    est = inference_memory(shape, dtype="fp16", batch=1, context=4096)
    assert est.weights_bytes == 13.48e9
    assert est.kv_cache_bytes == 2 * 2**30
    # Tensor parallel over 2 GPUs halves both.
    two = inference_memory(shape, dtype="fp16", batch=1, context=4096, gpus=2)
    assert (two.weights_bytes, two.kv_cache_bytes, two.sharding) == \
        (6.74e9, 2**30, "tensor-parallel")


def test_gqa_shrinks_the_kv_cache_and_int4_weights():
    shape = model_shape(70e9, layers=80, hidden=8192, kv_heads=8)
    assert kv_cache_bytes(shape, batch=1, context=4096, dtype="fp16") == \
        2 * 4096 * 80 * 8 * 128 * 2
    est = inference_memory(shape, dtype="int4", batch=1, context=4096)
    assert est.weights_bytes == 35e9
    assert est.basis[1].endswith("2 B (fp16)")  # 4-bit weights, the KV cache stays fp16


def test_lora_freezes_the_base_and_trains_adapters_only():
    shape = model_shape(7e9, **LLAMA2_7B)
    trainable = lora_trainable_params(shape, rank=16)
    assert trainable == 32 * 4 * 16 * 2 * 4096 == 16_777_216
    est = finetune_memory(shape, method="lora", lora_rank=16)
    assert est.gradients_bytes == trainable * 2
    assert est.optimizer_bytes == trainable * 12
    assert est.weights_bytes == 7e9 * 2  # frozen 16-bit base + 16-bit adapters
    q = finetune_memory(shape, method="qlora", lora_rank=16)
    assert q.weights_bytes == (7e9 - trainable) * 0.5 + trainable * 2
    full = finetune_memory(shape, method="full")
    assert full.states_total_bytes == 112e9 and full.kind.value == "finetune"


def test_fit_verdict_with_margin():
    shape = model_shape(7e9, **LLAMA2_7B)
    est = training_memory(shape, zero_stage=3, gpus=8)
    assert est.per_gpu_bytes == 14e9 + 34 * 2048 * 4096 * 32
    ok = fit(est, 80e9)
    assert ok.fits and ok.usable_bytes == 72e9
    assert ok.reason == ("fits: needs 23.1 GB per GPU (zero-3 over 8 GPUs); 72 GB usable of "
                         "80 GB (10% kept free)")
    tight = fit(est, 24e9, margin=0.10)
    assert not tight.fits and tight.reason.startswith("does not fit: needs 23.1 GB")
    assert fit(est, 24e9, margin=0.0).fits


def test_derived_shape_keeps_12_l_h2_close_to_n():
    shape = model_shape(7e9)
    assert shape.derived and (shape.layers, shape.hidden) == (33, 4224)
    assert 12 * shape.layers * shape.hidden**2 == pytest.approx(7e9, rel=0.02)


@pytest.mark.parametrize("call", [
    lambda: model_shape(0),
    lambda: training_memory(model_shape(1e9), optimizer="lion"),
    lambda: training_memory(model_shape(1e9), zero_stage=4, gpus=8),
    lambda: training_memory(model_shape(1e9), precision="fp12"),
    lambda: activation_bytes(model_shape(1e9), micro_batch=1, seq_len=8,
                             checkpointing="half"),  # type: ignore[arg-type]
    lambda: finetune_memory(model_shape(1e9), method="prefix"),
    lambda: fit(training_memory(model_shape(1e9)), 80e9, margin=1.0),
])
def test_bad_input_is_bad_input_error(call):
    with pytest.raises(BadInputError):
        call()
