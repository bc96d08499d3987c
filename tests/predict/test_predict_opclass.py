"""The unfused attention path found among a step's units by their names and shapes, and the
kernels that contradict their unit's class (`gpuaudit.workloads.opclass`)."""

from __future__ import annotations

import pytest

from gpuaudit.workloads import optrace
from gpuaudit.workloads.opclass import UnitCall, classify_units, disagrees, op_class


def _calls(*names_dims):
    return [UnitCall(n, d) for n, d in names_dims]


B3 = ((8, 64, 32), (8, 32, 64))  # batched operands


def test_a_batched_matmul_into_a_softmax_into_a_matmul_is_attention():
    calls = _calls(("linear", None), ("transpose", None), ("matmul", B3), ("mul", None),
                   ("masked_fill", None), ("softmax", ((8, 64, 64),)), ("dropout", None),
                   ("matmul", ((8, 64, 64), (8, 64, 32))), ("linear", None))
    assert classify_units(calls) == ["gemm", "elementwise", "attention", "attention",
                                     "attention", "attention", "attention", "attention",
                                     "gemm"]


@pytest.mark.parametrize("calls", [
    # a router: a linear layer into a softmax (MoE's top-k gate)
    [("linear", None), ("softmax", ((4096, 8),)), ("topk", None)],
    # 2-D matmuls into a softmax: a classifier, not scores over keys
    [("matmul", ((64, 32), (32, 10))), ("softmax", ((64, 10),)), ("matmul", ((64, 10),
                                                                             (10, 5)))],
    # scores and a softmax but nothing takes its output by matmul
    [("bmm", B3), ("softmax", ((8, 64, 64),)), ("sum", None)],
])
def test_other_softmaxes_are_not_attention(calls):
    assert "attention" not in classify_units(_calls(*calls))


S4 = (2, 8, 128, 128)  # scores: batch, heads, queries, keys
Q4, KT4, V4 = (2, 8, 128, 32), (2, 8, 32, 128), (2, 8, 128, 32)


def test_an_inline_position_bias_and_mask_between_scores_and_softmax_stay_attention():
    # ALiBi written by hand (the profiler's units of one such layer, on the CPU): the bias
    # and the causal mask are made between the scores' matmul and the softmax, 11 units
    calls = _calls(("matmul", (Q4, KT4)), ("div", (S4, ())), ("arange", ((), ())),
                   ("unsqueeze", ((128,), ())), ("sub", ((1, 128), (128, 1))),
                   ("abs", ((128, 128),)), ("neg", ((128, 128),)), ("to", ((128, 128), ())),
                   ("mul", ((1, 8, 1, 1), (128, 128))), ("add", (S4, (1, 8, 128, 128))),
                   ("ones", ((), ())), ("triu", ((128, 128), ())),
                   ("masked_fill", (S4, (128, 128), ())), ("softmax", (S4, (), ())),
                   ("to", (S4, ())), ("matmul", (S4, V4)), ("linear", ((2, 128, 256),)))
    assert classify_units(calls) == ["attention"] * 16 + ["gemm"]
    # with no shapes recorded the same layer is past the reach of the name alone
    blind = [UnitCall(c.name) for c in calls]
    assert "attention" not in classify_units(blind)


def test_a_mask_built_cell_by_cell_before_the_softmax_stays_attention_unless_a_layer_intervenes():
    # Swin's shifted windows (torchvision's swin_t): after the scores, the window mask is
    # filled one region at a time, 9 regions, then compared, filled and added: 19 units
    s = (16, 4, 49, 49)
    mask = [("new_zeros", ((), ()))] + [("fill_", ((7, 7), ()))] * 9 + \
        [("sub", ((4, 1, 49), (4, 49, 1))), ("ne", ((4, 49, 49), ())),
         ("masked_fill", ((4, 49, 49), (), ())), ("eq", ((4, 49, 49), ())),
         ("masked_fill", ((4, 49, 49), (), ())), ("add", ((4, 4, 4, 49, 49), (1, 4, 1, 49, 49)))]
    head = [("linear", ((16, 49, 96),)), ("matmul", ((16, 4, 49, 24), (16, 4, 24, 49))),
            ("add", (s, (4, 49, 49)))]
    tail = [("softmax", (s, (), ())), ("dropout", (s, ())),
            ("matmul", (s, (16, 4, 49, 24))), ("linear", ((16, 49, 96),))]
    assert classify_units(_calls(*head, *mask, *tail)) == \
        ["gemm"] + ["attention"] * (2 + len(mask) + 3) + ["gemm"]
    # past the first 16 units, a linear layer between ends the search: its product is not
    # the one the softmax takes
    layered = _calls(*head, *mask[:8], ("linear", ((16, 49, 96),)), *mask[8:], *tail)
    assert classify_units(layered).count("attention") == 0


