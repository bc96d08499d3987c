"""Another size of the user's own model (`predict RUN --model pkg.module:build_large`): the
recorded model (its entry point, kept in the record) and the target are both built on
PyTorch's meta device (shapes, no memory, no arithmetic) and one training step of each is
counted unit by unit (`predict.stepcount`); each unit group of the recording then moves by the
target's work ÷ the source's:

- matmul-bound groups by their ideal time there ÷ here (`predict.ideal`: the shapes' waves
  and split-K at this machine's rate; a new width is not a linear change) and by the share of
  it their kernels reach there: a share follows the ideal time of one call, as it does across
  precisions (`groups.DELTA`: ln share there = ln share here × (ideal per call here ÷ there)^δ,
  the same δ) — a wider layer amortizes its kernels' fixed costs over more work;
- convolution groups by a latency, an activation and a FLOP term fitted to their own units
  timed alone (`predict.convfit`: cuDNN's convolutions follow neither their FLOPs nor their
  traffic when the width changes), each moved by its own ratio; wider calls, between the
  FLOP term's fitted rate and the matmul rate;
- a fused attention group whose calls' token counts change by its ideal time there ÷ here
  (`_fused_attention`: its FLOPs grow with T·S, its traffic with T + S);
- memory-bound groups by their traffic, past the kernels' fixed latency; one moving far fewer
  bytes than its SMs could (batch norm: `OFF_BYTES_PER_SM_CYCLE`) by a low power of it
  (`OFF_EXPONENT`);
- a 16-bit recording's casts by the traffic of the rest of their class (`_cast_ratio`: the
  count runs in fp32, where a cast to fp32 and back is no kernel);
- the host's launches by the number of operators (a deeper model launches more).

A model that cannot run on the meta device (data-dependent shapes: `nonzero`, routing by
value) is counted on the CPU with real tensors where its step is small enough, and refused
with the reason where it is not (`predict.stepcount`); so is a target whose units the
recording never ran (a new kind of layer has no recorded time to scale).
"""

from __future__ import annotations

import math

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import OPAQUE_CLASSES, TENSOR_CLASSES, UnitGroup

from . import convfit
from .attention import fused_seconds, fused_traffic
from .groups import DELTA, FLOOR_US, U_EXTRAPOLATED, GroupChange
from .hardware import Roofs
from .ideal import matmul_rate, model_rate
from .profile import Gemm, StepProfile
from .stepcount import Counted, count

