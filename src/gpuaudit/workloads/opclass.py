"""Operator classes: what a unit of the step *is*, whatever module called it.

A unit is the outermost operator of a forward call (aten's, or another library's with the
aten operators it calls), as the profiler's operator stack shows it (`aten::linear` around
`aten::addmm`; `aten::conv2d` around cuDNN's kernels and its layout transforms;
`aten::lstm` around `aten::_cudnn_rnn`); the backward's operators belong to the forward unit
whose autograd node they run (`workloads.optrace`). Its class comes from its name, and for
batched matmuls from their neighbours:

- gemm: linear, matmul, bmm, baddbmm, einsum, mm, addmm, …;
- attention: scaled_dot_product_attention and the fused kernels' own operators; and the
  unfused path (nn.MultiheadAttention's default, a hand-written softmax(QKᵀ)V): a softmax
  over the rows of a batched matmul's product, the batched matmul that takes rows of that
  shape within `PROBS_GAP` units after it, and the units between them (scaling, mask and
  its making, a position bias, dropout). The shapes are the witness: the scores' matmul is
  the nearest whose product has the softmax's rows, up to `SCORE_WINDOW` units back (up to
  `SCORE_REACH` where no other layer lies between), with the earlier products of those rows
  summed into it; where shapes are not recorded (or an einsum's product is not known), the
  nearest within `SCORE_GAP`. A softmax written as exp(x − logsumexp(x)) is one;
- conv, rnn (lstm, gru, rnn_tanh/relu and their cells), norm (batch, layer, group, instance,
  RMS), embedding (embedding, embedding_bag);
- optimizer: everything inside `Optimizer.step` (the profiler's annotation), and the fused
  and multi-tensor optimizer operators;
- comm: c10d's collectives;
- unknown: operators outside aten (custom extensions) and aten's families the model has no
  rule for (FFT, linear algebra but its vector norms, sparse, CTC, pairwise distances);
- elementwise: every other aten operator (pointwise, reductions, indexing, copies, losses).

Kernel names are the second witness (`kernel_class`): a kernel that multiplies matrices or
convolves under a unit of a memory-bound class contradicts it, and its time is `unknown`.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from gpuaudit import kernelnames as kn
from gpuaudit.model.opprofile import CLASSES, MEMORY_CLASSES, TENSOR_CLASSES

__all__ = ["CLASSES", "MEMORY_CLASSES", "TENSOR_CLASSES", "UnitCall", "canonical",
           "classify_units", "disagrees", "kernel_class", "op_class", "unit_class"]

GEMM = {"linear", "matmul", "mm", "addmm", "bmm", "baddbmm", "einsum", "addbmm", "addmv",
        "mv", "dot", "vdot", "inner", "outer", "tensordot", "bilinear", "_addmm_activation",
        "_scaled_mm", "_int_mm", "chain_matmul", "linalg_multi_dot", "_trilinear",
        # a mixture of experts' grouped GEMM (Hugging Face's MoE layers call it), fp8's
        # scaled variants and weight-only int8/int4 inference
        "_grouped_mm", "_scaled_grouped_mm", "_scaled_grouped_mm_v2", "_scaled_mm_v2",
        "_weight_int8pack_mm", "_weight_int4pack_mm", "_weight_int4pack_mm_for_cpu",
        "_weight_int4pack_mm_with_scales_and_zeros",
        # F.affine_grid: the base grid times each θ, one bmm (a spatial transformer's; its
        # CUTLASS kernel on an H100 contradicted an elementwise unit)
        "affine_grid_generator", "affine_grid_generator_backward"}
ATTENTION_PREFIX = ("scaled_dot_product_attention", "_scaled_dot_product", "_flash_attention",
                    "_efficient_attention", "_cudnn_attention", "flex_attention",
                    "_native_multi_head_attention", "_fused_sdp")
RNN = {"lstm", "gru", "rnn_tanh", "rnn_relu", "lstm_cell", "gru_cell", "rnn_tanh_cell",
       "rnn_relu_cell", "_cudnn_rnn", "_thnn_fused_lstm_cell", "_thnn_fused_gru_cell",
       "mkldnn_rnn_layer", "miopen_rnn", "quantized_lstm"}
NORM = {"batch_norm", "layer_norm", "group_norm", "instance_norm", "rms_norm",
        "native_batch_norm", "native_layer_norm", "native_group_norm",
        "_batch_norm_impl_index", "cudnn_batch_norm", "_native_batch_norm_legit",
        "_native_batch_norm_legit_no_training", "_fused_rms_norm", "_batch_norm_with_update",
        "miopen_batch_norm"}
EMBEDDING = {"embedding", "embedding_bag", "_embedding_bag", "_embedding_bag_forward_only",
             "embedding_renorm_"}
OPTIMIZER_PREFIX = ("_fused_adam", "_fused_sgd", "_fused_adagrad", "_foreach_")
UNKNOWN_PREFIX = ("_fft", "fft_", "linalg_", "_linalg", "cholesky", "svd", "_svd", "qr",
                  "triangular_solve", "lu_", "_lu", "inverse", "slogdet", "logdet",
                  "_sparse", "sparse_", "to_sparse", "ctc_loss", "_ctc_loss", "_cudnn_ctc",
                  "cdist", "_cdist", "pdist", "_pdist", "eig", "_linalg_eigh", "pinverse",
                  "matrix_exp", "geqrf", "ormqr", "orgqr")
# linear algebra's reductions: memory-bound like any other (F.normalize, torch.norm and
# clip_grad_norm_ call the vector norm). torch.linalg.norm is one too but for the matrix 2-
# and nuclear norms (an SVD), which models hardly take in a step; linalg_matrix_norm stays
# unknown
REDUCTIONS = {"linalg_vector_norm", "linalg_norm"}
# pairwise distances: a GEMM where they ran as one (cdist's Euclidean path, p = 2 past 25
# rows: ‖x‖² + ‖y‖² − 2·x·yᵀ through mm); their elementwise path (other p) stays unknown
MATMUL_DISTANCES = {"cdist"}
# Units that move nothing: skipped when looking for attention's neighbours.
VIEWS = {"view", "reshape", "_unsafe_view", "transpose", "transpose_", "permute", "expand",
         "expand_as", "unsqueeze", "squeeze", "flatten", "unflatten", "split",
         "split_with_sizes", "chunk", "tensor_split", "t", "select", "slice", "narrow",
         "as_strided", "unbind", "detach", "alias", "view_as", "movedim", "moveaxis",
         "swapaxes", "swapdims", "numpy_T", "mT", "_reshape_alias", "lift_fresh",
         "resolve_conj", "resolve_neg", "_to_copy_view", "diagonal", "unfold", "type_as",
         "to", "contiguous_view", "reshape_as", "_local_scalar_dense", "item", "size"}
BATCHED_MATMUL = {"matmul", "bmm", "baddbmm", "einsum"}
# the softmax, and its form exp(x − logsumexp(x)) (Reformer's LSH and local attention)
SOFTMAX = {"softmax", "_softmax", "_safe_softmax", "special_softmax", "logsumexp"}
SCORE_GAP = 6  # units between the scores' matmul and the softmax (scale, mask and its making)
SCORE_WINDOW = 16  # the same, where the shapes witness that the softmax takes its product
# ... and further, while no other layer's work lies between (a mask built inline, cell by
# cell, as Swin's shifted windows build theirs)
SCORE_REACH = 64
PROBS_GAP = 3  # units between the softmax and the matmul that takes its output (dropout)


def canonical(name: str) -> str:
    """A unit's name as both views write it: aten's without its namespace ("aten::linear" →
    "linear"); another namespace's kept whole ("torchvision::roi_align")."""
    name = name.strip()
    if name.startswith("aten::"):
        return name[6:]
    if name.startswith("aten."):
        return name[5:].split(".")[0]
    return name


