"""`gpuaudit recommend`: which instance to rent for a task, ranked by estimated cost or time.

    gpuaudit recommend train --params 7B --tokens 1T [--deadline 14d] [--budget 50000]
    gpuaudit recommend finetune --params 70B --method lora
    gpuaudit recommend serve --params 70B --qps 20 --prompt-tokens 3840 --tpot-ms 50 --ttft-ms 2000
    gpuaudit recommend --run RUN_ID --hours 12          # ranked by its matmul/bf16 figure
    gpuaudit recommend --run RUN --tokens 10B           # with an op profile: predicted per offer
"""

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, ClassVar

import typer

from gpuaudit.cli import common, group
from gpuaudit.cli.common import DbOpt, JsonOpt
from gpuaudit.errors import BadInputError

if TYPE_CHECKING:
    from collections.abc import Sequence
    from types import ModuleType

    from gpuaudit.cost.recommend import Constraints, Task
    from gpuaudit.cost.recommend.measured import MeasuredAllReduce
    from gpuaudit.model import Run
    from gpuaudit.model.cost import Offer
    from gpuaudit.model.recommendation import FeedNeed


_HERE = "gpuaudit.cli.recommend"


class _Subcommands(group.LazyGroup):
    # made when invoked (the help lists them all); render and simulate have their own module
    SUBCOMMANDS: ClassVar[dict[str, tuple[str, str]]] = {
        "train": (_HERE, "train"), "finetune": (_HERE, "finetune"),
        "serve": (_HERE, "serve"), "render": ("gpuaudit.cli.recommend_batch", "render"),
        "simulate": ("gpuaudit.cli.recommend_batch", "simulate")}


recommend_app = group.new_app(
    "Which instance to rent for a task: train, fine-tune, serve, or a benchmarked workload "
    "(--run). Estimates, with their basis and reasons.", cls=_Subcommands,
    no_args_is_help=False)

TopOpt = Annotated[int, common.integer("--top", help="How many offers to show.", hi=1000)]
DeadlineOpt = Annotated[float | None, common.duration(
    "--deadline", help="Finish within this long: 36h, 14d, 2w (train, fine-tune, --run).")]
BudgetOpt = Annotated[float | None, common.money(
    "--budget", "--budget-usd", help="Spend at most this much, in --currency.")]
CurrencyOpt = Annotated[str, common.currency(
    "--currency", help="Rank offers priced in this currency (no exchange rates).")]
SortOpt = Annotated[str, common.choice("--sort", choices=("cost", "time"),
                                       help="Rank by estimated cost or time.")]
MfuOpt = Annotated[float, common.fraction("--mfu", help="Model FLOPs utilization assumed (0-1, "
                                                        "or a %).", zero_ok=False)]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32, tf32, bf16, fp16, fp8.")]
LayersOpt = Annotated[int | None, common.integer(
    "--layers", help="Transformer layers [default: derived from --params].", hi=10_000)]
HiddenOpt = Annotated[int | None, common.integer(
    "--hidden", help="Hidden size [default: derived from --params].", hi=1_000_000)]
SeqOpt = Annotated[int, common.integer("--seq-len", help="Training sequence length.",
                                       hi=10_000_000)]
MicroOpt = Annotated[int, common.integer("--micro-batch", help="Sequences per GPU per step.",
                                         hi=1_000_000)]
PoolOpt = Annotated[bool, typer.Option(
    "--allow-pooling", help="Also pool instances with no published network between them "
                            "(marketplace and consumer hosts) for one job, over an assumed "
                            "10 Gb/s each.")]
ParamsOpt = Annotated[float, common.count("--params", help="Parameters: 7B, 1.3B, 125M.",
                                          hi=1e15)]
FeedOpt = Annotated[str | None, typer.Option(
    "--feed", metavar="RUN|FILE",
    help="The job's input need: a run with bench train data loading or bench host JPEG "
         "figures (id or JSON file), or a doctor diagnosis (--json-file FILE) that found it "
         "input-bound. Offers whose vCPUs or memory per GPU cannot feed their GPUs are "
         "marked. [default: --run's own data loading figures, where it has them]")]
AllReduceOpt = Annotated[str | None, typer.Option(
    "--allreduce-run", metavar="ID",
    help="A fleet run (or its JSON file) with an all-reduce measured across nodes: it sizes "
         "the cross-node communication on offers of its GPU model and GPUs per node.")]


