"""`gpuaudit tune`: the settings that make a training job fast, measured.

`search` holds the pure choices (batch size with a memory margin, accumulation, workers);
`runner` measures trials with torch; `tune()` puts them together into a `TuneResult`.
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model import AccumulationPlan, TrialResult, TuneResult

from .search import SearchConfig, Trial, accumulation, choose_workers, search

__all__ = ["TuneOptions", "check_device", "settings_text", "tune"]


@dataclass(frozen=True)
class TuneOptions:
    device: str = "cuda"
    precision: str | None = None  # of the batch search; None: bf16 where it runs, else fp32
    compare: tuple[str, ...] = ("fp32", "tf32", "bf16")
    search: SearchConfig = field(default_factory=SearchConfig)
    steps: int = 10
    warmup: int = 3
    target_global_batch: int | None = None
    world_size: int = 1
    dataset: str | None = None  # pkg.module:function returning a torch Dataset
    workers: tuple[int, ...] = ()  # loader worker counts to try (default: 0, 1, 2, 4, … cores)
    loader_seconds: float = 3.0


def _record(t: Trial) -> TrialResult:
    return TrialResult(batch=t.batch, precision=t.precision, ok=t.ok, step_s=t.step_s,
                       samples_per_s=t.samples_per_s, peak_memory_bytes=t.peak_memory_bytes,
                       spread=t.spread, reason=t.reason)


_DEVICE = re.compile(r"(cpu|cuda(:\d{1,3})?)")


def check_device(text: str) -> str:
    """--device as torch names the devices tune runs on: cpu, cuda or cuda:N. Checked before
    torch sees it (torch.device("banana") is a RuntimeError)."""
    device = text.strip().lower()
    if not _DEVICE.fullmatch(device):
        raise BadInputError(f"--device {text!r}: expected cpu, cuda or cuda:N (e.g. cuda:1)")
    return device


def default_precision(device: Any) -> str:
    import torch

    if getattr(device, "type", str(device)) == "cuda":
        major, _ = torch.cuda.get_device_capability(device)
        return "bf16" if major >= 8 else "fp16"
    return "fp32"


def tune(model: str, opts: TuneOptions = TuneOptions(),
         progress: Callable[[str], None] = lambda _text: None) -> TuneResult:
    import torch

    from gpuaudit.hw.torch_env import apply_safe_env

    from .runner import Runner
    from .target import load

    apply_safe_env()
    device = torch.device(check_device(opts.device))
    if device.type == "cuda" and not torch.cuda.is_available():
        raise BadInputError("--device cuda: no CUDA device visible to torch (use --device cpu)")
    if device.type == "cuda" and (device.index or 0) >= torch.cuda.device_count():
        raise BadInputError(f"--device {opts.device}: torch sees {torch.cuda.device_count()} "
                            "CUDA device(s), numbered from 0")
    target = load(model, device)
    runner = Runner(target, device, steps=opts.steps, warmup=opts.warmup)
    precision = opts.precision or default_precision(device)
    capacity = runner.capacity_bytes()
    notes: list[str] = []
    if capacity is None:
        notes.append("memory is not measured on the CPU: the margin does not apply")

    def measure(batch: int) -> Trial:
        progress(f"batch {batch}, {precision}")
        return runner.measure(batch, precision)

    def own_failure(t: Trial) -> bool:
        """The smallest batch failing for another reason than memory is the model's own
        failure (a TypeError in forward, a wrong make_batch), not a batch size's."""
        return not t.ok and bool(t.reason) and not t.oom

    choice = search(measure, capacity, opts.search, precision)
    first = choice.trials[0] if choice.trials else None
    if first is not None and first.batch == 1 and own_failure(first):
        # batch norm over (N, C) features cannot train on one sample: start at two
        again = search(measure, capacity, dataclasses.replace(opts.search, start=2),
                       precision)
        if again.trials and again.trials[0].ok:
            notes.append(f"the model does not train at batch 1 ({first.reason}): the search "
                         "started at batch 2")
            choice, first = again, again.trials[0]
    if first is not None and own_failure(first):
        raise BadInputError(f"--model {model}: the model failed at batch {first.batch}: "
                            f"{first.reason}")
    compared: list[Trial] = []
    if choice.chosen is not None:
        for p in opts.compare:
            if p == precision:
                compared.append(choice.chosen)
                continue
            if device.type == "cpu" and p in ("tf32", "fp16"):
                continue  # tensor-core formats
            progress(f"batch {choice.chosen.batch}, {p}")
            compared.append(runner.measure(choice.chosen.batch, p))
    fastest = max((t for t in compared if t.ok), key=lambda t: t.samples_per_s or 0.0,
                  default=None)
    plan = None
    if opts.target_global_batch and choice.chosen is not None:
        a = accumulation(opts.target_global_batch, choice.chosen.batch, opts.world_size)
        plan = AccumulationPlan(target_global_batch=a.target, micro_batch=a.micro_batch,
                                world_size=a.world_size, accumulation_steps=a.steps,
                                global_batch=a.global_batch, note=a.note)
    rates: dict[int, float] = {}
    workers = reason = None
    if opts.dataset and choice.chosen is not None:
        rates = _sweep_loader(opts, choice.chosen.batch, progress)
        needed = (choice.chosen.samples_per_s or 0.0) * opts.world_size
        wc = choose_workers(rates, needed)
        workers, reason = wc.workers, wc.reason
    elif choice.chosen is not None:
        notes.append("no loader workers sweep: give --dataset pkg.module:function")
    notes += runner.leaks
    result = TuneResult(
        model=model, device=str(device), precision=precision, memory_capacity_bytes=capacity,
        memory_limit_bytes=choice.memory_limit_bytes, margin=opts.search.margin,
        trials=tuple(_record(t) for t in choice.trials),
        chosen_batch=choice.chosen.batch if choice.chosen else None, reason=choice.reason,
        precisions=tuple(_record(t) for t in compared),
        fastest_precision=fastest.precision if fastest else None, accumulation=plan,
        loader_rates=rates, loader_workers=workers, loader_reason=reason, notes=tuple(notes))
    return result.model_copy(update={"settings": settings_text(result)})


