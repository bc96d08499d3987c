"""Predicted rates for `recommend --run` (a run with an op profile): the recorded step on every
(GPU model, GPU count) the catalog offers, as `cost.recommend.PredictedTask` takes them.
Pricing, ranking and the rest stay `cost.recommend`'s."""

from __future__ import annotations

from collections.abc import Iterable

from gpuaudit.errors import BadInputError
from gpuaudit.specs.catalog import SpecCatalog

from .engine import Change, predict
from .profile import StepProfile
from .rates import MachineRates

MEMORY_SHARE = 0.95  # the recorded peak must fit in this share of another GPU's memory


def predicted_rates(profile: StepProfile, rates: MachineRates, specs: SpecCatalog,
                    combos: Iterable[tuple[str, int]]
                    ) -> tuple[tuple[str, int, float | None, str], ...]:
    """(GPU model, GPUs, samples/s per GPU or None, why) for each distinct combination."""
    source = rates.roofs.gpu
    out = []
    for model, count in sorted(set(combos)):
        spec = specs.get(model)
        if spec is None:
            out.append((model, count, None, f"GPU {model!r} is not in the spec catalog"))
            continue
        peak = profile.peak_memory_gb
        if peak is not None and peak > MEMORY_SHARE * spec.memory_gb:
            out.append((model, count, None, f"the recorded step needs {peak:.3g} GB per GPU; "
                                            f"{spec.name} has {spec.memory_gb:g} GB"))
            continue
        if model == source.id and count == 1:
            rate = profile.samples_per_s
            out.append((model, count, rate, f"measured in run {profile.run_id}: "
                                            f"{rate:,.4g} samples/s"))
            continue
        change = Change(gpu=model if model != source.id else None,
                        gpus=count if count > 1 else None)
        try:
            p = predict(profile, rates, change, specs)
        except BadInputError as exc:
            out.append((model, count, None, str(exc)))
            continue
        out.append((model, count, p.samples_per_s / count,
                    f"predicted {p.samples_per_s:,.4g} samples/s on {count} × {spec.name} "
                    f"(±{p.uncertainty_pct:.3g} %; step {p.step_ms:.4g} ms)"))
    return tuple(out)