def _tasks() -> "ModuleType":
    """gpuaudit.cost.recommend, loaded as the command line's own modules are
    (`group.loading`): the tasks are made before the work starts."""
    with group.loading():
        from gpuaudit.cost import recommend as tasks
    return tasks


def load_offers(path: Path | None) -> "Sequence[Offer]":
    """The catalog's offers (a seam: tests replace it), as loaded: read back from the cache,
    an offer is made only when the ranking shows it."""
    return common.load_catalog(path).offers  # type: ignore[no-any-return]


def _constraints(deadline_s: float | None, budget: float | None, currency: str, sort: str
                 ) -> "Constraints":
    from gpuaudit.cost.recommend import Constraints

    return Constraints(deadline_hours=None if deadline_s is None else deadline_s / 3600,
                       budget=budget, currency=currency, sort=sort)  # type: ignore[arg-type]


def _run(task: "Task", cons: "Constraints", *, catalog: Path | None, top: int, mfu: float,
         json_: bool, allow_pooling: bool = False, allreduce: str | None = None,
         db: str | None = None, feed: str | None = None, feed_need: "FeedNeed | None" = None
         ) -> None:
    with common.collector_paused():
        from gpuaudit.cost.recommend import recommend
        from gpuaudit.model.recommendation import Assumptions

        measured = None if allreduce is None else load_allreduce(allreduce, db)
        if feed is not None:
            feed_need = load_feed(feed, db, task)
        result = recommend(task, load_offers(catalog), constraints=cons,
                           assumptions=Assumptions(mfu=mfu, allow_pooling=allow_pooling),
                           top=top, allreduce=measured, feed=feed_need)
    from gpuaudit.report.plain import terminal_width
    from gpuaudit.report.recommend_view import recommend_text

    if json_:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        sys.stdout.write(recommend_text(result, terminal_width()) + "\n")


def _task_rate(task: "Task") -> tuple[float, str] | None:
    from gpuaudit.cost.recommend import BenchmarkedTask

    if isinstance(task, BenchmarkedTask) and task.unit == "samples/s":
        return task.rate_per_gpu, task.gpu_model
    return None


def load_feed(ref: str, db: str | None, task: "Task") -> "FeedNeed":
    """--feed: a run (id or JSON file) with input figures, or a doctor diagnosis file."""
    from gpuaudit.cli.report import is_file_ref
    from gpuaudit.cost.recommend.feed import need_from_diagnosis, need_from_run
    from gpuaudit.model import load_run
    from gpuaudit.reading import load_json, read_text, taking_apart

    if is_file_ref(ref):
        raw = read_text(Path(ref).expanduser(), "--feed")  # the one reader: one line
        data = load_json(raw, f"--feed {ref}")
        if isinstance(data, dict) and data.get("kind") == "doctor":
            with taking_apart(f"--feed {ref}"):
                return need_from_diagnosis(data, ref)
        return need_from_run(load_run(raw, origin=ref, strict=True), _task_rate(task))
    from gpuaudit.store import Store

    with Store(db, read_only=True) as store:
        run = store.get(ref)
    return need_from_run(run, _task_rate(task))


def _own_feed(run: "Run", task: "Task") -> "FeedNeed | None":
    """The need a --run/--from-run run measured itself (bench train's data loading)."""
    from gpuaudit.cost.recommend.feed import need_from_run

    if not any(m.suite == "train" and m.name == "data/jpeg/best" and m.value
               for m in run.measurements):
        return None
    try:
        return need_from_run(run, _task_rate(task))
    except BadInputError:
        return None


