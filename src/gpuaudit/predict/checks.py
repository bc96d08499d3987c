"""Checks that refuse to guess: before a recorded step is re-timed, what in it the model does
not understand is measured, and the prediction says so, widens its band, or refuses.

- Time in no class or in operators the model does not understand (`unknown`: other
  namespaces, kernels that contradict their operator's class; `unattributed`: kernels no
  operator launched): above `NOTE_SHARE` of the step's device time a note and ±50 % on that
  time; above `REFUSE_SHARE` a one-line refusal naming them.
- A class above its roofline: the share of its ideal time (what the measured rates allow for
  its counted work) it achieved is over `ROOF_LIMIT` (clocks above the bench's sustained
  rate explain a few percent, not more): its work is undercounted or misclassified. The
  prediction notes it; a change that rests on that ideal (another GPU model, another size)
  widens the class's band by `U_ROOF`.
- A profile that counted work but holds no device time at all: the profiler recorded no
  kernels (on torch 2.11 a GPU profile started while an earlier profile's CUPTI teardown ran
  came back with CPU operators only). Re-timing it would carry the step unchanged under a
  band of zero width, so it is refused.
"""

from __future__ import annotations

from collections.abc import Mapping

from gpuaudit.errors import BadInputError
from gpuaudit.model.opprofile import OPAQUE_CLASSES, TENSOR_CLASSES

from .profile import OPTIMIZER_RUN, StepProfile
from .state import StepState

NOTE_SHARE = 0.03
U_OPAQUE = 0.5
REFUSE_SHARE = 0.25
ROOF_LIMIT = 1.2  # achieved ÷ ideal (gpt-124m's bf16 matmuls ran at 107 % on an H200)
U_ROOF = 0.25


def opaque(profile: StepProfile) -> tuple[float, float, list[str]]:
    """(device ms per step the model does not understand, the step's device ms, what)."""
    total = sum(w.ms for w in profile.classes.values())
    ms = sum(w.ms for cls, w in profile.classes.items() if cls in OPAQUE_CLASSES)
    what: list[str] = []
    record = profile.record
    if record is not None:
        what = [f"{u.op} {u.ms_per_step:.3g} ms ({u.why})" for u in record.unknown[:4]]
    return ms, total, what


def refuse_or_note(profile: StepProfile, state: StepState) -> None:
    ms, total, what = opaque(profile)
    if total <= 0 and any(w.flops > 0 or w.bytes > 0 for w in profile.classes.values()):
        what_ran = "kernel" if profile.device == "cuda" else "operator"
        raise BadInputError(f"run {profile.run_id}: {profile.workload}'s op profile counted "
                            f"its operators' work but holds no {what_ran} time: the profiler "
                            f"recorded none; record it again with `{OPTIMIZER_RUN}`")
    if total <= 0 or ms <= 0:
        return
    share = ms / total
    named = "; ".join(what) or "no operator named"
    if share > REFUSE_SHARE:
        raise BadInputError(f"run {profile.run_id}: {100 * share:.0f} % of {profile.workload}'s "
                            "device "
                            f"time is in operators the model does not understand ({named}): "
                            "no prediction")
    for cls in OPAQUE_CLASSES:
        if cls in state.classes:
            state.classes[cls].add_unc(U_OPAQUE)
    if share > NOTE_SHARE:
        state.notes.append(f"{100 * share:.0f} % of the step's device time is in operators the "
                           "model "
                           f"does not understand ({named}): carried as it is, ±50 %")


def roofline(state: StepState, changes: tuple[str, ...],
             recorded: Mapping[str, float | None]) -> None:
    """Classes that ran above their roofline in the recorded step (`recorded`: each class's
    achieved share there; the state's is recalibrated by a size change against the work it
    had before, which a smaller model's time would put above any roofline): a note; a wider
    band where the change rests on it."""
    for cls, c in state.classes.items():
        achieved = recorded.get(cls)
        if achieved is None or achieved <= ROOF_LIMIT:
            continue
        rests = [ch for ch in changes if ch in ("gpu", "params", "model")]
        why = ("its work is undercounted or not all its own" if cls in TENSOR_CLASSES else
               "its traffic is served from cache, or its work is not all its own")
        state.notes.append(f"{cls} ran at {100 * achieved:.0f} % of the time its counted work "
                           f"allows at the measured rates: {why}"
                           + (f"; ±{100 * U_ROOF:.0f} % more on it for the "
                              f"{'/'.join(rests)} change" if rests else ""))
        if rests:
            c.add_unc(U_ROOF)