U_SIZE = 0.08  # a unit group carried to another size by its counted work
# one carried by its unit's traffic in its other classes (its own class counted nothing)
U_UNIT = 0.25
U_NEW_UNITS = 0.5
# A convolution group moved by its units' fitted terms (`predict.convfit`): in one H200's
# steps the zoo's convolution classes moved within −15 … +13 % of what these predicted (a
# U-Net the +13 %, a diffusion U-Net, ConvNeXt; ResNet-18 at half its width the −15 %), and
# WaveNet's on an H100 +5 %. Where wider calls take the middle of the fitted FLOP rate and
# the matmul rate (`_conv_fitted`), the band reaches both as well: the H100's VAE (+25 %
# fitted alone) +13 %, MobileNetV2 (+16 %) −1 %, the rest within −7 … +9 % on either GPU.
U_CONV_FIT = 0.15
# A convolution group moved by its units timed at twice their width (`convfit.width_ratio`):
# one H100's VAE at twice its width, its units alone × 2.19 where its step's convolutions
# moved × 2.26.
U_CONV_WIDTH = 0.08
# A memory-bound group whose kernels are long (`LONG_KERNEL_US` on average: not their
# launches, which `FLOOR_US` takes) and that moved fewer bytes than `OFF_BYTES_PER_SM_CYCLE`
# is bound by something its count does not see: on one H200 the zoo's batch norms ran at 5–7 %
# of their traffic's roofline (92–251 µs a kernel), every other memory-bound group of 200 µs
# or more at 17 % or more, and the groups below 10 % were all of kernels under 7 µs. PyTorch's
# batch norm reduces each channel in blocks of its own, serially over its N·H·W values: more
# channels fill idle SMs before they take longer. Swept alone on one H200 (forward + backward
# at 262,144 values a channel; validation/predict/layer_sweeps.py), 32 → 256 channels took
# × 1.5 (bf16) and × 1.75 (fp32) the time: time ∝ channels^0.21–0.27 (at 65,536 values a
# channel the sweep's calls sat on its host's launches and say nothing). A size change moves
# such a group by its traffic^`OFF_EXPONENT`, its band reaching unchanged and the square root
# of its traffic (a U-Net's and ResNet-18's batch norms in their steps moved × 1.18 and × 0.93
# where their traffic said × 2 and × 0.5).
# The mark is in bytes per SM cycle, not a share of the copy bandwidth: a kernel bound by its
# blocks' latency moves the bytes its SMs issue, whatever the memory could serve. ResNet-18's
# bf16 batch norm moved 0.30 TB/s on an H200 and on an H100 (132 SMs at 1.98 GHz both): 7 % of
# the H200's copy rate (4,223 GB/s), 10.1 % of the H100's (3,004 GB/s). 10 % of the H200's
# copy rate over its SMs × clock: 1.6 bytes per SM cycle. `OFF_ROOFLINE` of the copy rate
# where the SMs or the clock are not known.
OFF_BYTES_PER_SM_CYCLE = 1.6
OFF_ROOFLINE = 0.10
OFF_EXPONENT = 0.25
LONG_KERNEL_US = 20.0
# Units that change a tensor's dtype. The count runs in fp32 (the meta device knows no
# autocast), where `x.float()` and `.type_as(x)` of an fp32 tensor are no kernels; in a
# 16-bit step they are: a user's T5 v1.1 casts its attention scores to fp32 for the softmax
# and back, 5.2 of its 23.6 ms of attention a step, which held ×1 at the base size where its
# profile on one H100 ran them ×2.96 (its scores' traffic ×3).
CASTS = frozenset({"to", "type_as", "float", "half", "bfloat16", "double", "type", "_to_copy"})
SIXTEEN_BIT = ("bf16", "fp16")


def new_units(src: Counted, tgt: Counted) -> list[str]:
    """The target's unit groups with work counted that the source never ran, as
    `class/unit`. Another size of the same model runs the same ones (every size pair of the
    zoo: none new); another model does not (a LayerNorm, a GELU), and a group with no
    recorded time would be left out of the step: a memory-bound one as surely as a GEMM."""
    def worked(c: Counted) -> set[tuple[str, str]]:
        return {k for counts in (c.flops, c.bytes) for k, v in counts.items() if v > 0}

    return sorted(f"{c}/{u}" for c, u in worked(tgt) - worked(src) if c not in OPAQUE_CLASSES)


def _ideal_s(shapes: list[tuple[int, int, int, int, int, float]], roofs: Roofs,
             precision: str, width: int) -> float:
    return sum(f / (model_rate(Gemm(m, n, k, b, width, 1.0, f), roofs, precision) * 1e12)
               for m, n, k, b, _, f in shapes if f > 0)


