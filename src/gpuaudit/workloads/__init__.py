"""End-to-end workloads: how fast real models train and serve on this machine, and how far
that is from what the hardware allows (`gpuaudit bench train`, `gpuaudit bench infer`).

`entry.load("pkg.module:build")` loads a user's model (shared with `tune` and `doctor`);
`suite_train.run` and `suite_infer.run` are the bench suites; the pure parts (`flops`,
`stats`, `serving`) need no torch."""

from gpuaudit.workloads.entry import Workload, load

__all__ = ["Workload", "load"]
