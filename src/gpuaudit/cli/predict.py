"""`gpuaudit predict`: a recorded training step on another precision, GPU count, model size
or GPU model.

    gpuaudit predict RUN --gpus 2
    gpuaudit predict RUN --precision bf16
    gpuaudit predict RUN --gpu h100-sxm [--gpus 8]
    gpuaudit predict RUN --params 1.3B
    gpuaudit predict RUN --batch-size 256
    gpuaudit predict RUN --model mymodels:build_large

RUN is a stored run id (or prefix) or a run's JSON file; it must hold an op profile
(`gpuaudit bench train --op-profile`). The machine's measured rates come from RUN when it
has them (matmul, memory), else from `--rates RUN2`, else from the newest stored run of the
same GPU model that has them.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Annotated

import typer

from gpuaudit.cli import common
from gpuaudit.cli.common import DbOpt, JsonOpt
from gpuaudit.errors import BadInputError

if TYPE_CHECKING:
    from gpuaudit.model.run import Run
    from gpuaudit.predict.rates import MachineRates
    from gpuaudit.specs.catalog import SpecCatalog

WorkloadOpt = Annotated[str | None, typer.Option(
    "--workload", metavar="MODEL/MODE",
    help="Which recorded op profile, e.g. gpt-124m/bf16 [default: the run's only one].")]
RatesOpt = Annotated[str | None, typer.Option(
    "--rates", metavar="RUN",
    help="A bench run (id or JSON file) with this machine's matmul, memory and collectives "
         "figures [default: RUN's own, else the newest stored run of the same GPU].")]


# Resizing traces a training step of the target shape on torch's meta device, layer by layer:
# 10T parameters (~370 layers) takes ~20 s on a busy 2-core machine, 10^15 (1,700) minutes.
MAX_PREDICT_PARAMS = 1e13


def load_run_arg(text: str, db: str | None) -> Run:
    """A run's JSON file, or a stored run id (or unique prefix)."""
    from gpuaudit.cli.report import is_file_ref, read_run_file

    if is_file_ref(text):
        return read_run_file(text)
    from gpuaudit.store import Store

    with Store(db, read_only=True) as store:
        return store.get(text)


def resolve_rates(run: Run, rates_arg: str | None, db: str | None, specs: SpecCatalog,
                  precisions: tuple[str, ...]) -> MachineRates:
    """The rates the prediction is calibrated with (module docstring), or bad input naming
    what is missing."""
    from gpuaudit.predict.rates import gpu_spec_of, machine_rates, missing_rates

    spec = gpu_spec_of(run, specs)
    if rates_arg is not None:
        other = load_run_arg(rates_arg, db)
        found = machine_rates(other, specs)
        if found is None:
            lacks = ", ".join(missing_rates(other, precisions)) or "a known GPU"
            raise BadInputError(f"--rates {rates_arg}: run {other.id} lacks {lacks}")
        if spec is not None and found.roofs.gpu.id != spec.id:
            raise BadInputError(f"--rates {rates_arg}: run {other.id} measured "
                                f"{found.roofs.gpu.name}, run {run.id} ran on {spec.name}")
        return found
    own = machine_rates(run, specs)
    if own is not None:
        return own
    if spec is not None:
        stored = _newest_with_rates(spec.id, db, specs)
        if stored is not None:
            return stored
    lacks = ", ".join(missing_rates(run, precisions))
    if spec is None and not lacks:
        # the rates are there: what is missing is a datasheet to scale the step against
        raise BadInputError(f"run {run.id} lacks what a prediction needs: a GPU in the spec "
                            "catalog (its machine has none); predict scales a step recorded "
                            "on one: run `gpuaudit bench train --op-profile` on that GPU")
    where = spec.name if spec else "a GPU in the spec catalog (its machine has none)"
    raise BadInputError(f"run {run.id} lacks what a prediction needs: {lacks} of {where}; "
                        "no stored run of that GPU has them either: run `gpuaudit bench "
                        "matmul memory collectives` there, or give --rates RUN")