def retarget(profile: StepProfile, target: str, roofs: Roofs,
             changes: dict[int, GroupChange]) -> tuple[Counted, Counted, float, list[str]]:
    """Each group of the recording moved to the `target` model's size (module docstring);
    (the source's count, the target's, the ratio of their operators, the groups moved
    off their roofline: `OFF_BYTES_PER_SM_CYCLE`)."""
    record = profile.record
    entry = record.model_params.get("entry") if record is not None else None
    if record is None or record.legacy or not entry:
        raise BadInputError(f"--model: run {profile.run_id}'s {profile.workload} does not say "
                            "which entry point made it (recorded before gpuaudit kept it, or "
                            "a reference model: use --params)")
    src, tgt = count(str(entry), profile.batch), count(target, profile.batch)
    matmul_rate(roofs, profile.precision)
    width = 2 if profile.precision in ("bf16", "fp16") else 4
    ratio_cls: dict[str, float] = {}
    for cls in TENSOR_CLASSES:
        a = _ideal_s(src.shapes.get(cls, []), roofs, profile.precision, width)
        b = _ideal_s(tgt.shapes.get(cls, []), roofs, profile.precision, width)
        if a > 0 and b > 0:
            ratio_cls[cls] = b / a
    missing = new_units(src, tgt)
    if missing:
        more = f" and {len(missing) - 4} more" if len(missing) > 4 else ""
        raise BadInputError(f"--model {target}: its {', '.join(missing[:4])}{more} never ran "
                            f"in the recorded {entry}: no recorded time to scale (another "
                            "size of the same model runs the same layers)")
    off: list[str] = []
    for i, g in enumerate(record.groups):
        c = changes[i]
        key = (g.op_class, g.unit)
        how = f"{src.name} → {target}"
        if g.op_class in OPAQUE_CLASSES:
            c.then(1.0, 0.0, 0.5, f"{how}: not understood, kept ±50 %")
        elif g.op_class == "optimizer":
            ratio = tgt.params / src.params if src.params else 1.0
            c.then(ratio, FLOOR_US, U_SIZE, f"{how}: its parameters ×{ratio:.3g}")
        elif g.op_class == "conv" and src.flops.get(key) and \
                (fitted := _conv_fitted(profile, src, tgt, key, roofs)) is not None:
            c.then(fitted[0], 0.0, fitted[1], f"{how}: {fitted[2]}")
        elif (fused := _fused_attention(g, src, tgt, key, roofs, profile.precision)):
            c.then(fused[0], 0.0, U_SIZE, f"{how}: {fused[1]}")
        elif g.op_class in TENSOR_CLASSES and src.flops.get(key):
            flops_ratio = tgt.flops.get(key, 0.0) / src.flops[key]
            ideal = ratio_cls.get(g.op_class, flops_ratio)
            ratio = ideal * (flops_ratio / _class_flops_ratio(src, tgt, g.op_class))
            share = _share_ratio(g, ratio, src, tgt, key, roofs, profile.precision)
            moved = _monotone(ratio * share, flops_ratio, (src.calls or {}).get(key, 0),
                              (tgt.calls or {}).get(key, 0))
            c.then(moved, 0.0, U_SIZE, f"{how}: its FLOPs ×{flops_ratio:.3g}, at the "
                   f"ideal rate of the target's shapes (×{ratio:.3g}) and its share of it "
                   f"there (÷{1 / share:.3g})"
                   + (f"; no faster a call than here with more work a call (×{moved:.3g})"
                      if moved != ratio * share else ""))
        elif g.unit in CASTS and profile.precision in SIXTEEN_BIT and \
                (cast := _cast_ratio(src, tgt, g.op_class)) is not None:
            c.then(cast, FLOOR_US, U_SIZE, f"{how}: a cast, which the count (in fp32) does not "
                   f"see: its class's other traffic ×{cast:.3g}")
        elif src.bytes.get(key):
            ratio = tgt.bytes.get(key, 0.0) / src.bytes[key]
            share = _traffic_share(g, roofs)
            if _off_roofline(share, roofs) and ratio > 0 and abs(math.log(ratio)) > 0.05:
                mid, unc, why = _off_roofline_ratio(src, tgt, key, ratio)
                c.then(mid, FLOOR_US, unc,
                       f"{how}: its traffic ×{ratio:.3g}, but it ran at {share:.0%} of its "
                       f"traffic's roofline: ×{mid:.3g} ({why})")
                off.append(f"{g.op_class}/{g.unit}")
            else:
                c.then(ratio, FLOOR_US, U_SIZE, f"{how}: its traffic ×{ratio:.3g}")
        elif (unit := _unit_traffic_ratio(src, tgt, g.unit)) is not None:
            c.then(unit, FLOOR_US, U_UNIT, f"{how}: nothing counted in its class, its unit's "
                   f"traffic ×{unit:.3g}")
        else:
            c.then(1.0, 0.0, U_SIZE, f"{how}: nothing counted: kept")
    return src, tgt, (tgt.ops / src.ops if src.ops else 1.0), off