def unit_class(name: str) -> str:
    """The class of a unit by its canonical name alone (attention's unfused path needs its
    neighbours: `classify_units`)."""
    if "::" in name:
        return "comm" if name.startswith("c10d") else "unknown"
    if name in GEMM or name.removesuffix("_") in GEMM:  # addmm_, baddbmm_: in place
        return "gemm"
    if name.startswith(ATTENTION_PREFIX):
        return "attention"
    if name.startswith(("conv", "_conv", "cudnn_conv", "_slow_conv", "slow_conv", "thnn_conv",
                        "mkldnn_conv", "miopen_conv", "_nnpack")) or name == "convolution":
        return "conv"
    if name in RNN:
        return "rnn"
    if name in NORM:
        return "norm"
    if name in EMBEDDING:
        return "embedding"
    if name.startswith(OPTIMIZER_PREFIX):
        return "optimizer"
    if "c10d" in name:
        return "comm"
    if name in REDUCTIONS:
        return "elementwise"
    if name == "det" or name.startswith(UNKNOWN_PREFIX):  # not "detach"
        return "unknown"
    return "elementwise"


@dataclass(frozen=True)
class UnitCall:
    """A forward unit as the classification sees it: its canonical name and the shapes of
    its tensor inputs (None where the recording has none)."""

    name: str
    dims: tuple[tuple[int, ...], ...] | None = None
    # the product's last two dimensions of the matmul a composite unit ran as (an einsum's
    # bmm: the profiler does not record the equation; cdist's mm); None where it ran none
    product: tuple[int, ...] | None = None