def test_scores_summed_from_several_products_are_all_attention():
    # DeBERTa's disentangled attention (Hugging Face's, the profiler's units on the CPU):
    # content scores, then the position embeddings projected (two linear layers) and the
    # content-to-position and position-to-content products, gathered and added
    s3, q3, k3 = (8, 64, 64), (8, 64, 32), (8, 32, 64)
    calls = _calls(("linear", ((2, 64, 128),)), ("bmm", (q3, k3)), ("dropout", ((64, 128),)),
                   ("linear", ((1, 64, 128),)), ("repeat", ((4, 64, 32),)),
                   ("linear", ((1, 64, 128),)), ("bmm", (q3, k3)), ("clamp", ((1, 1, 64, 64),)),
                   ("gather", (s3, (), s3)), ("bmm", (q3, k3)), ("gather", (s3, (), s3)),
                   ("add_", (s3, s3)), ("add", (s3, s3)), ("masked_fill", (s3, s3)),
                   ("softmax", (s3, ())), ("dropout", (s3, ())), ("bmm", (s3, q3)),
                   ("linear", ((2, 64, 128),)))
    got = classify_units(calls)
    assert [c for c, u in zip(got, calls, strict=True) if u.name == "bmm"] == ["attention"] * 4
    # the position embeddings' projections between stay linear layers
    assert [c for c, u in zip(got, calls, strict=True) if u.name == "linear"] == ["gemm"] * 4
    # a normalization between ends the search: the layer before's product is not summed in
    layered = _calls(("bmm", (q3, k3)), ("layer_norm", ((2, 64, 128),)), *[(c.name, c.dims)
                                                                          for c in calls])
    assert classify_units(layered)[0] == "gemm"


def test_a_softmax_written_with_logsumexp_is_attention():
    # Reformer's LSH and local attention: exp(scores − logsumexp(scores))
    calls = _calls(("matmul", (Q4, KT4)), ("div", (S4, ())), ("where", (S4, S4, ())),
                   ("logsumexp", (S4, (), ())), ("sub", (S4, (2, 8, 128, 1))), ("exp", (S4,)),
                   ("dropout", (S4, ())), ("matmul", (S4, V4)), ("linear", ((2, 128, 256),)))
    assert classify_units(calls) == ["attention"] * 8 + ["gemm"]


def test_an_einsums_operands_are_read_from_its_tensor_list():
    ev = optrace.OpEvent("aten::einsum", 1, 0.0, 1.0, {
        "Input Dims": [[], [list(Q4), list(V4)], []],
        "Input type": ["", "TensorList", ""]})
    assert optrace.dims(ev) == ((), Q4, V4, ())
    calls = _calls(("einsum", optrace.dims(ev)), ("mul", (S4, ())), ("softmax", (S4, (), ())),
                   ("einsum", ((), S4, V4, ())))
    assert classify_units(calls) == ["attention"] * 4


def test_the_scores_are_the_product_the_softmax_takes_not_the_nearest_matmul():
    # Transformer-XL's relative scores: a second product over 256 positions, shifted to the
    # keys' 128, lies nearer the softmax than the content scores it is added to
    rel = (2, 8, 128, 256)
    calls = _calls(("linear", ((2, 128, 256),)), ("matmul", (Q4, KT4)),
                   ("matmul", (Q4, (2, 8, 32, 256))), ("pad", (rel, ())),
                   ("slice", ((2, 8, 128, 257), ())), ("add", (S4, S4)),
                   ("softmax", (S4, (), ())), ("matmul", (S4, V4)))
    assert classify_units(calls) == ["gemm"] + ["attention"] * 7
    # a softmax whose rows no batched matmul before it made, nor one after it takes
    other = _calls(("bmm", ((8, 64, 32), (8, 32, 16))), ("softmax", ((8, 64, 64),)),
                   ("bmm", ((8, 64, 64), (8, 64, 32))))
    assert "attention" not in classify_units(other)
    taken = _calls(("bmm", B3), ("softmax", ((8, 64, 64),)), ("bmm", ((8, 32, 64), (8, 64, 8))))
    assert "attention" not in classify_units(taken)


