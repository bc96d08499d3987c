"""A GPU slower than its box-mates on the same benchmark is a straggler.

Relative to the box, not to a datasheet: GPUs of one model in one machine should agree, and
gpu-fryer and DCGM judge the same way. Pure: CI tests it with exact values.
"""

from __future__ import annotations

import json
from collections import defaultdict
from collections.abc import Iterable

from gpuaudit.bench.stats import quartiles
from gpuaudit.model import Finding, Measurement, Severity

# A GPU this far below the box's median is flagged even when the figures are very steady.
MIN_GAP = 0.05
# ... and a noisy figure needs a wider gap: this many times its relative IQR.
NOISE_MULTIPLE = 3.0


def _key(m: Measurement) -> tuple[str, str, str]:
    params = {k: v for k, v in m.params.items() if k not in ("src", "dst")}
    return m.suite, m.name, json.dumps(params, sort_keys=True, default=str)


def relative_iqr(m: Measurement) -> float:
    if m.value and m.spread_low is not None and m.spread_high is not None:
        return abs(m.spread_high - m.spread_low) / abs(m.value)
    return 0.0


def find_stragglers(measurements: Iterable[Measurement], *, lower_is_better: frozenset[str]
                    = frozenset({"us"})) -> list[Finding]:
    """One WARN per (GPU, benchmark) whose figure is worse than the box's median by more than
    max(5 %, 3 × the noisiest IQR among them). Needs 3+ GPUs for a median to mean anything;
    with 2, the slower one is flagged only past twice the threshold."""
    groups: dict[tuple[str, str, str], list[Measurement]] = defaultdict(list)
    for m in measurements:
        if m.value is not None and m.gpu_index is not None:
            groups[_key(m)].append(m)
    findings = []
    for (suite, name, _), ms in sorted(groups.items()):
        if len({m.gpu_index for m in ms}) < 2:
            continue
        values = [m.value for m in ms if m.value is not None]
        _, mid, _ = quartiles(values)
        if len(ms) == 2:
            mid = max(values) if ms[0].unit not in lower_is_better else min(values)
        if mid == 0:
            continue  # nothing to be a fraction of (e.g. most GPUs read zero)
        noise = max(relative_iqr(m) for m in ms)
        threshold = max(MIN_GAP, NOISE_MULTIPLE * noise) * (2 if len(ms) == 2 else 1)
        for m in ms:
            assert m.value is not None
            gap = (m.value - mid) / mid if m.unit in lower_is_better else (mid - m.value) / mid
            if gap > threshold:
                findings.append(Finding(
                    code="bench.straggler", severity=Severity.WARN, gpu_index=m.gpu_index,
                    message=f"GPU {m.gpu_index} {suite}/{name}: {m.value:.4g} {m.unit} is "
                            f"{100 * gap:.0f}% worse than the box ({mid:.4g} {m.unit})",
                    advice="Check this GPU's clocks, temperature and PCIe/NVLink link "
                           "(gpuaudit inspect); a slow GPU paces every data-parallel job.",
                    evidence={"suite": suite, "name": name, "value": m.value,
                              "box_reference": mid, "gap_pct": round(100 * gap, 1),
                              "threshold_pct": round(100 * threshold, 1)}))
    return findings