def _operands(call: UnitCall) -> list[tuple[int, ...]] | None:
    """A batched matmul's two operands' shapes (baddbmm's after the matrix it adds to), or
    None where the recording has no shapes."""
    if call.dims is None:
        return None
    tensors = [d for d in call.dims if d]
    return tensors[1:3] if call.name == "baddbmm" else tensors[:2]


def _batched(call: UnitCall) -> bool:
    if call.name not in BATCHED_MATMUL:
        return False
    ops = _operands(call)
    if ops is None:
        return True  # no shapes recorded: the name alone
    return len(ops) == 2 and all(len(d) >= 3 for d in ops)


def _rows(call: UnitCall) -> tuple[int, ...] | None:
    """The last two dimensions of a unit's first input (a softmax's scores, the probabilities
    a matmul takes), where recorded."""
    if call.dims is None or not call.dims or len(call.dims[0]) < 2:
        return None
    return call.dims[0][-2:]


def _product(call: UnitCall) -> tuple[int, ...] | None:
    """The last two dimensions of a batched matmul's product (T×K · K×S → T×S), where its
    operands say (an einsum's, where the bmm it ran as does)."""
    if call.name == "einsum":
        return call.product
    ops = _operands(call)
    if not ops or len(ops) != 2:
        return None
    return ops[0][-2], ops[1][-1]


def _rank3(call: UnitCall) -> bool:
    """A softmax over scores: its input has a batch of rows of rows (B·H, T, S or more)."""
    if call.dims is None or not call.dims or not call.dims[0]:
        return True
    return len(call.dims[0]) >= 3


def _layer(call: UnitCall) -> bool:
    """A unit that is another layer's work, not a mask's or a bias's: a linear layer, a
    convolution, a normalization, another softmax."""
    return call.name in SOFTMAX or (not _batched(call) and
                                    unit_class(call.name) in ("gemm", "conv", "norm"))


def _scores(calls: Sequence[UnitCall], moving: list[int], j: int) -> int | None:
    """The batched matmul whose product the softmax at `moving[j]` normalizes (its place in
    `moving`): the nearest before it whose product has the softmax's rows (up to
    `SCORE_WINDOW` units back: an inline mask or position bias sits between them; up to
    `SCORE_REACH` where no other layer does); where either shape is unrecorded, the nearest
    within `SCORE_GAP` units."""
    want = _rows(calls[moving[j]])
    crossed = False  # another layer's unit lies between
    for d in range(1, SCORE_REACH + 1):
        if j - d < 0 or (d > SCORE_WINDOW and crossed):
            return None
        call = calls[moving[j - d]]
        if not _batched(call):
            crossed = crossed or _layer(call)
            continue
        made = _product(call)
        if want is not None and made is not None:
            if made == want:
                return j - d
            continue  # another product (a relative position's): look further
        return j - d if d <= SCORE_GAP + 1 else None
    return None