def test_a_kernel_that_multiplies_under_a_memory_bound_unit_contradicts_it():
    assert disagrees("elementwise", "sm90_xmma_gemm_bf16bf16_bf16f32_f32_tn_n")
    assert not disagrees("elementwise", "void at::native::vectorized_elementwise_kernel<4>")
    assert not disagrees("gemm", "void at::native::vectorized_elementwise_kernel<4>")
    assert not disagrees("norm", "void cudnn::bn_fw_tr_1C11_kernel_NCHW<float, float>")
    # F.affine_grid is one bmm (the base grid times each θ): on an H100 its CUTLASS kernel
    # contradicted the elementwise class its name had, and was unknown time
    assert op_class("aten::affine_grid_generator") == "gemm"
    assert op_class("aten::affine_grid_generator_backward") == "gemm"
    assert not disagrees("gemm", "void cutlass::Kernel2<cutlass_80_tensorop_s1688gemm>")


def test_an_einsums_product_is_read_from_the_bmm_it_ran_as():
    # einsum attention with a mask made inline (8 units): the equation is not recorded, the
    # bmm under each einsum gives its product, which ties the scores to the softmax
    def op(name, ts, dur, dims=None, inputs=None):
        args = {"Input Dims": dims} if dims is not None else {}
        if inputs:
            args["Input type"] = inputs
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1,
                "args": args}

    def einsum(ts, a, b, with_bmm=True):
        evs = [op("aten::einsum", ts, 10, [[], [list(a), list(b)]], ["", "TensorList"])]
        if with_bmm:
            evs.append(op("aten::bmm", ts + 2, 5, [[8, *a[-2:]], [8, *b[-2:]]]))
        return evs

    def layer(with_bmm):
        mask = [op(f"aten::{n}", 20 + 5 * i, 3, [[64, 64]])
                for i, n in enumerate(("arange", "sub", "abs", "neg", "mul", "ones", "triu",
                                       "masked_fill"))]
        return [*einsum(0, Q4, KT4, with_bmm), *mask,
                op("aten::softmax", 70, 3, [list(S4), []]), *einsum(80, S4, V4, with_bmm)]

    def classes(events):
        tree = optrace.build(events)
        return [tree.unit_class[id(u)] for u in optrace.forward_units(tree)[0]]

    assert classes(layer(True)) == ["attention"] * 11
    # without the bmm the product is unknown: the nearest einsum 9 units back is too far
    assert classes(layer(False))[0] == "gemm"


def test_a_pairwise_distance_is_a_gemm_where_it_ran_as_one():
    # a VQ-VAE's codebook lookup, torch.cdist(z, codebook) as the profiler records it: its
    # Euclidean path runs mm (gemm); with no mm under it (p != 2, few rows) it stays unknown
    def op(name, ts, dur, dims):
        return {"ph": "X", "cat": "cpu_op", "name": name, "ts": ts, "dur": dur, "tid": 1,
                "args": {"Input Dims": dims}}

    def step(with_mm):
        evs = [op("aten::cdist", 0, 50, [[512, 64], [512, 64], [], []]),
               op("aten::_euclidean_dist" if with_mm else "aten::_cdist_forward", 2, 45,
                  [[512, 64], [512, 64]])]
        if with_mm:
            evs.append(op("aten::mm", 10, 30, [[512, 66], [66, 512]]))
        return [*evs, op("aten::argmin", 60, 5, [[512, 512], [], []])]

    def classes(events):
        tree = optrace.build(events)
        return [tree.unit_class[id(u)] for u in optrace.forward_units(tree)[0]]

    assert classes(step(True)) == ["gemm", "elementwise"]
    assert classes(step(False)) == ["unknown", "elementwise"]