def _fused_attention(g: UnitGroup, src: Counted, tgt: Counted, key: tuple[str, str],
                     roofs: Roofs, precision: str) -> tuple[float, str] | None:
    """A fused attention group whose calls' token counts change, moved by its ideal time
    there ÷ here (`attention.fused_seconds`): its FLOPs grow with T·S, its traffic with
    T + S, and at a few tokens its traffic is most of it. Moved by its FLOPs, a user's CLIP
    at patches of 16 (50 → 197 image tokens) had its attention ×5.5 where its own profile
    ran it ×2.1. None where the token counts hold (its FLOPs and traffic move together) or
    its calls or recorded work are not known."""
    if g.unit != "scaled_dot_product_attention" or not src.attention or not tgt.attention \
            or not src.flops.get(key) or g.flops <= 0 or g.bytes <= 0:
        return None
    if {k[1:3] for k in src.attention} == {k[1:3] for k in tgt.attention}:
        return None
    flops = tgt.flops.get(key, 0.0) / src.flops[key]
    traffic = fused_traffic(tgt.attention) / fused_traffic(src.attention)
    rate = matmul_rate(roofs, precision)
    here = fused_seconds(src.attention, g.flops, g.bytes, roofs, rate)
    there = fused_seconds(tgt.attention, g.flops * flops, g.bytes * traffic, roofs, rate)
    tokens = sorted({k[1] for k in tgt.attention} - {k[1] for k in src.attention})
    return there / here, (f"its tokens change (to {', '.join(map(str, tokens))}): its FLOPs "
                          f"×{flops:.3g}, its fused traffic ×{traffic:.3g}: its ideal time "
                          f"×{there / here:.3g}")


def _off_roofline_ratio(src: Counted, tgt: Counted, key: tuple[str, str], ratio: float
                        ) -> tuple[float, float, str]:
    """A group off its traffic's roofline moved to the target's size (`OFF_EXPONENT`):
    (its time's ratio, its uncertainty, how). Where its batch norms' calls are counted by
    their channels, each call's traffic is weighed by its channels^(`OFF_EXPONENT` − 1): its
    time follows its values a channel (each channel's block reduces them one after another:
    on the H200's sweep, 4 × the values a channel took 3.5–3.8 × the time at 384–768
    channels, the rest its launches) and its channels only to that power, so more layers or
    a larger image move it in proportion, more channels by their power. Its band reaches
    the powers 0 and 0.5 (at most its whole traffic's square root). Else its traffic
    ^`OFF_EXPONENT`, its band reaching unchanged and its traffic's square root."""
    here, there = (src.channel_bytes or {}).get(key), (tgt.channel_bytes or {}).get(key)
    moved = (src.bytes.get(key, 0.0), tgt.bytes.get(key, 0.0))
    if here and there and sum(here.values()) >= 0.9 * moved[0] and \
            sum(there.values()) >= 0.9 * moved[1]:
        def weighed(power: float) -> float:
            return sum(b * c ** (power - 1) for c, b in there.items()) / \
                sum(b * c ** (power - 1) for c, b in here.items())
        mid = weighed(OFF_EXPONENT)
        reach = max(abs(math.log(weighed(p) / mid)) for p in (0.0, 0.5))
        return mid, max(U_SIZE, math.exp(reach) - 1), (
            f"its batch norms' traffic weighed by their channels^{OFF_EXPONENT - 1:g}: "
            "serial over each channel's values, its blocks filling idle SMs")
    mid = ratio ** OFF_EXPONENT
    # the band: from unchanged to the traffic's square root, mid in log
    return mid, max(U_SIZE, max(mid, 1 / mid) - 1), (
        f"its traffic^{OFF_EXPONENT:g}, its blocks filling idle SMs")