def _summed_scores(calls: Sequence[UnitCall], moving: list[int], j: int,
                   want: tuple[int, ...] | None) -> list[int]:
    """Earlier products of the same rows summed into the scores at `moving[j]` (DeBERTa's
    content, content-to-position and position-to-content terms), each within
    `SCORE_WINDOW` units of the next; a softmax, a normalization or a convolution (another
    layer), or a batched matmul of another product ends the search."""
    found: list[int] = []
    d = 0
    while want is not None and j - d - 1 >= 0 and d < SCORE_WINDOW:
        d += 1
        call = calls[moving[j - d]]
        if call.name in SOFTMAX or unit_class(call.name) in ("norm", "conv"):
            break
        if not _batched(call):
            continue
        if _product(call) != want:
            break
        found.append(moving[j - d])
        j, d = j - d, 0
    return found


def _probs(calls: Sequence[UnitCall], moving: list[int], j: int) -> int | None:
    """The batched matmul that takes the softmax's output: the first within `PROBS_GAP`
    units after it whose first operand has the softmax's rows (where both are recorded)."""
    want = _rows(calls[moving[j]])
    for d in range(1, PROBS_GAP + 2):
        if j + d >= len(moving):
            return None
        call = calls[moving[j + d]]
        if not _batched(call):
            continue
        ops = _operands(call)
        if want is None or not ops or ops[0][-2:] == want:
            return moving[j + d]
    return None


def classify_units(calls: Sequence[UnitCall]) -> list[str]:
    """The class of each forward unit of one step, in order (module docstring)."""
    out = [("gemm" if c.name in MATMUL_DISTANCES and c.product else unit_class(c.name))
           for c in calls]
    moving = [i for i, c in enumerate(calls) if c.name not in VIEWS]
    for j, i in enumerate(moving):
        if calls[i].name not in SOFTMAX or not _rank3(calls[i]):
            continue
        js, probs = _scores(calls, moving, j), _probs(calls, moving, j)
        if js is None or probs is None:
            continue
        score = moving[js]
        earlier = _summed_scores(calls, moving, js, _rows(calls[i]))
        for k in range(min(earlier, default=score), score):
            if k in earlier or out[k] == "elementwise":  # linear layers between stay gemm
                out[k] = "attention"
        for k in range(score, probs + 1):
            if out[k] in ("gemm", "elementwise"):
                out[k] = "attention"
    return out


def op_class(name: str) -> str:
    """The class of an aten operator by its own name ('aten.mm', 'aten::addmm' or 'mm'): for
    operators that no unit holds (the autograd engine's own, a custom Function's)."""
    ns, _, base = name.replace("::", ".").rpartition(".")
    if "c10d" in ns or "c10d" in name:
        return "comm"
    cls = unit_class(base)
    return "unknown" if ns not in ("", "aten") and cls == "elementwise" else cls


def kernel_class(name: str) -> str:
    """The class of a CUDA kernel by its (demangled) name: the second witness, and the only
    one for kernels no operator launched (inductor's). The order is the meaning: cuDNN's fused
    attention says flash and fprop, its batch norm and attention helpers say cudnn, a
    convolution's engines say gemm (`gpuaudit.kernelnames`)."""
    if kn.is_comm(name):
        return "comm"
    if kn.is_attention(name) or kn.is_cudnn_attention_helper(name):
        return "attention"
    if kn.is_batch_norm(name):
        return "elementwise"  # batch norm (cuDNN's too): memory-bound, not a convolution
    if kn.is_conv(name) or kn.is_cudnn(name):
        return "conv"
    if kn.is_optimizer(name):
        return "optimizer"
    # cuBLAS's helpers too (split-K's reduction): their time is the matmul call's
    if kn.is_matmul(name) or kn.is_cublas(name):
        return "gemm"
    return "elementwise"


def disagrees(unit_cls: str, kernel_name: str) -> bool:
    """Whether a kernel contradicts the class of the unit that launched it: one that
    multiplies matrices or convolves under a memory-bound unit (its work is not counted
    there). cuDNN's batch norm and layout transforms say "cudnn" but do neither."""
    if unit_cls not in MEMORY_CLASSES:
        return False
    if kn.is_batch_norm(kernel_name) or kn.is_layout_transform(kernel_name) or \
            kn.is_optimizer(kernel_name):
        return False
    return (kn.is_matmul(kernel_name) or kn.is_conv(kernel_name)) and \
        not kn.is_cublas(kernel_name)