def load_allreduce(ref: str, db: str | None) -> "MeasuredAllReduce":
    """--allreduce-run: a stored fleet run's all-reduce across nodes (or a fleet run's or a
    run's JSON file), with its GPU from the audit of one of its nodes (or the GPU model the
    fleet expected)."""
    from gpuaudit.cost.recommend.measured import allreduce_across_nodes
    from gpuaudit.fleet.records import FleetRun
    from gpuaudit.model import load_run
    from gpuaudit.store import Store

    def of_run(run: "Run") -> "MeasuredAllReduce":
        gpu = run.machine.gpus[0] if run.machine and run.machine.gpus else None
        return allreduce_across_nodes(f"run {run.id}", run.measurements,
                                      gpu.name if gpu else None,
                                      gpu.pci_device_id if gpu else None)

    from gpuaudit.cli.report import is_file_ref
    from gpuaudit.reading import load_json, read_text

    if is_file_ref(ref):
        raw = read_text(Path(ref).expanduser(), "--allreduce-run")  # the one reader
        data = load_json(raw, f"--allreduce-run {ref}")
        if not (isinstance(data, dict) and data.get("kind") == "fleet-run"):
            return of_run(load_run(raw, origin=ref, strict=True))
        document: str | None = raw
    else:
        with Store(db, read_only=True) as store:
            document = store.fleet_run_document(ref)
            if document is None:
                return of_run(store.get(ref))
    try:
        fleet = FleetRun.model_validate_json(document)
    except ValueError as exc:
        first = str(exc).splitlines()[0]
        raise BadInputError(f"--allreduce-run {ref}: not a fleet run ({first})") from None
    gpu_name, pci = None, None
    saved = [n.run_id for n in fleet.nodes if n.run_id is not None and n.saved]
    if saved:
        try:
            with Store(db, read_only=True) as store:
                for run_id in saved:
                    audit = store.get(run_id)
                    if audit.machine and audit.machine.gpus:
                        gpu_name = audit.machine.gpus[0].name
                        pci = audit.machine.gpus[0].pci_device_id
                        break
        except BadInputError:  # the node audits are in another store: the expectation's
            pass
    if gpu_name is None and fleet.expectation is not None:
        gpu_name = fleet.expectation.gpu_model
    return allreduce_across_nodes(f"fleet run {fleet.id}", fleet.collectives, gpu_name, pci,
                                  fleet.collectives_skipped)