def _cast_ratio(src: Counted, tgt: Counted, cls: str) -> float | None:
    """Target ÷ source of the traffic counted in class `cls` by its units other than casts
    (`CASTS`): what a cast in a 16-bit step converts is made and used by them. None where
    they count none."""
    def moved(c: Counted) -> float:
        return sum(v for (k, u), v in c.bytes.items() if k == cls and u not in CASTS)

    here, there = moved(src), moved(tgt)
    return there / here if here > 0 and there > 0 else None


def _unit_traffic_ratio(src: Counted, tgt: Counted, unit: str) -> float | None:
    """Target ÷ source of the traffic its unit moves in every class; None where the unit
    moves none. A group with nothing counted in its own class is work the count does not
    see: autocast's casts of a linear layer's weights, the copy a matmul makes of a
    transposed operand. It grows with what its unit moves, not with nothing."""
    here = sum(v for (_, u), v in src.bytes.items() if u == unit)
    there = sum(v for (_, u), v in tgt.bytes.items() if u == unit)
    return there / here if here > 0 and there > 0 else None


def _conv_fitted(profile: StepProfile, src: Counted, tgt: Counted, key: tuple[str, str],
                 roofs: Roofs) -> tuple[float, float, str] | None:
    """A convolution group moved by its units timed alone (`predict.convfit`): (its ratio,
    its uncertainty, what it says); None where they cannot move it. Where its units were
    timed at a wider width too, by their width response (`convfit.width_ratio`). Else by
    the latency, activation and FLOP terms fitted to them: the FLOP term's rate is the one
    the recorded widths reached; wider calls reach more of the GPU's matmul rate (a 3×3
    convolution swept alone took its C² term at that rate), so where each call's FLOPs grow
    and the fitted rate is below the matmul rate, the group moves by the middle (in log) of
    the ratios with the FLOP term at either rate, its band reaching both."""
    units = [u for u in (profile.record.timed if profile.record else ())
             if (u.op_class, u.unit) == key]
    calls_here = (src.calls or {}).get(key, 0)
    if calls_here <= 0 or not src.bytes.get(key):
        return None
    calls = (tgt.calls or {}).get(key, 0) / calls_here
    traffic = tgt.bytes.get(key, 0.0) / src.bytes[key]
    flops = tgt.flops.get(key, 0.0) / src.flops[key]
    in_step = sum(g.kernel_us for g in profile.record.groups if (g.op_class, g.unit) == key) \
        if profile.record else None
    wide = convfit.width_ratio(units, profile.precision, calls, traffic, flops, in_step)
    if wide is not None:
        return wide.ratio, math.hypot(U_CONV_WIDTH, (1 - wide.held) * U_CONV_FIT,
                                      wide.past * U_EXTRAPOLATED), (
            f"its calls ×{calls:.3g}, activations ×{traffic:.3g}, FLOPs ×{flops:.3g}: each "
            f"call ×{wide.width:.3g} as wide, ×{wide.spatial:.3g} the values a channel; its "
            f"units timed alone at ×{wide.timed_width:.3g} their width and at other batches: "
            f"×{wide.ratio:.3g}" + (f" ({wide.past:.1f} doublings of width past those timed)"
                                    if wide.past else ""))
    cost = convfit.fit(units, profile.precision)
    if cost is None:
        return None

    def moved(c: convfit.ConvCost) -> tuple[float, tuple[float, float, float]]:
        parts = convfit.parts_here(c, units)
        return parts[0] * calls + parts[1] * traffic + parts[2] * flops, parts

    ratio, parts = moved(cost)
    said = (f"its calls ×{calls:.3g}, activations ×{traffic:.3g}, FLOPs ×{flops:.3g}, weighed "
            f"by its units' fitted latency, activation and FLOP terms ({parts[0]:.0%}, "
            f"{parts[1]:.0%}, {parts[2]:.0%} of their time here): ×{ratio:.3g}")
    at_rate = 1e3 / matmul_rate(roofs, profile.precision)  # ms per TFLOP
    if calls <= 0 or flops / calls <= 1 or cost.ms_per_tflop <= at_rate:
        return ratio, U_CONV_FIT, said
    peak = convfit.fit(units, profile.precision, at_rate)
    if peak is None:
        return ratio, U_CONV_FIT, said
    there, parts = moved(peak)
    low, high = sorted((ratio, there))
    mid = math.sqrt(low * high)
    return mid, math.hypot(U_CONV_FIT, high / mid - 1), (
        f"{said}; with the FLOP term at the GPU's matmul rate, which wider calls reach more "
        f"of ({parts[0]:.0%}, {parts[1]:.0%}, {parts[2]:.0%}), ×{there:.3g}: ×{mid:.3g}, "
        "between the two")


