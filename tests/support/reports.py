"""Documents the report renders beside a run: a doctor's diagnosis."""

from __future__ import annotations

from gpuaudit.model import Severity


def diagnosis():
    from datetime import datetime, timezone

    from gpuaudit.model.diagnosis import Bottleneck, Change, Diagnosis, Observation

    return Diagnosis(
        command=("python", "train.py"), pid=4242, exit_code=0,
        started_at=datetime(2026, 11, 30, 18, 0, tzinfo=timezone.utc), duration_s=20.0,
        gpus=(0,), findings=(Bottleneck(
            code="input-bound", title="the GPU waits for data", severity=Severity.WARN,
            share=0.62, confidence="high", message="SM activity 0 % in 62 % of the samples "
            "while the loader workers are busy", gpu_index=0,
            evidence=(Observation(name="sm_activity_pct", value=0.0, unit="%",
                                  source="NVML GPM"),)),),
        changes=(Change(rank=1, finding="input-bound", action="more DataLoader workers",
                        settings="DataLoader(num_workers=8, pin_memory=True)", gain_low=1.8,
                        gain_high=2.5),))
