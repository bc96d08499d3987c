"""`gpuaudit recommend`: which instance to rent for a task, ranked by estimated cost or time.

    gpuaudit recommend train --params 7B --tokens 1T [--deadline 14d] [--budget-usd 50000]
    gpuaudit recommend finetune --params 70B --method lora
    gpuaudit recommend serve --params 70B --qps 20 --latency-ms 200 --context 4096
    gpuaudit recommend --run RUN_ID --hours 12
"""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from gpuaudit.errors import BadInputError, GpuauditError

if TYPE_CHECKING:
    from gpuaudit.cost.recommend import Constraints, Task
    from gpuaudit.model.cost import Offer

recommend_app = typer.Typer(
    help="Which instance to rent for a task: train, fine-tune, serve, or a benchmarked "
         "workload (--run). Estimates, with their basis and reasons.",
    no_args_is_help=False, add_completion=False, pretty_exceptions_enable=False,
    context_settings={"help_option_names": ["-h", "--help"]})

JsonOpt = Annotated[bool, typer.Option("--json", help="Print JSON on stdout.")]
TopOpt = Annotated[int, typer.Option("--top", help="How many offers to show.")]
DeadlineOpt = Annotated[str | None, typer.Option(
    "--deadline", help="Finish within this long: 36h, 14d, 2w (train, fine-tune, --run).")]
BudgetOpt = Annotated[float | None, typer.Option(
    "--budget-usd", "--budget", help="Spend at most this much, in --currency.")]
CurrencyOpt = Annotated[str, typer.Option(
    "--currency", help="Rank offers priced in this currency (no exchange rates).")]
SortOpt = Annotated[str, typer.Option("--sort", help="cost or time.")]
CatalogOpt = Annotated[Path | None, typer.Option(
    "--catalog", help="A price catalog file [default: the shipped one].", dir_okay=False)]
MfuOpt = Annotated[float, typer.Option("--mfu", help="Model FLOPs utilization assumed.")]
PrecisionOpt = Annotated[str, typer.Option("--precision", help="fp32, tf32, bf16, fp16, fp8.")]
LayersOpt = Annotated[int | None, typer.Option(
    "--layers", help="Transformer layers [default: derived from --params].")]
HiddenOpt = Annotated[int | None, typer.Option(
    "--hidden", help="Hidden size [default: derived from --params].")]
SeqOpt = Annotated[int, typer.Option("--seq-len", help="Training sequence length.")]
MicroOpt = Annotated[int, typer.Option("--micro-batch", help="Sequences per GPU per step.")]
DbOpt = Annotated[str | None, typer.Option(
    "--db", envvar="GPUAUDIT_DB", show_envvar=True, help="Store URL (for --run).")]


def load_offers(path: Path | None) -> list[Offer]:
    """The catalog's offers (a seam: tests replace it)."""
    from gpuaudit.cost.catalog import load_catalog  # lands with the catalog work

    return list(load_catalog(path).offers)


@contextmanager
def _errors() -> Iterator[None]:
    """Our errors as one line and their exit code, here too (tests run this app alone)."""
    try:
        yield
    except GpuauditError as exc:
        sys.stderr.write(f"gpuaudit: error: {exc}\n")
        raise typer.Exit(exc.exit_code) from None


def _constraints(deadline: str | None, budget: float | None, currency: str, sort: str
                 ) -> Constraints:
    from gpuaudit.cost.recommend import Constraints, parse_hours

    if budget is not None and not budget > 0:
        raise BadInputError(f"--budget-usd {budget:g}: must be more than zero")
    if sort not in ("cost", "time"):
        raise BadInputError(f"--sort {sort!r}: expected cost or time")
    cur = currency.strip().upper()
    if len(cur) != 3 or not cur.isalpha():
        raise BadInputError(f"--currency {currency!r}: expected a 3-letter code like USD")
    return Constraints(deadline_hours=None if deadline is None else
                       parse_hours(deadline, "--deadline"),
                       budget=budget, currency=cur, sort=sort)  # type: ignore[arg-type]


def _run(task: Task, cons: Constraints, *, catalog: Path | None, top: int, mfu: float,
         json_: bool) -> None:
    from rich.console import Console

    from gpuaudit.cost.recommend import recommend
    from gpuaudit.model.recommendation import Assumptions
    from gpuaudit.report.recommend_view import recommend_view

    if not 0 < mfu <= 1:
        raise BadInputError(f"--mfu {mfu:g}: expected a fraction in (0, 1]")
    if top < 1:
        raise BadInputError(f"--top {top}: must be at least 1")
    result = recommend(task, load_offers(catalog), constraints=cons,
                       assumptions=Assumptions(mfu=mfu), top=top)
    if json_:
        sys.stdout.write(json.dumps(result.model_dump(mode="json"), indent=2) + "\n")
    else:
        Console(highlight=False).print(recommend_view(result))


def _quantity(text: str, option: str) -> float:
    from gpuaudit.cost.recommend import parse_quantity

    return parse_quantity(text, option)


