"""`gpuaudit recommend render` and `recommend simulate`: which instance to rent for frames to
render or simulations to run, from a timing on one GPU carried to the others by the spec
catalog's rates (gpuaudit.cost.recommend.batch).

    gpuaudit recommend render --frames 2000 --seconds-per-frame 45 --on rtx-4090
    gpuaudit recommend render --frames 1e5 --run RUN --resolution 4k     # our scene, measured
    gpuaudit recommend simulate --kernel nbody --precision fp64 --hours 12 --on h100-sxm
    gpuaudit recommend simulate --kernel fft --run RUN --steps 1e6 --size 512
"""

from __future__ import annotations

import json
import math
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuaudit.cli import common
from gpuaudit.cli.common import DbOpt, JsonOpt
from gpuaudit.cli.recommend import BudgetOpt, CurrencyOpt, SortOpt, TopOpt
from gpuaudit.errors import BadInputError

if TYPE_CHECKING:
    from gpuaudit.cost.recommend.batch import BatchTask
    from gpuaudit.model.run import Run

# kernel → the bench science figure that times it
SCIENCE_FIGURE = {"fft": "fft3d", "spmv": "spmv", "stencil": "stencil7",
                  "montecarlo": "montecarlo", "nbody": "nbody"}
RESOLUTION_FIGURE = {"1080p": "scene_1080p", "4k": "scene_4k"}

OnOpt = Annotated[str | None, typer.Option(
    "--on", metavar="GPU", help="The GPU the timing was taken on: a spec catalog id "
                                "(rtx-4090, l40s, h100-sxm) or its NVML name.")]
RunOpt = Annotated[str | None, typer.Option(
    "--run", metavar="RUN", help="A stored bench run measured here (bench render / bench "
                                 "science) to time the job with.")]
DeadlineOpt = Annotated[float | None, common.duration(
    "--deadline", help="Finish within this long: 36h, 14d, 2w.")]


def _load_run(run: str, db: str | None) -> Run:
    from gpuaudit.store import Store

    with Store(db, read_only=True) as store:
        return store.get(run)


def _run_gpu(stored: Run) -> str:
    from gpuaudit.specs import lookup

    gpus = stored.machine.gpus if stored.machine else ()
    spec = lookup(nvml_name=gpus[0].name, pci_device_id=gpus[0].pci_device_id) if gpus else None
    if spec is None:
        raise BadInputError(f"run {stored.id}: its GPU is not in the spec catalog")
    return spec.id


def _figure(stored: Run, suite: str, name: str) -> tuple[float, dict[str, object]]:
    """The run's figure and its parameters; one measured in software or on the CPU, or one
    that failed its check, is no basis for renting a GPU."""
    from gpuaudit.bench.render.gl import SOFTWARE

    for m in stored.measurements:
        if m.suite == suite and m.name == name and m.value:
            renderer = str(m.params.get("renderer", "")).lower()
            if m.params.get("device") == "cpu" or any(s in renderer for s in SOFTWARE):
                raise BadInputError(f"run {stored.id}: {suite}/{name} was measured on the CPU"
                                    ", not a GPU")
            if m.verified is False:
                raise BadInputError(f"run {stored.id}: {suite}/{name} failed its result check")
            return m.value, dict(m.params)
    raise BadInputError(f"run {stored.id} has no {suite}/{name} figure (`gpuaudit bench "
                        f"{suite}` measures it)")


def _rank(task: BatchTask, *, deadline: float | None, budget: float | None, currency: str,
          sort: str, top: int, catalog: Path | None, json_: bool) -> None:
    from gpuaudit.cli.recommend import _constraints, load_offers
    from gpuaudit.cost.recommend.batch import recommend_batch
    from gpuaudit.report.recommend_view import recommend_view

    result = recommend_batch(task, load_offers(catalog),
                             constraints=_constraints(deadline, budget, currency, sort),
                             top=top)
    if json_:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        common.out.print(recommend_view(result))


def _base(on: str | None, run: str | None, timing: str) -> None:
    if (on is None) == (run is None):
        raise BadInputError(f"give --run RUN (a stored bench run) or {timing} with --on GPU")


