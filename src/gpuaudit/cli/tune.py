"""`gpuaudit tune --model pkg.module:build`: the batch size, precision, accumulation and loader
workers that make a training job fast, measured on this machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gpuaudit.cli import common
from gpuaudit.errors import BadInputError


def tune(
    model: Annotated[str, typer.Option(
        "--model", help="The model: an entry point pkg.module:build (see docs/doctor.md), or "
                        "a reference model by name once the workloads package is installed.")],
    device: Annotated[str, typer.Option(help="cuda, cuda:1 or cpu.")] = "cuda",
    precision: Annotated[str | None, typer.Option(
        help="Precision of the batch search: fp32, tf32, bf16, fp16 [default: bf16 on GPUs "
             "that have it, fp32 on the CPU]")] = None,
    compare: Annotated[str, typer.Option(help="Precisions to compare at the chosen batch.")
                       ] = "fp32,tf32,bf16",
    start_batch: Annotated[int, common.integer(
        "--start-batch", help="First batch size tried.", hi=1 << 24)] = "1",
    max_batch: Annotated[int, common.integer(
        "--max-batch", help="Largest batch size tried.", hi=1 << 24)] = "4096",
    margin: Annotated[float, common.number(
        "--margin", help="Share of GPU memory left free at the chosen batch (0-0.9).", lo=0,
        hi=0.9)] = "0.10",
    tolerance: Annotated[float, common.number(
        "--tolerance", help="A smaller batch within this share of the best throughput is "
                            "preferred (0-0.5).", lo=0, hi=0.5)] = "0.03",
    steps: Annotated[int, common.integer("--steps", help="Timed steps per trial.", lo=2,
                                         hi=100_000)] = "10",
    target_global_batch: Annotated[int | None, common.integer(
        "--target-global-batch", help="Samples per optimizer step to reach with gradient "
                                      "accumulation.", hi=1 << 30)] = None,
    world_size: Annotated[int, common.integer(
        "--world-size", help="GPUs the job trains on (for the accumulation plan).",
        hi=1_000_000)] = "1",
    dataset: Annotated[str | None, typer.Option(
        help="pkg.module:function returning the torch Dataset, for the loader workers "
             "sweep.")] = None,
    workers: Annotated[str | None, typer.Option(
        help="Worker counts to try: '0,2,4,8' [default: 0, 1, 2, 4, … up to the cores]")
    ] = None,
    save: Annotated[Path | None, typer.Option(
        "--json-file", "--save", dir_okay=False, metavar="FILE",
        help="Also write the result as JSON (what --json prints) to this file.")
                    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="JSON on stdout (human text on "
                                                       "stderr).")] = False,
) -> None:
    """The fastest settings for a training job, measured: the throughput-optimal batch size
    with a memory margin (out-of-memory caught, memory checked between trials), a precision
    comparison, the gradient accumulation for a target global batch, a loader workers sweep,
    and the exact settings to paste."""
    from gpuaudit import parse
    from gpuaudit.cli.common import err, out
    from gpuaudit.report.doctor_view import tune_view
    from gpuaudit.tune import TuneOptions, check_device
    from gpuaudit.tune import tune as run_tune
    from gpuaudit.tune.runner import PRECISIONS
    from gpuaudit.tune.search import SearchConfig

    device = check_device(device)  # before torch sees it
    if workers is not None and dataset is None:
        raise BadInputError("--workers goes with --dataset (the loader workers sweep reads "
                            "that dataset)")
    names = tuple(p.strip() for p in compare.split(",") if p.strip())
    for p in (*names, *([precision] if precision else [])):
        if p not in PRECISIONS:
            raise BadInputError(f"precision {p!r}: choose from {', '.join(PRECISIONS)}")
    if start_batch > max_batch:
        raise BadInputError("--start-batch is larger than --max-batch")
    counts: tuple[int, ...] = ()
    if workers is not None:
        counts = tuple(parse.integer(w, "--workers", lo=0, hi=1024, example="0,2,4")
                       for w in workers.split(","))
    common.writable(save, "--json-file")  # before the trials, not after
    opts = TuneOptions(device=device, precision=precision, compare=names, steps=steps,
                       search=SearchConfig(start=start_batch, max_batch=max_batch,
                                           margin=margin, tolerance=tolerance),
                       target_global_batch=target_global_batch, world_size=world_size,
                       dataset=dataset, workers=counts)
    console = err if json_ else out
    with console.status("tuning") as status:
        result = run_tune(model, opts, progress=lambda text: status.update(f"tuning: {text}"))
    doc = result.model_dump(mode="json")
    common.save_json(save, doc, "--json-file")
    console.print(tune_view(result))
    if json_:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    raise typer.Exit(0 if result.chosen_batch is not None else 1)
