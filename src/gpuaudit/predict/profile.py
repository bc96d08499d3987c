"""A workload's step as a stored run recorded it (`bench train --op-profile`): per operator
class its device time, FLOPs, bytes, matmul shapes and kernel grids; the timed step; the
phases; the gradient buckets. Read back from the run's measurements, with the missing ones
named."""

from __future__ import annotations

import json
from dataclasses import dataclass, field, replace
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.measurement import Measurement
from gpuaudit.model.run import Run

OP = "/op/"
OPTIMIZER_RUN = "gpuaudit bench train --op-profile"


@dataclass(frozen=True)
class Gemm:
    m: int
    n: int
    k: int
    batch: int
    dtype_bytes: int
    count: float
    flops: float

    @property
    def bytes(self) -> float:
        """Operands read and result written once, per call × calls."""
        b = self.batch * self.dtype_bytes
        return self.count * b * (self.m * self.k + self.k * self.n + self.m * self.n)


@dataclass(frozen=True)
class KernelGrid:
    name: str
    blocks: int
    per_sm: float
    count: float  # per step
    us: float  # per step


@dataclass(frozen=True)
class Timed:
    """A matmul shape or an attention shape timed alone on the recorded GPU."""

    kind: str  # "gemm" or "attention"
    shape: tuple[Any, ...]  # (m, n, k, batch) or (B, H, T, S, Q, causal)
    precision: str
    tflops: float


@dataclass(frozen=True)
class NormTimed:
    """A batch-norm layer's shape timed alone (forward + backward, training) in a precision."""

    shape: tuple[int, ...]
    memory_format: str
    precision: str
    dtype: str
    count: float  # layers of this shape per step
    ms: float


@dataclass(frozen=True)
class BatchNorm:
    """Batch norm within the elementwise class (`workloads.norms`): its kernels' own time per
    step (0 where none was recognized), its shapes timed alone, and the share of its
    traffic those shapes hold."""

    ms: float
    timed: tuple[NormTimed, ...] = ()
    timed_share: float = 0.0


@dataclass(frozen=True)
class ConvTimed:
    """A convolution layer timed alone (forward + backward) in a precision: `layer` is its
    input and weight shapes, stride, padding, dilation, groups, bias, input gradient and
    memory format (`workloads.convs.Layer`)."""

    layer: tuple[Any, ...]
    precision: str
    count: float  # layers like it per step
    ms: float


@dataclass(frozen=True)
class ConvTiming:
    """The conv class's layers timed alone (`workloads.convs`), and the share of its forward
    FLOPs they hold."""

    timed: tuple[ConvTimed, ...]
    flops_share: float


@dataclass(frozen=True)
class OpWork:
    """One operator class of a step."""

    cls: str
    ms: float
    flops: float
    bytes: float
    ops: int = 0
    alt_precision: str | None = None
    alt_bytes: float | None = None
    op_bytes: dict[str, float] = field(default_factory=dict)
    shapes: tuple[Gemm, ...] = ()
    kernels: tuple[KernelGrid, ...] = ()
    timed: tuple[Timed, ...] = ()
    # attention forward calls: ((B, H, T, S, Q, causal), count, forward FLOPs)
    attention: tuple[tuple[tuple[Any, ...], float, float], ...] = ()
    norm: BatchNorm | None = None  # the elementwise class's batch norm, where recorded
    convs: ConvTiming | None = None  # the conv class's layers timed alone, where recorded

    def with_(self, **changes: Any) -> OpWork:
        return replace(self, **changes)


@dataclass(frozen=True)
class StepProfile:
    run_id: str
    workload: str  # "<model>/<mode>"
    model: str
    mode: str
    precision: str
    compiled: bool
    batch: int
    tokens_per_sample: int | None
    step_ms: float  # timed p50
    busy_ms: float
    idle_ms: float
    phases_ms: dict[str, float]
    grad_bytes: int
    param_count: int
    ops_per_step: int
    buckets: tuple[tuple[int, float], ...]
    classes: dict[str, OpWork]
    model_params: dict[str, Any]
    device: str
    kernel_source: str
    peak_memory_gb: float | None = None

    @property
    def samples_per_s(self) -> float:
        return self.batch / (self.step_ms / 1e3)


def workloads_in(run: Run) -> list[str]:
    """The `<model>/<mode>` whose op profile `run` holds, in run order."""
    out = []
    for m in run.measurements:
        if m.name.endswith(f"{OP.rstrip('/')}/step") and m.value is not None:
            out.append(m.name[: -len("/op/step")])
    return out