def render(
    frames: Annotated[float, common.count("--frames", help="Frames to render: 2000, 1e5.",
                                          hi=1e12)],
    scene: Annotated[str, common.choice(
        "--scene", choices=("path-traced", "raster"),
        help="path-traced (Cycles, Octane, Redshift…) or raster (game engines, Eevee, our "
             "reference scene).")] = "path-traced",
    seconds_per_frame: Annotated[float | None, common.number(
        "--seconds-per-frame", help="Your frame time on the --on GPU.", lo=0, lo_open=True,
        hi=1e7)] = None,
    on: OnOpt = None,
    run: RunOpt = None,
    resolution: Annotated[str, common.choice(
        "--resolution", choices=("1080p", "4k"),
        help="With --run: which of the reference scene's frame rates.")] = "1080p",
    scene_memory_gb: Annotated[float | None, common.number(
        "--scene-memory-gb", help="GPU memory the scene needs (offers with less are "
                                  "excluded).", lo=0, lo_open=True, hi=1e5)] = None,
    rt_speedup: Annotated[float, common.number(
        "--rt-speedup", help="Path-traced: how much faster RT cores make a frame (an "
                             "assumption).", lo=1, hi=100)] = "2",
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Render N frames: your frame time on one GPU (or our scene measured in a run), carried
    to each offer's GPU by its rates (raster: graphics FP32, texture fill, bandwidth;
    path-traced: FP32 and RT cores)."""
    from gpuaudit.cost.recommend.batch import RenderTask

    _base(on, run, "--seconds-per-frame")
    if run is not None:
        if seconds_per_frame is not None:
            raise BadInputError("--seconds-per-frame goes with --on, not --run")
        if scene != "raster":
            raise BadInputError("--run times the reference scene, which is rasterised: add "
                                "--scene raster (for path-traced frames give your own "
                                "--seconds-per-frame with --on)")
        stored = _load_run(run, db)
        fps, _ = _figure(stored, "render", RESOLUTION_FIGURE[resolution])
        task = RenderTask(frames=frames, seconds_per_frame=1 / fps, base_gpu=_run_gpu(stored),
                          scene=scene, measured=True, scene_memory_gb=scene_memory_gb,
                          rt_speedup=rt_speedup, basis=f"the reference scene at {resolution},"
                                                       f" measured in run {stored.id}")
    else:
        if seconds_per_frame is None:
            raise BadInputError("--on needs --seconds-per-frame: your frame time on that GPU")
        assert on is not None
        task = RenderTask(frames=frames, seconds_per_frame=seconds_per_frame, base_gpu=on,
                          scene=scene, measured=True, scene_memory_gb=scene_memory_gb,
                          rt_speedup=rt_speedup, basis=f"your timing on {on}")
    _rank(task, deadline=deadline, budget=budget, currency=currency, sort=sort, top=top,
          catalog=catalog, json_=json_)


def step_seconds(kernel: str, value: float, params: dict[str, object],
                 size: float | None) -> tuple[float, str]:
    """Seconds one step of `kernel` takes at the measured rate `value` (bench science's unit),
    and the step it is: the benchmark's own problem, or one of `size`."""
    from gpuaudit.bench.science.roofline import fft_flops, nbody_flops, poisson_nnz

    if kernel == "fft":
        n = round(size ** 3) if size else int(params.get("points", 0) or 0)
        return fft_flops(n) / (value * 1e9), f"a {round(n ** (1 / 3))}³ complex FFT"
    if kernel == "spmv":
        nnz = poisson_nnz(round(size)) if size else int(params.get("nnz", 0) or 0)
        return 2 * nnz / (value * 1e9), f"a 7-point SpMV of {nnz:,} stored values"
    if kernel == "stencil":
        pts = round(size - 2) ** 3 if size else int(params.get("points", 0) or 0)
        return pts / (value * 1e9), f"a 7-point stencil sweep of {pts:,} points"
    if kernel == "montecarlo":
        s = round(size) if size else int(params.get("samples_per_launch", 0) or 0)
        return s / (value * 1e9), f"{s:,} Monte Carlo samples"
    b = round(size) if size else int(params.get("bodies", 0) or 0)
    return nbody_flops(b) / (value * 1e9), f"an all-pairs step of {b:,} bodies"


def simulate(
    kernel: Annotated[str, common.choice(
        "--kernel", choices=("fft", "spmv", "stencil", "montecarlo", "nbody"),
        help="What bounds a step: fft (spectral codes), spmv (implicit solvers), stencil "
             "(finite differences), montecarlo, nbody (molecular dynamics, gravity).")],
    precision: Annotated[str, common.choice("--precision", choices=("fp64", "fp32"),
                                            help="The simulation's precision.")] = "fp64",
    hours: Annotated[float | None, common.number(
        "--hours", help="With --on: one simulation's hours on that GPU.", lo=0, lo_open=True,
        hi=1e7)] = None,
    on: OnOpt = None,
    run: RunOpt = None,
    steps: Annotated[float | None, common.count(
        "--steps", help="With --run: steps per simulation (1e6).", hi=1e15)] = None,
    size: Annotated[float | None, common.count(
        "--size", help="With --run: a step's size (grid side for fft/spmv/stencil, samples "
                       "for montecarlo, bodies for nbody) [default: the benchmark's].",
        hi=1e12)] = None,
    jobs: Annotated[int, common.integer("--jobs", help="Independent simulations (an "
                                                       "ensemble), one GPU each.",
                                        hi=1_000_000)] = "1",
    memory_gb: Annotated[float | None, common.number(
        "--memory-gb", help="GPU memory one simulation needs.", lo=0, lo_open=True, hi=1e5)
    ] = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Run simulations bound by one kind of kernel: your hours on one GPU (or a bench science
    run's measured rate × --steps), carried to each offer's GPU by the kernel's roofs (FP64
    peak or memory bandwidth)."""
    from gpuaudit.cost.recommend.batch import SimulateTask

    _base(on, run, "--hours")
    if run is not None:
        if hours is not None or steps is None:
            raise BadInputError("--run needs --steps (steps per simulation), not --hours")
        stored = _load_run(run, db)
        name = f"{SCIENCE_FIGURE[kernel]}_{precision}"
        value, params = _figure(stored, "science", name)
        seconds, what = step_seconds(kernel, value, params, size)
        if not seconds > 0 or math.isinf(seconds):
            raise BadInputError(f"run {stored.id}: science/{name} does not say its problem "
                                "size: give --size")
        task = SimulateTask(kernel=kernel, precision=precision, hours=steps * seconds / 3600,
                            base_gpu=_run_gpu(stored), jobs=jobs, measured=True,
                            memory_gb=memory_gb, basis=f"{steps:,.0f} steps of {what} at "
                                                       f"science/{name} measured in run "
                                                       f"{stored.id}")
    else:
        if hours is None:
            raise BadInputError("--on needs --hours: one simulation's hours on that GPU")
        if steps is not None or size is not None:
            raise BadInputError("--steps and --size go with --run")
        assert on is not None
        task = SimulateTask(kernel=kernel, precision=precision, hours=hours, base_gpu=on,
                            jobs=jobs, measured=True, memory_gb=memory_gb,
                            basis=f"your timing on {on}")
    _rank(task, deadline=deadline, budget=budget, currency=currency, sort=sort, top=top,
          catalog=catalog, json_=json_)