def _sweep_loader(opts: TuneOptions, batch: int, progress: Callable[[str], None]
                  ) -> dict[int, float]:
    import os

    import torch

    from gpuaudit.workloads.entry import resolve, user_code

    from .runner import loader_rates

    spec = opts.dataset or ""
    make_dataset = resolve(spec, "--dataset")
    with user_code(f"--dataset {spec}"):
        dataset = make_dataset()
    _check_dataset(dataset, spec)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else \
        (os.cpu_count() or 1)
    counts = list(opts.workers) or sorted({0, 1, 2, 4, 8, 16, cores} & set(range(cores + 1)))

    def make(w: int) -> Any:
        progress(f"loader, {w} workers")
        return torch.utils.data.DataLoader(dataset, batch_size=batch, num_workers=w,
                                           shuffle=True, pin_memory=opts.device == "cuda",
                                           persistent_workers=False)

    with user_code(f"--dataset {spec}: reading its samples"):
        return loader_rates(make, counts, opts.loader_seconds)


def _check_dataset(dataset: Any, spec: str) -> None:
    """What --dataset's function returned is a dataset a DataLoader can read, with samples:
    not an int, None or an empty one."""
    import torch

    if isinstance(dataset, torch.utils.data.IterableDataset):
        return
    if not (hasattr(dataset, "__getitem__") and hasattr(dataset, "__len__")):
        raise BadInputError(f"--dataset {spec}: returned {type(dataset).__name__}, not a "
                            "dataset (a torch Dataset: __getitem__ and __len__, or an "
                            "IterableDataset)")
    try:
        size = len(dataset)
    except Exception as exc:
        raise BadInputError(f"--dataset {spec}: len() of what it returned failed: "
                            f"{type(exc).__name__}") from None
    if size < 1:
        raise BadInputError(f"--dataset {spec}: the dataset is empty")


_AMP = {"bf16": "torch.bfloat16", "fp16": "torch.float16"}


def settings_text(r: TuneResult) -> str:
    """The lines to paste into the training script."""
    if r.chosen_batch is None:
        return ""
    p = r.fastest_precision or r.precision
    lines = [f"# gpuaudit tune: {r.model} on {r.device}"]
    micro = r.accumulation.micro_batch if r.accumulation else r.chosen_batch
    lines.append(f"BATCH_SIZE = {micro}  # per GPU and micro-batch")
    if r.accumulation:
        a = r.accumulation
        lines.append(f"ACCUMULATION_STEPS = {a.accumulation_steps}  # × {a.world_size} GPU(s) "
                     f"→ {a.global_batch} samples per optimizer step")
    if p == "tf32":
        lines.append('torch.set_float32_matmul_precision("high")  # TF32 tensor cores')
    elif p in _AMP:
        lines.append(f"# wrap forward and loss: with torch.autocast('{r.device.split(':')[0]}'"
                     f", dtype={_AMP[p]}): ...")
        if p == "fp16":
            lines.append("scaler = torch.amp.GradScaler()  # fp16 needs loss scaling")
    if r.loader_workers is not None:
        pin = ", pin_memory=True" if r.device.startswith("cuda") else ""
        lines.append(f"loader = DataLoader(dataset, batch_size=BATCH_SIZE, "
                     f"num_workers={r.loader_workers}{pin}, "
                     f"persistent_workers={r.loader_workers > 0})")
    return "\n".join(lines)
