"""Machine-wide checks: GPU count, one model and one VBIOS, torch against the driver, the
CUDA environment."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator

from gpuaudit.model import Finding, Severity

from .base import MachineCtx, ok, problem
from .readings import answered_nothing

ENV_EFFECTS = {
    "CUDA_LAUNCH_BLOCKING": "every kernel launch waits for the one before",
    "CUDA_INJECTION64_PATH": "a profiler or tool is injected into every CUDA process",
    "CUDA_INJECTION32_PATH": "a profiler or tool is injected into every CUDA process",
    "NSIGHT_CUDA_DEBUGGER": "the CUDA debugger is attached",
}


def _version_tuple(v: str) -> tuple[int, ...]:
    return tuple(int(x) for x in v.split(".")[:2] if x.isdigit())


def check_torch_cuda(c: MachineCtx) -> Iterator[Finding]:
    m = c.machine
    built, driver = m.host.torch_cuda_version, m.cuda_driver_version
    if not built or not driver:
        return
    b, dv = _version_tuple(built), _version_tuple(driver)
    evidence = {"torch_version": m.host.torch_version, "torch_cuda": built,
                "driver_cuda": driver, "driver_version": m.driver_version}
    if b[:1] > dv[:1]:
        yield problem("torch.cuda-newer-than-driver", Severity.FAIL, None,
                      f"torch {m.host.torch_version} is built for CUDA {built}; the driver "
                      f"supports up to CUDA {driver}: CUDA will not initialise",
                      f"Install a torch build for CUDA ≤ {driver} or upgrade the driver.",
                      **evidence)
    elif b > dv:
        yield problem("torch.cuda-minor-newer-than-driver", Severity.WARN, None,
                      f"torch is built for CUDA {built}, the driver supports {driver}: it runs "
                      "through minor-version compatibility, but PTX JIT and newer features fail",
                      f"Prefer a torch build for CUDA {driver} or upgrade the driver.",
                      **evidence)
    else:
        yield ok("torch", None, f"torch {m.host.torch_version} (CUDA {built}) fits the "
                 f"driver's CUDA {driver}", **evidence)


def check_mixed_models(c: MachineCtx) -> Iterator[Finding]:
    """Over the GPUs that answered: a lost one has no model to compare."""
    names = sorted({g.name for g in c.machine.gpus if not answered_nothing(g)})
    if len(names) > 1:
        yield problem("box.mixed-models", Severity.WARN, None,
                      f"this machine mixes GPU models: {', '.join(names)}",
                      "Data-parallel jobs run at the pace of the slowest GPU; pin jobs to one "
                      "model with CUDA_VISIBLE_DEVICES.", models=", ".join(names))


def check_vbios(c: MachineCtx) -> Iterator[Finding]:
    """GPUs of one model should run one VBIOS (Azure NHC fails a node otherwise)."""
    by_model: dict[str, dict[str, list[int]]] = defaultdict(lambda: defaultdict(list))
    for g in c.machine.gpus:
        if g.vbios_version and not answered_nothing(g):
            by_model[g.name][g.vbios_version].append(g.index)
    for model, versions in sorted(by_model.items()):
        if len(versions) > 1:
            listing = "; ".join(f"{v} on GPU {', '.join(map(str, idx))}"
                                for v, idx in sorted(versions.items()))
            yield problem("box.mixed-vbios", Severity.WARN, None,
                          f"the {model} GPUs run different VBIOS versions: {listing}",
                          "GPUs that should be identical may clock, power or behave "
                          "differently; ask the provider to flash one version.",
                          model=model, vbios=listing)


def check_gpu_count(c: MachineCtx) -> Iterator[Finding]:
    """Against the count the user rented (--expect-gpus): a GPU that fell off the bus may be
    gone from NVML's list altogether, and only the expected count shows it."""
    if c.expect_gpus is None:
        return
    listed = len(c.machine.gpus)
    answering = sum(1 for g in c.machine.gpus if not answered_nothing(g))
    evidence = {"expected": c.expect_gpus, "listed": listed, "answering": answering}
    if answering < c.expect_gpus:
        lost = f" ({listed - answering} listed but not answering)" if listed > answering else ""
        yield problem("gpu-count.missing", Severity.FAIL, None,
                      f"{answering} GPU(s) answer, {c.expect_gpus} expected{lost}",
                      "GPUs are missing: check nvidia-smi and the kernel log (XID 79); on a "
                      "rented node, you pay for GPUs you cannot use: report it.", **evidence)
    elif answering > c.expect_gpus:
        yield problem("gpu-count.extra", Severity.WARN, None,
                      f"{answering} GPUs answer, {c.expect_gpus} expected",
                      "Check --expect-gpus, or which GPUs this container sees.", **evidence)
    else:
        yield ok("gpu-count", None, f"{answering} GPUs answer, as expected", **evidence)


def check_cuda_env(c: MachineCtx) -> Iterator[Finding]:
    """Variables that change how every CUDA call runs (DCGM's deployment check has the list)."""
    found = c.machine.host.cuda_env_set
    if found is None:
        return
    if not found:
        yield ok("env", None, "no CUDA debugging or profiling variable set")
        return
    effects = "; ".join(f"{name}: {ENV_EFFECTS.get(name, 'changes how CUDA runs')}"
                        for name in found)
    yield problem("env.cuda-altered", Severity.WARN, None,
                  f"set in this environment: {effects}",
                  f"Unset {', '.join(found)} before measuring or running real work: timings "
                  "are not representative while they are set.", variables=", ".join(found))