@recommend_app.callback(invoke_without_command=True)
def recommend(
    ctx: typer.Context,
    run: Annotated[str | None, typer.Option(
        "--run", help="A stored run id: rank offers for the workload it benchmarked.")] = None,
    hours: Annotated[float | None, typer.Option(
        "--hours", help="With --run: how long the workload runs on the benchmarked machine.")
    ] = None,
    metric: Annotated[str, typer.Option(
        "--metric", help="With --run: the measurement that stands for the workload's speed "
                         "(suite/name).")] = "matmul/bf16",
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = 10,
    catalog: CatalogOpt = None,
    json_: JsonOpt = False,
    db: DbOpt = None,
) -> None:
    """Which instance to rent for a task. Subcommands: train, finetune, serve; or --run."""
    if ctx.invoked_subcommand is not None:
        if run is not None:
            with _errors():
                raise BadInputError("--run goes without a subcommand")
        return
    if run is None:
        typer.echo(ctx.get_help())
        raise typer.Exit(0)
    with _errors():
        from gpuaudit.cost.recommend import task_from_run
        from gpuaudit.store import Store

        if hours is None or not hours > 0:
            raise BadInputError("--run needs --hours, more than zero: how long the workload "
                                "runs on the benchmarked machine")
        cons = _constraints(deadline, budget, currency, sort)
        with Store(db, read_only=True) as store:
            stored = store.get(run)
        task = task_from_run(stored, hours, metric)
        _run(task, cons, catalog=catalog, top=top, mfu=0.4, json_=json_)


@recommend_app.command()
def train(
    params: Annotated[str, typer.Option("--params", help="Parameters: 7B, 1.3B, 125M.")],
    tokens: Annotated[str, typer.Option("--tokens", help="Training tokens: 1T, 300B.")],
    precision: PrecisionOpt = "bf16",
    optimizer: Annotated[str, typer.Option(help="adam, adam8bit, sgd.")] = "adam",
    seq_len: SeqOpt = 2048,
    micro_batch: MicroOpt = 1,
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    mfu: MfuOpt = 0.40,
    top: TopOpt = 10,
    catalog: CatalogOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Pre-train a model of N parameters on T tokens (6·N·T FLOPs)."""
    with _errors():
        from gpuaudit.cost.recommend import TrainTask

        task = TrainTask(params=_quantity(params, "--params"),
                         tokens=_quantity(tokens, "--tokens"), precision=precision,
                         optimizer=optimizer, seq_len=seq_len, micro_batch=micro_batch,
                         layers=layers, hidden=hidden)
        _run(task, _constraints(deadline, budget, currency, sort), catalog=catalog, top=top,
             mfu=mfu, json_=json_)


@recommend_app.command()
def finetune(
    params: Annotated[str, typer.Option("--params", help="Parameters: 7B, 70B.")],
    method: Annotated[str, typer.Option("--method", help="lora, qlora or full.")] = "lora",
    tokens: Annotated[str, typer.Option("--tokens", help="Fine-tuning tokens.")] = "100M",
    lora_rank: Annotated[int, typer.Option("--lora-rank")] = 16,
    precision: PrecisionOpt = "bf16",
    optimizer: Annotated[str, typer.Option(help="adam, adam8bit, sgd.")] = "adam",
    seq_len: SeqOpt = 2048,
    micro_batch: MicroOpt = 1,
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    deadline: DeadlineOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    mfu: MfuOpt = 0.40,
    top: TopOpt = 10,
    catalog: CatalogOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Fine-tune: LoRA/QLoRA adapters (4·N·T FLOPs) or all weights (6·N·T)."""
    with _errors():
        from gpuaudit.cost.recommend import FinetuneTask

        task = FinetuneTask(params=_quantity(params, "--params"),
                            tokens=_quantity(tokens, "--tokens"), method=method.lower(),
                            lora_rank=lora_rank, precision=precision, optimizer=optimizer,
                            seq_len=seq_len, micro_batch=micro_batch, layers=layers,
                            hidden=hidden)
        _run(task, _constraints(deadline, budget, currency, sort), catalog=catalog, top=top,
             mfu=mfu, json_=json_)


@recommend_app.command()
def serve(
    params: Annotated[str, typer.Option("--params", help="Parameters: 7B, 70B.")],
    qps: Annotated[float, typer.Option("--qps", help="Requests per second to sustain.")],
    latency_ms: Annotated[float, typer.Option(
        "--latency-ms", help="Latency SLO per output token (time between tokens), ms.")],
    context: Annotated[int, typer.Option("--context", help="Tokens of KV cache per request "
                                                           "(prompt + output).")] = 4096,
    output_tokens: Annotated[int, typer.Option("--output-tokens",
                                               help="Tokens generated per request.")] = 256,
    dtype: Annotated[str, typer.Option("--dtype", help="Weights: fp32, bf16, fp16, fp8, "
                                                       "int8.")] = "bf16",
    hours: Annotated[float, typer.Option("--hours", help="Serving hours to cost.")] = 1.0,
    kv_heads: Annotated[int | None, typer.Option("--kv-heads", help="KV heads (GQA) "
                                                 "[default: as many as the heads].")] = None,
    layers: LayersOpt = None,
    hidden: HiddenOpt = None,
    budget: BudgetOpt = None,
    currency: CurrencyOpt = "USD",
    sort: SortOpt = "cost",
    top: TopOpt = 10,
    catalog: CatalogOpt = None,
    json_: JsonOpt = False,
) -> None:
    """Serve Q requests/s under a per-token latency SLO (decode-bound estimate)."""
    with _errors():
        from gpuaudit.cost.recommend import ServeTask

        task = ServeTask(params=_quantity(params, "--params"), qps=qps, latency_ms=latency_ms,
                         context=context, output_tokens=output_tokens, dtype=dtype.lower(),
                         hours=hours, layers=layers, hidden=hidden, kv_heads=kv_heads)
        _run(task, _constraints(None, budget, currency, sort), catalog=catalog, top=top,
             mfu=0.40, json_=json_)
