"""`gpuaudit tune --model pkg.module:build`: the batch size, precision, accumulation and loader
workers that make a training job fast, measured on this machine."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

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
    start_batch: Annotated[int, typer.Option(min=1, help="First batch size tried.")] = 1,
    max_batch: Annotated[int, typer.Option(min=1, help="Largest batch size tried.")] = 4096,
    margin: Annotated[float, typer.Option(
        min=0.0, max=0.9, help="Share of GPU memory left free at the chosen batch.")] = 0.10,
    tolerance: Annotated[float, typer.Option(
        min=0.0, max=0.5, help="A smaller batch within this of the best throughput is "
                               "preferred.")] = 0.03,
    steps: Annotated[int, typer.Option(min=2, help="Timed steps per trial.")] = 10,
    target_global_batch: Annotated[int | None, typer.Option(
        min=1, help="Samples per optimizer step to reach with gradient accumulation.")] = None,
    world_size: Annotated[int, typer.Option(min=1, help="GPUs the job trains on (for the "
                                                        "accumulation plan).")] = 1,
    dataset: Annotated[str | None, typer.Option(
        help="pkg.module:function returning the torch Dataset, for the loader workers "
             "sweep.")] = None,
    workers: Annotated[str | None, typer.Option(
        help="Worker counts to try: '0,2,4,8' [default: 0, 1, 2, 4, … up to the cores]")
    ] = None,
    save: Annotated[Path | None, typer.Option("--save", dir_okay=False,
                                              help="Also write the result as JSON here.")
                    ] = None,
    json_: Annotated[bool, typer.Option("--json", help="JSON on stdout (human text on "
                                                       "stderr).")] = False,
) -> None:
    """The fastest settings for a training job, measured: the throughput-optimal batch size
    with a memory margin (out-of-memory caught, memory checked between trials), a precision
    comparison, the gradient accumulation for a target global batch, a loader workers sweep,
    and the exact settings to paste."""
    from gpuaudit.cli.app import err, out
    from gpuaudit.report.doctor_view import tune_view
    from gpuaudit.tune import TuneOptions
    from gpuaudit.tune import tune as run_tune
    from gpuaudit.tune.runner import PRECISIONS
    from gpuaudit.tune.search import SearchConfig

    names = tuple(p.strip() for p in compare.split(",") if p.strip())
    for p in (*names, *([precision] if precision else [])):
        if p not in PRECISIONS:
            raise BadInputError(f"precision {p!r}: choose from {', '.join(PRECISIONS)}")
    if start_batch > max_batch:
        raise BadInputError("--start-batch is larger than --max-batch")
    counts: tuple[int, ...] = ()
    if workers:
        try:
            counts = tuple(int(w) for w in workers.split(",") if w.strip())
        except ValueError:
            raise BadInputError(f"--workers {workers!r}: expected counts like 0,2,4") from None
        if any(c < 0 for c in counts):
            raise BadInputError(f"--workers {workers!r}: counts cannot be negative")
    opts = TuneOptions(device=device, precision=precision, compare=names, steps=steps,
                       search=SearchConfig(start=start_batch, max_batch=max_batch,
                                           margin=margin, tolerance=tolerance),
                       target_global_batch=target_global_batch, world_size=world_size,
                       dataset=dataset, workers=counts)
    console = err if json_ else out
    with console.status("tuning") as status:
        result = run_tune(model, opts, progress=lambda text: status.update(f"tuning: {text}"))
    doc = result.model_dump(mode="json")
    if save is not None:
        try:
            save.write_text(json.dumps(doc, indent=2) + "\n")
        except OSError as exc:
            raise BadInputError(f"--save {save}: {exc.strerror or exc}") from None
    console.print(tune_view(result))
    if json_:
        sys.stdout.write(json.dumps(doc, indent=2) + "\n")
    raise typer.Exit(0 if result.chosen_batch is not None else 1)
