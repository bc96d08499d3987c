"""What every rule returns: a finding with the changes that answer it, and the arithmetic of
their expected gains (Amdahl's law)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

from gpuaudit.model import Bottleneck, Observation, Severity

GAIN_CAP = 20.0  # an "up to" beyond this says nothing more


@dataclass(frozen=True)
class Proposal:
    """A change before ranking."""

    action: str
    settings: str | None = None
    gain_low: float | None = None
    gain_high: float | None = None
    gain_basis: str = ""


@dataclass(frozen=True)
class Result:
    finding: Bottleneck
    proposals: tuple[Proposal, ...] = field(default=())


def amdahl(share: float, speedup: float = math.inf) -> float:
    """Speed-up of the whole when `share` of the time becomes `speedup` times faster."""
    share = min(max(share, 0.0), 0.999)
    rest = 0.0 if math.isinf(speedup) else share / speedup
    return round(min(1 / (1 - share + rest), GAIN_CAP), 2)


def finding(code: str, title: str, share: float | None, confidence: str, message: str,
             evidence: list[Observation], gpu: int | None = None,
             severity: Severity | None = None) -> Bottleneck:
    if severity is None:
        severity = Severity.WARN if (share or 0) >= 0.2 else Severity.INFO
    return Bottleneck(code=code, title=title, severity=severity,
                      share=round(share, 3) if share is not None else 0.0,
                      confidence=confidence, message=message, gpu_index=gpu,
                      evidence=tuple(evidence))


def pct(x: float) -> str:
    return f"{x * 100:.0f} %"