def _monotone(moved: float, flops_ratio: float, calls_here: int, calls_there: int) -> float:
    """A group's time ratio kept on the side its work per call says: a call with more work
    takes no less time, one with less no more (a better share of the roofline at a wider
    shape cannot make the wider call the faster: the MLP-Mixer's patch convolution came out
    × 0.81 at a larger size without this)."""
    if calls_here <= 0 or calls_there <= 0:
        return moved
    calls = calls_there / calls_here
    per_call = flops_ratio / calls
    if per_call >= 1:
        return max(moved, calls)
    return min(moved, calls)


def _traffic_share(g: UnitGroup, roofs: Roofs) -> float:
    """The group's counted traffic at the copy rate ÷ its time in the step; 1 where either
    is unknown or its kernels are short (their time is their launches)."""
    took = g.kernel_us * 1e-6
    if took <= 0 or g.bytes <= 0 or roofs.memory_gbps <= 0 or \
            g.kernel_us / max(g.kernels, 1) < LONG_KERNEL_US:
        return 1.0
    return g.bytes / (roofs.memory_gbps * 1e9) / took


def _off_roofline(share: float, roofs: Roofs) -> bool:
    """A group at `share` of its traffic's roofline moved under `OFF_BYTES_PER_SM_CYCLE` (under
    `OFF_ROOFLINE` where the SMs or the clock are not known)."""
    cycles = roofs.sm_cycles_per_s
    if not cycles:
        return share < OFF_ROOFLINE
    return share * roofs.memory_gbps * 1e9 / cycles < OFF_BYTES_PER_SM_CYCLE


def _share_ratio(g: UnitGroup, ideal_ratio: float, src: Counted, tgt: Counted,
                 key: tuple[str, str], roofs: Roofs, precision: str) -> float:
    """The group's share of its roofline here ÷ there (module docstring); 1 where its calls or
    its time are not known."""
    calls_s = (src.calls or {}).get(key, 0)
    calls_t = (tgt.calls or {}).get(key, 0)
    took = g.kernel_us * 1e-6
    if calls_s <= 0 or calls_t <= 0 or took <= 0 or ideal_ratio <= 0 or g.flops <= 0:
        return 1.0
    here = max(g.flops / (matmul_rate(roofs, precision) * 1e12),
               g.bytes / (roofs.memory_gbps * 1e9))
    share = min(0.999, here / took)
    per_call = ideal_ratio * calls_s / calls_t  # one call's ideal time there ÷ here
    there = math.exp(math.log(share) * per_call ** -DELTA.get(g.op_class, 0.5))
    return share / there


def _class_flops_ratio(src: Counted, tgt: Counted, cls: str) -> float:
    a = sum(f for (c, _), f in src.flops.items() if c == cls)
    b = sum(f for (c, _), f in tgt.flops.items() if c == cls)
    return b / a if a > 0 and b > 0 else 1.0

