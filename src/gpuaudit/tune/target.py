"""What `tune` trains: a reference model by name (`gpt-124m`, ...) or the user's entry point
`pkg.module:build`, both as the workloads package makes them (`gpuaudit.workloads`, shared by
`bench train|infer`, `tune` and `doctor`)."""

from __future__ import annotations

from typing import Any

from gpuaudit.workloads.entry import Workload

Target = Workload


def load(spec: str, device: Any = None) -> Workload:
    """The target named by `spec`: an entry point `pkg.module:build` or a reference model."""
    from gpuaudit.workloads import entry, models

    if entry.is_entry_point(spec):
        return entry.load(spec)
    models.check_model(spec)
    return models.build(spec, device or "cpu")