@recommend_app.callback(invoke_without_command=True)
def recommend(
    ctx: typer.Context,
    run: Annotated[str | None, typer.Option(
        "--run", "--from-run", metavar="RUN",
        help="A run (id, prefix or JSON file): with an op profile (bench train --op-profile) "
             "its step is predicted on each offer's GPUs (gpuaudit predict); otherwise offers "
             "are ranked by --metric, for --hours on the benchmarked machine.")] = None,
    hours: Annotated[float | None, common.number(
        "--hours", help="With --run: how long the workload runs on the benchmarked machine.",
        lo=0, lo_open=True, hi=1e6)] = None,
    metric: Annotated[str | None, typer.Option(
        "--metric", help="With --run: the measurement that stands for the workload's speed "
                         "(suite/name) [default: matmul/bf16; the op profile when the run "
                         "has one]")] = None,
    workload: Annotated[str | None, typer.Option(
        "--workload", metavar="MODEL/MODE", help="With --run: which op profile.")] = None,
    rates: Annotated[str | None, typer.Option(
        "--rates", metavar="RUN", help="With --run and an op profile: the bench run with the "
                                       "machine's rates (as gpuaudit predict).")] = None,
    samples: Annotated[float | None, common.count(
        "--samples", help="With --run: the job's size in samples (1M, 2e9).", hi=1e18)
    ] = None,
    tokens: Annotated[float | None, common.count(
        "--tokens", help="With --run: the job's size in tokens (10B).", hi=1e18)] = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    allreduce_run: AllReduceOpt = None,
    feed: FeedOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Which instance to rent for a task. Subcommands: train, finetune, serve; or --run."""
    for option in ("workload", "rates", "samples", "tokens", "metric", "hours"):
        common.needs(ctx, option, on="--run", present=run is not None)
    if ctx.invoked_subcommand is not None:
        if run is not None or allreduce_run is not None or feed is not None:
            raise BadInputError("--run, --allreduce-run and --feed go without a subcommand "
                                "(give --allreduce-run or --feed after it)")
        return
    if run is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    if metric is None and _has_op_profile(run, workload, db):
        cons = _constraints(deadline, budget, currency, sort)
        task, stored_run = _predicted_task(run, workload, rates, hours, samples, tokens,
                                           catalog, db)
        _run(task, cons, catalog=catalog, top=top, mfu=0.4, json_=json_,
             allreduce=allreduce_run, db=db, feed=feed,
             feed_need=None if feed is not None else _own_feed(stored_run, task))
        return
    from gpuaudit.cli.predict import load_run_arg
    from gpuaudit.cost.recommend import task_from_run

    if hours is None:
        raise BadInputError("--run needs --hours: how long the workload runs on the "
                            "benchmarked machine")
    cons = _constraints(deadline, budget, currency, sort)
    stored = load_run_arg(run, db)
    task = task_from_run(stored, hours, metric or "matmul/bf16")
    _run(task, cons, catalog=catalog, top=top, mfu=0.4, json_=json_, allreduce=allreduce_run,
         db=db, feed=feed, feed_need=None if feed is not None else _own_feed(stored, task))


def _has_op_profile(run: str, workload: str | None, db: str | None) -> bool:
    """Whether the run holds an op profile (`bench train --op-profile`): then `--run`
    predicts the recorded step on each offer's GPUs."""
    from gpuaudit.cli.predict import load_run_arg

    if workload is not None:
        return True
    stored = load_run_arg(run, db)
    return any(m.name.endswith("/op/step") for m in stored.measurements)


def _predicted_task(from_run: str, workload: str | None, rates: str | None,
                    hours: float | None, samples: float | None, tokens: float | None,
                    catalog: Path | None, db: str | None) -> "tuple[Task, Run]":
    """The recorded step predicted on every (GPU model, count) of the catalog's offers."""
    from gpuaudit.cli.predict import load_run_arg, resolve_rates
    from gpuaudit.cost.recommend import PredictedTask
    from gpuaudit.predict import load_profile
    from gpuaudit.predict.offers import predicted_rates
    from gpuaudit.reading import taking_apart
    from gpuaudit.specs.catalog import load_catalog

    given = [name for name, v in (("--hours", hours), ("--samples", samples),
                                  ("--tokens", tokens)) if v is not None]
    if len(given) != 1:
        raise BadInputError("--run with an op profile needs one of --hours (on the recorded GPU), "
                            "--samples or --tokens: the job's size")
    specs = load_catalog()
    stored = load_run_arg(from_run, db)
    with taking_apart(f"run {stored.id}'s op profile"):
        profile = load_profile(stored, workload)
    if profile.device == "cpu":  # its times would price every offer: a CPU's, not a GPU's
        raise BadInputError(f"run {stored.id}: {profile.workload} was recorded on a CPU, so no "
                            "GPU offer can be priced by its times; record it on a GPU "
                            "(`gpuaudit bench train --op-profile` there)")
    with taking_apart(f"the rates of run {rates or stored.id}"):
        machine = resolve_rates(stored, rates, db, specs, (profile.precision,))
    rate = profile.samples_per_s
    if hours is not None:
        job_hours = hours
    elif samples is not None:
        job_hours = samples / rate / 3600
    else:
        assert tokens is not None
        if not profile.tokens_per_sample:
            raise BadInputError(f"--tokens: {profile.model} is not a language model; give "
                                "--samples")
        job_hours = tokens / profile.tokens_per_sample / rate / 3600
    offers = load_offers(catalog)
    predicted = predicted_rates(profile, machine, specs,
                                {(o.gpu_model, o.gpu_count) for o in offers})
    backward = profile.phases_ms.get("backward", 0.0)
    return PredictedTask(run_id=stored.id, gpu_model=machine.roofs.gpu.id, gpus=1,
                         rate_per_gpu=rate, unit="samples/s",
                         metric=f"{profile.workload} step", hours=job_hours,
                         scale_by="prediction", predicted=predicted,
                         grad_buckets=tuple(profile.buckets), samples_per_step=profile.batch,
                         backward_share=min(1.0, backward / profile.step_ms)
                         if backward > 0 and profile.step_ms > 0 else 2 / 3), stored


def train(
    params: ParamsOpt,
    tokens: Annotated[float, common.count("--tokens", help="Training tokens: 1T, 300B.",
                                          hi=1e16)],
    precision: PrecisionOpt = "bf16",
    optimizer: Annotated[str, typer.Option(help="adam, adam8bit, sgd.")] = "adam",
    seq_len: SeqOpt = "2048",
    micro_batch: MicroOpt = "1",
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    mfu: MfuOpt = "0.40",
    allow_pooling: PoolOpt = False,
    allreduce_run: AllReduceOpt = None,
    feed: FeedOpt = None,
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Pre-train a model of N parameters on T tokens (6·N·T FLOPs)."""
    task = _tasks().TrainTask(params=params, tokens=tokens, precision=precision,
                              optimizer=optimizer, seq_len=seq_len, micro_batch=micro_batch,
                              layers=layers, hidden=hidden)
    _run(task, _constraints(deadline, budget, currency, sort), catalog=catalog, top=top,
         mfu=mfu, json_=json_, allow_pooling=allow_pooling, allreduce=allreduce_run, db=db,
         feed=feed)


def finetune(
    params: ParamsOpt,
    method: Annotated[str, common.choice("--method", choices=("lora", "qlora", "full"),
                                         help="Adapters (LoRA, QLoRA) or all weights.")
                      ] = "lora",
    tokens: Annotated[float, common.count("--tokens", help="Fine-tuning tokens.", hi=1e16)
                      ] = "100M",
    lora_rank: Annotated[int, common.integer("--lora-rank", help="LoRA adapter rank.",
                                             hi=65536)] = "16",
    precision: PrecisionOpt = "bf16",
    optimizer: Annotated[str, typer.Option(help="adam, adam8bit, sgd.")] = "adam",
    seq_len: SeqOpt = "2048",
    micro_batch: MicroOpt = "1",
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    mfu: MfuOpt = "0.40",
    allow_pooling: PoolOpt = False,
    allreduce_run: AllReduceOpt = None,
    feed: FeedOpt = None,
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Fine-tune: LoRA/QLoRA adapters (4·N·T FLOPs) or all weights (6·N·T)."""
    task = _tasks().FinetuneTask(params=params, tokens=tokens, method=method,
                                 lora_rank=lora_rank, precision=precision, optimizer=optimizer,
                                 seq_len=seq_len, micro_batch=micro_batch, layers=layers,
                                 hidden=hidden)
    _run(task, _constraints(deadline, budget, currency, sort), catalog=catalog, top=top,
         mfu=mfu, json_=json_, allow_pooling=allow_pooling, allreduce=allreduce_run, db=db,
         feed=feed)


def serve(
    params: ParamsOpt,
    qps: Annotated[float, common.number("--qps", help="Requests per second to sustain.",
                                        lo=0, lo_open=True, hi=1e9)],
    latency_ms: Annotated[float, common.number(
        "--tpot-ms", "--latency-ms", help="Time per output token bound (TPOT: between "
        "tokens of one response), ms.", lo=0, lo_open=True, hi=1e7)],
    ttft_ms: Annotated[float | None, common.number(
        "--ttft-ms", help="Time to first token bound (TTFT), ms [default: none].", lo=0,
        lo_open=True, hi=1e8)] = None,
    prompt_tokens: Annotated[int | None, common.integer(
        "--prompt-tokens", help="Prompt tokens per request [default: --context minus "
        "--output-tokens].", hi=100_000_000)] = None,
    output_tokens: Annotated[int, common.integer(
        "--output-tokens", help="Tokens generated per request.", hi=100_000_000)] = "256",
    context: Annotated[int, common.integer(
        "--context", help="Prompt + output tokens per request, when --prompt-tokens is not "
        "given.", hi=100_000_000)] = "4096",
    dtype: Annotated[str, typer.Option("--dtype", help="Weights: fp32, bf16, fp16, fp8, "
                                                       "int8.")] = "bf16",
    hours: Annotated[float, common.number("--hours", help="Serving hours to cost.", lo=0,
                                          lo_open=True, hi=1e6)] = "1",
    kv_heads: Annotated[int | None, common.integer(
        "--kv-heads", help="KV heads (GQA) [default: as many as the heads].", hi=100_000)
    ] = None,
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    mfu: MfuOpt = "0.40",
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = "10",
    catalog: common.CatalogOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Serve Q requests/s within TPOT and TTFT bounds: prefill and decode with continuous
    batching, KV cache in memory."""
    task = _tasks().ServeTask(params=params, qps=qps, latency_ms=latency_ms, context=context,
                              output_tokens=output_tokens, dtype=dtype.lower(), hours=hours,
                              layers=layers, hidden=hidden, kv_heads=kv_heads,
                              prompt_tokens=prompt_tokens, ttft_ms=ttft_ms)
    _run(task, _constraints(None, budget, currency, sort), catalog=catalog, top=top,
         mfu=mfu, json_=json_)