def choose(run: Run, workload: str | None) -> str:
    found = workloads_in(run)
    if workload is not None:
        if workload not in found:
            have = ", ".join(found) or "none"
            raise BadInputError(f"run {run.id} has no op profile for {workload!r} (it has: "
                                f"{have}); record one with `{OPTIMIZER_RUN} --model M "
                                "--precision P`")
        return workload
    if not found:
        raise BadInputError(f"run {run.id} has no op profile: missing <model>/<mode>/op/step "
                            f"and op/<class> measurements; record them with `{OPTIMIZER_RUN}`")
    if len(set(found)) > 1:
        raise BadInputError(f"run {run.id} has op profiles for {', '.join(found)}: choose "
                            "one with --workload MODEL/MODE")
    return found[0]


def _gemms(rows: list[list[Any]], fields: list[str]) -> tuple[Gemm, ...]:
    idx = {f: i for i, f in enumerate(fields)}
    if "m" not in idx:
        return ()
    return tuple(Gemm(m=int(r[idx["m"]]), n=int(r[idx["n"]]), k=int(r[idx["k"]]),
                      batch=int(r[idx["batch"]]), dtype_bytes=int(r[idx["dtype_bytes"]]),
                      count=float(r[idx["count"]]), flops=float(r[idx["flops"]]))
                 for r in rows)


def _kernels(rows: list[list[Any]], fields: list[str]) -> tuple[KernelGrid, ...]:
    idx = {f: i for i, f in enumerate(fields)}
    return tuple(KernelGrid(name=str(r[idx["name"]]), blocks=int(r[idx["blocks"]]),
                            per_sm=float(r[idx["blocks_per_sm"]]),
                            count=float(r[idx["count_per_step"]]),
                            us=float(r[idx["us_per_step"]])) for r in rows)


def _timed(rows: list[list[Any]]) -> tuple[Timed, ...]:
    out = []
    for r in rows:
        kind = str(r[0])
        shape = tuple(int(x) for x in r[1:5]) if kind == "gemm" else \
            (*(int(x) for x in r[1:6]), bool(r[6]))
        out.append(Timed(kind, shape, str(r[7]), float(r[8])))
    return tuple(out)


def _attention(rows: list[list[Any]], fields: list[str]
               ) -> tuple[tuple[tuple[Any, ...], float, float], ...]:
    if "B" not in fields:
        return ()
    return tuple(((*(int(x) for x in r[:5]), bool(r[5])), float(r[6]), float(r[7]))
                 for r in rows)


def _norm(entry: object) -> BatchNorm | None:
    if not isinstance(entry, dict):
        return None
    idx = {f: i for i, f in enumerate(entry.get("timed_fields", []))}
    timed = ()
    if {"shape", "memory_format", "precision", "dtype", "count", "ms"} <= set(idx):
        timed = tuple(NormTimed(shape=tuple(int(x) for x in r[idx["shape"]]),
                                memory_format=str(r[idx["memory_format"]]),
                                precision=str(r[idx["precision"]]),
                                dtype=str(r[idx["dtype"]]), count=float(r[idx["count"]]),
                                ms=float(r[idx["ms"]]))
                      for r in entry.get("timed", []))
    return BatchNorm(ms=float(entry.get("us_per_step") or 0.0) / 1e3, timed=timed,
                     timed_share=float(entry.get("timed_traffic_share") or 0.0))


def _convs(entry: object) -> ConvTiming | None:
    if not isinstance(entry, dict):
        return None
    idx = {f: i for i, f in enumerate(entry.get("timed_fields", []))}
    layer = ("input", "weight", "stride", "padding", "dilation", "groups", "bias",
             "input_grad", "memory_format")
    if not {*layer, "precision", "count", "ms"} <= set(idx):
        return None

    def key(r: list[Any]) -> tuple[Any, ...]:
        return tuple(tuple(v) if isinstance(v, list) else v for v in (r[idx[f]] for f in layer))

    timed = tuple(ConvTimed(layer=key(r), precision=str(r[idx["precision"]]),
                            count=float(r[idx["count"]]), ms=float(r[idx["ms"]]))
                  for r in entry.get("timed", []))
    return ConvTiming(timed=timed, flops_share=float(entry.get("timed_flops_share") or 0.0))


