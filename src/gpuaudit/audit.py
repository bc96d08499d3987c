"""The main job: inspect the machine, run the quick benchmarks, judge both, in one Run."""

from __future__ import annotations

from collections.abc import Callable

from gpuaudit import interrupt
from gpuaudit.bench.context import Profile
from gpuaudit.bench.runner import check_suites, run_bench
from gpuaudit.hw.torch_env import preload_torch
from gpuaudit.inspect import inspect_machine
from gpuaudit.model import Measurement, Run, RunStatus, utc_now


def audit(*, profile: Profile = Profile.QUICK, bench: bool = True,
          step: Callable[[str], None] | None = None,
          on_measurement: Callable[[Measurement], None] | None = None,
          on_suite: Callable[[int, int], None] | None = None, exclusive: bool = False,
          options: dict[str, object] | None = None) -> Run:
    """`gpuaudit run`: the inspect findings and the benchmark figures of this machine.
    `options` go to the suites (e.g. storage `paths`, the feed verdict's `job`).

    Ctrl-C during the inspection propagates (nothing finished); once the inspection is done,
    Ctrl-C returns a PARTIAL run that keeps it and whatever was measured."""
    if bench:
        preload_torch(check_suites(()))  # torch loads while NVML is read
    interrupt.check()
    if step:
        step("inspect")
    inspected = inspect_machine()
    if not bench:
        return inspected.model_copy(update={"kind": "run"})
    try:
        interrupt.check()
        benched = run_bench(machine=inspected.machine, profile=profile, step=step,
                            on_measurement=on_measurement, on_suite=on_suite,
                            exclusive=exclusive, options=options)
    except KeyboardInterrupt:
        interrupt.clear()
        return inspected.model_copy(update={"kind": "run", "status": RunStatus.PARTIAL,
                                            "finished_at": utc_now()})
    return benched.model_copy(update={
        "kind": "run",
        "started_at": inspected.started_at,
        "findings": inspected.findings + benched.findings,
    })