def _newest_with_rates(gpu_id: str, db: str | None, specs: SpecCatalog) -> MachineRates | None:
    from gpuaudit.errors import GpuauditError
    from gpuaudit.predict.rates import machine_rates
    from gpuaudit.store import Store

    try:
        with Store(db, read_only=True) as store:
            for summary in store.list_runs(limit=50):
                if not summary.gpu_summary or summary.kind not in ("bench", "run"):
                    continue
                found = machine_rates(store.get(summary.id), specs)
                if found is not None and found.roofs.gpu.id == gpu_id:
                    return found
    except GpuauditError:
        return None
    return None


def predict(
    run: Annotated[str, typer.Argument(metavar="RUN", help="A run id or prefix, or a run's "
                                                           "JSON file, with an op profile.")],
    gpus: Annotated[int | None, common.integer(
        "--gpus", help="GPUs, data parallel (DDP), the same batch per GPU.", hi=100_000)
    ] = None,
    precision: Annotated[str | None, typer.Option(
        "--precision", help="fp32, tf32, bf16 or fp16 (autocast).")] = None,
    gpu: Annotated[str | None, typer.Option(
        "--gpu", help="Another GPU model, as the spec catalog names it (h100-sxm, "
                      "a100-sxm4-80gb, …).")] = None,
    params: Annotated[float | None, common.count(
        "--params", help="Another size of the same family: 1.3B, 350M (at most 10T: the "
                         "step is traced layer by layer, which takes longer the larger).",
        hi=MAX_PREDICT_PARAMS)] = None,
    batch_size: Annotated[int | None, common.integer(
        "--batch-size", help="Another batch per GPU (with --params: the target's [default: "
                             "the family preset's]).", hi=1_000_000)] = None,
    seq_len: Annotated[int | None, common.integer(
        "--seq-len", help="With --params: the context [default: the preset's].",
        hi=10_000_000)] = None,
    model: Annotated[str | None, typer.Option(
        "--model", metavar="PKG.MODULE:FN",
        help="Another size of your own model: the entry point that builds it (as bench train "
             "--model takes it).")] = None,
    workload: WorkloadOpt = None,
    rates: RatesOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """A recorded step's time and throughput on another GPU count, precision, model size or
    GPU model: per operator class, with its basis and an uncertainty band."""
    from gpuaudit.predict import Change, load_profile
    from gpuaudit.predict import predict as run_predict
    from gpuaudit.reading import taking_apart
    from gpuaudit.report.predict_view import predict_view
    from gpuaudit.specs.catalog import load_catalog

    if seq_len is not None and params is None:
        raise BadInputError("--seq-len goes with --params")
    if model is not None:
        from gpuaudit.workloads.entry import resolve

        resolve(model)  # a bad entry point is bad input before any run is read
    change = Change(gpus=gpus, precision=precision.strip().lower() if precision else None,
                    gpu=gpu, params=params, batch=batch_size, seq_len=seq_len, model=model)
    if change.empty:
        raise BadInputError("nothing to predict: give --gpus, --precision, --gpu, --params, "
                            "--batch-size or --model")
    specs = load_catalog()
    if gpu is not None and specs.get(gpu.strip().lower()) is None:
        from gpuaudit import parse

        raise parse.unknown("--gpu", gpu, (g.id for g in specs.gpus), "GPU")
    stored = load_run_arg(run, db)
    with taking_apart(f"run {stored.id}'s op profile"):
        profile = load_profile(stored, workload)
    needed = tuple(dict.fromkeys(p for p in (profile.precision, change.precision) if p))
    with taking_apart(f"the rates of run {rates or stored.id}"):
        machine = resolve_rates(stored, rates, db, specs, needed)
    with common.logs_to(common.err, "gpuaudit.predict"):  # a long count says so on stderr
        result = run_predict(profile, machine, change, specs)
    if json_:
        common.print_json(result.model_dump(mode="json"))
    else:
        common.out.print(predict_view(result))