def op_work(m: Measurement) -> OpWork:
    p = m.params
    detail: dict[str, Any] = {}
    raw = p.get("detail")
    if isinstance(raw, str) and raw:
        try:
            detail = json.loads(raw)
        except json.JSONDecodeError:
            raise BadInputError(f"{m.name}: its detail is not JSON") from None
    alt = p.get("alt_bytes_per_step")
    return OpWork(
        cls=str(p.get("op_class") or m.name.rsplit("/", 1)[1]), ms=float(m.value or 0.0),
        flops=float(p.get("flops_per_step") or 0), bytes=float(p.get("bytes_per_step") or 0),
        ops=int(p.get("ops_per_step") or 0),  # type: ignore[arg-type]
        alt_precision=str(p["alt_precision"]) if p.get("alt_precision") else None,
        alt_bytes=float(alt) if isinstance(alt, int | float) else None,
        op_bytes={str(r[0]): float(r[1]) for r in detail.get("ops", [])},
        shapes=_gemms(detail.get("shapes", []), detail.get("shape_fields", [])),
        kernels=_kernels(detail.get("kernels", []), detail.get("kernel_fields", [])),
        timed=_timed(detail.get("timed", [])),
        attention=_attention(detail.get("shapes", []), detail.get("shape_fields", [])),
        norm=_norm(detail.get("batch_norm")), convs=_convs(detail.get("timed_convs")))


def _buckets(text: object) -> tuple[tuple[int, float], ...]:
    if not isinstance(text, str) or not text:
        return ()
    out = []
    for part in text.split(";"):
        size, _, frac = part.partition("@")
        out.append((int(size), float(frac or 1.0)))
    return tuple(out)


def load_profile(run: Run, workload: str | None = None) -> StepProfile:
    """The step profile of `workload` (or the run's only one); bad input naming what is
    missing when the run cannot give it."""
    name = choose(run, workload)
    by_name = {m.name: m for m in run.measurements if m.name.startswith(name + "/")}
    missing = [f"{name}/{fig}" for fig in ("step_time", "throughput", "op/step")
               if by_name.get(f"{name}/{fig}") is None or by_name[f"{name}/{fig}"].value
               is None]
    classes = {w.cls: w for m in by_name.values() if OP in m.name and not
               m.name.endswith("/op/step") and m.value is not None for w in [op_work(m)]}
    if not classes:
        missing.append(f"{name}/op/<class> (gemm, elementwise, …)")
    if missing:
        raise BadInputError(f"run {run.id} lacks what a prediction needs: "
                            f"{', '.join(missing)}; record them with `{OPTIMIZER_RUN}`")
    step, timed = by_name[f"{name}/op/step"], by_name[f"{name}/step_time"]
    p = step.params
    tokens = by_name.get(f"{name}/tokens")
    batch = int(p.get("batch") or 1)  # type: ignore[arg-type]
    tps = None
    if tokens is not None and tokens.params.get("tokens_per_step"):
        tps = int(tokens.params["tokens_per_step"]) // batch  # type: ignore[arg-type]
    peak = by_name.get(f"{name}/peak_memory")
    model_params = {k: v for k, v in p.items() if k in
                    ("layers", "heads", "dim", "vocab", "seq_len", "matmul_params",
                     "attention", "image_size", "width", "implementation", "channels_last")}
    step_ms = float(timed.value)  # type: ignore[arg-type]
    busy = float(p.get("busy_ms") or 0.0)  # type: ignore[arg-type]
    return StepProfile(
        run_id=run.id, workload=name, model=str(p.get("model") or name.split("/")[0]),
        mode=str(p.get("mode") or name.split("/", 1)[1]),
        precision=str(p.get("precision") or "fp32"), compiled=bool(p.get("compile")),
        batch=batch, tokens_per_sample=tps, step_ms=step_ms, busy_ms=busy,
        idle_ms=max(0.0, step_ms - busy),
        phases_ms={k: float(p.get(f"{k}_ms") or 0.0)  # type: ignore[arg-type]
                   for k in ("forward", "backward", "optimizer")},
        grad_bytes=int(p.get("grad_bytes") or 0),  # type: ignore[arg-type]
        param_count=int(p.get("param_count") or 0),  # type: ignore[arg-type]
        ops_per_step=int(p.get("ops_per_step") or 0),  # type: ignore[arg-type]
        buckets=_buckets(p.get("ddp_buckets")), classes=classes, model_params=model_params,
        device=str(p.get("device") or "cuda"), kernel_source=str(p.get("kernel_source") or ""),
        peak_memory_gb=float(peak.value) if peak is not None and peak.value else None)
