"""Op profiles recorded before `model.OpProfile` (schema 2 runs): the `<model>/<mode>/op/*`
measurements, their class details packed as JSON in a param and their DDP buckets as
"bytes@fraction;…", read into the typed record (`legacy=True`: no unit groups, no units timed
alone, no timeline; the classes as the kernels' names gave them, which `predict.kernels`
re-reads)."""

from __future__ import annotations

import json
from typing import Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.measurement import Measurement
from gpuaudit.model.opprofile import (
    AttentionShape,
    BatchNormRecord,
    ConvLayer,
    ConvTiming,
    ConvTimingRecord,
    DdpBucket,
    GemmShape,
    KernelGrid,
    NormTiming,
    OpClassRecord,
    OpProfile,
    OpTraffic,
    TimedShape,
)
from gpuaudit.model.run import Run

OP = "/op/"
PARAM_KEYS = ("layers", "heads", "dim", "vocab", "seq_len", "matmul_params", "attention",
              "image_size", "width", "implementation", "channels_last")


def workloads(run: Run) -> list[str]:
    """The `<model>/<mode>` whose op profile `run`'s measurements hold, in run order."""
    return [m.name[: -len("/op/step")] for m in run.measurements
            if m.name.endswith("/op/step") and m.value is not None]


def _fields(rows: list[list[Any]], fields: list[str]) -> list[dict[str, Any]]:
    return [dict(zip(fields, r, strict=False)) for r in rows]


def _gemms(rows: list[list[Any]], fields: list[str]) -> tuple[GemmShape, ...]:
    if "m" not in fields:
        return ()
    return tuple(GemmShape(m=int(r["m"]), n=int(r["n"]), k=int(r["k"]), batch=int(r["batch"]),
                           dtype_bytes=int(r["dtype_bytes"]), count=float(r["count"]),
                           flops=float(r["flops"])) for r in _fields(rows, fields))


def _attention(rows: list[list[Any]], fields: list[str]) -> tuple[AttentionShape, ...]:
    if "B" not in fields:
        return ()
    return tuple(AttentionShape(batch=int(r[0]), heads=int(r[1]), q_len=int(r[2]),
                                kv_len=int(r[3]), head_dim=int(r[4]), causal=bool(r[5]),
                                count=float(r[6]), forward_flops=float(r[7])) for r in rows)


def _kernels(rows: list[list[Any]], fields: list[str]) -> tuple[KernelGrid, ...]:
    return tuple(KernelGrid(name=str(r["name"]), blocks=int(r["blocks"]),
                            blocks_per_sm=float(r["blocks_per_sm"]),
                            count_per_step=float(r["count_per_step"]),
                            us_per_step=float(r["us_per_step"]))
                 for r in _fields(rows, fields))


def _timed(rows: list[list[Any]]) -> tuple[TimedShape, ...]:
    out = []
    for r in rows:
        kind = str(r[0])
        shape = tuple(int(x) for x in r[1:5]) if kind == "gemm" else \
            (*(int(x) for x in r[1:6]), bool(r[6]))
        out.append(TimedShape(kind=kind, shape=shape, precision=str(r[7]), tflops=float(r[8])))
    return tuple(out)


def _norm(entry: object) -> BatchNormRecord | None:
    if not isinstance(entry, dict):
        return None
    fields = entry.get("timed_fields", [])
    timed: tuple[NormTiming, ...] = ()
    if {"shape", "memory_format", "precision", "dtype", "count", "ms"} <= set(fields):
        timed = tuple(NormTiming(shape=tuple(int(x) for x in r["shape"]),
                                 memory_format=str(r["memory_format"]),
                                 precision=str(r["precision"]), dtype=str(r["dtype"]),
                                 count=float(r["count"]), ms=float(r["ms"]))
                      for r in _fields(entry.get("timed", []), fields))
    return BatchNormRecord(us_per_step=float(entry.get("us_per_step") or 0.0), timed=timed,
                           timed_traffic_share=float(entry.get("timed_traffic_share") or 0.0))


def _convs(entry: object) -> ConvTimingRecord | None:
    if not isinstance(entry, dict):
        return None
    fields = entry.get("timed_fields", [])
    layer = ("input", "weight", "stride", "padding", "dilation", "groups", "bias",
             "input_grad", "memory_format")
    if not {*layer, "precision", "count", "ms"} <= set(fields):
        return None
    timed = tuple(ConvTiming(
        layer=ConvLayer(input=tuple(r["input"]), weight=tuple(r["weight"]),
                        stride=tuple(r["stride"]), padding=tuple(r["padding"]),
                        dilation=tuple(r["dilation"]), groups=int(r["groups"]),
                        bias=bool(r["bias"]), input_grad=bool(r["input_grad"]),
                        memory_format=str(r["memory_format"])),
        precision=str(r["precision"]), count=float(r["count"]), ms=float(r["ms"]))
        for r in _fields(entry.get("timed", []), fields))
    return ConvTimingRecord(timed=timed,
                            timed_flops_share=float(entry.get("timed_flops_share") or 0.0))


def class_record(m: Measurement) -> OpClassRecord:
    p = m.params
    detail: dict[str, Any] = {}
    raw = p.get("detail")
    if isinstance(raw, str) and raw:
        try:
            detail = json.loads(raw)
        except json.JSONDecodeError:
            raise BadInputError(f"{m.name}: its detail is not JSON") from None
    alt = p.get("alt_bytes_per_step")
    shapes, fields = detail.get("shapes", []), detail.get("shape_fields", [])
    return OpClassRecord(
        op_class=str(p.get("op_class") or m.name.rsplit("/", 1)[1]),
        ms_per_step=float(m.value or 0.0), flops=float(p.get("flops_per_step") or 0),
        bytes=float(p.get("bytes_per_step") or 0),
        ops_per_step=int(p.get("ops_per_step") or 0),  # type: ignore[arg-type]
        kernels_per_step=float(p.get("kernels_per_step") or 0.0),  # type: ignore[arg-type]
        alt_bytes=float(alt) if isinstance(alt, int | float) else None,
        gemm_dtype=str(p["gemm_dtype"]) if p.get("gemm_dtype") else None,
        op_traffic=tuple(OpTraffic(op=str(r[0]), bytes=float(r[1]),
                                   count=float(r[2]) if len(r) > 2 else 0.0)
                         for r in detail.get("ops", [])),
        shapes=_gemms(shapes, fields), attention=_attention(shapes, fields),
        kernels=_kernels(detail.get("kernels", []), detail.get("kernel_fields", [])),
        timed_shapes=_timed(detail.get("timed", [])), batch_norm=_norm(detail.get("batch_norm")),
        conv_timing=_convs(detail.get("timed_convs")))


def _buckets(text: object) -> tuple[DdpBucket, ...]:
    if not isinstance(text, str) or not text:
        return ()
    out = []
    for part in text.split(";"):
        size, _, frac = part.partition("@")
        try:
            out.append(DdpBucket(bytes=int(size), ready_fraction=float(frac or 1.0)))
        except ValueError:
            raise BadInputError(f"ddp_buckets {part!r} is not bytes@fraction") from None
    return tuple(out)


def read(run: Run, name: str, how: str) -> OpProfile:
    """`name`'s op profile from `run`'s measurements; bad input naming what is missing."""
    by_name = {m.name: m for m in run.measurements if m.name.startswith(name + "/")}
    missing = [f"{name}/{fig}" for fig in ("step_time", "throughput", "op/step")
               if by_name.get(f"{name}/{fig}") is None or by_name[f"{name}/{fig}"].value
               is None]
    classes = [class_record(m) for m in by_name.values() if OP in m.name and
               not m.name.endswith("/op/step") and m.value is not None]
    if not classes:
        missing.append(f"{name}/op/<class> (gemm, elementwise, …)")
    if missing:
        raise BadInputError(f"run {run.id} lacks what a prediction needs: "
                            f"{', '.join(missing)}; record them with `{how}`")
    step, timed = by_name[f"{name}/op/step"], by_name[f"{name}/step_time"]
    p = step.params
    tokens = by_name.get(f"{name}/tokens")
    batch = int(p.get("batch") or 1)  # type: ignore[arg-type]
    tps = None
    if tokens is not None and tokens.params.get("tokens_per_step"):
        tps = int(tokens.params["tokens_per_step"]) // batch  # type: ignore[arg-type]
    peak = by_name.get(f"{name}/peak_memory")
    alt = next((str(m.params["alt_precision"]) for m in by_name.values()
                if OP in m.name and m.params.get("alt_precision")), None)
    return OpProfile(
        workload=name, model=str(p.get("model") or name.split("/")[0]),
        mode=str(p.get("mode") or name.split("/", 1)[1]),
        precision=str(p.get("precision") or "fp32"), compiled=bool(p.get("compile")),
        channels_last=bool(p.get("channels_last")), batch=batch, tokens_per_sample=tps,
        device=str(p.get("device") or "cuda"), kernel_source=str(p.get("kernel_source") or ""),
        step_ms=float(timed.value),  # type: ignore[arg-type]
        profiled_steps=int(p.get("profiled_steps") or 1),  # type: ignore[arg-type]
        span_ms=float(step.value or 0.0), busy_ms=float(p.get("busy_ms") or 0.0),  # type: ignore[arg-type]
        forward_ms=float(p.get("forward_ms") or 0.0),  # type: ignore[arg-type]
        backward_ms=float(p.get("backward_ms") or 0.0),  # type: ignore[arg-type]
        optimizer_ms=float(p.get("optimizer_ms") or 0.0),  # type: ignore[arg-type]
        grad_bytes=int(p.get("grad_bytes") or 0),  # type: ignore[arg-type]
        param_count=int(p.get("param_count") or 0),  # type: ignore[arg-type]
        ops_per_step=int(p.get("ops_per_step") or 0),  # type: ignore[arg-type]
        peak_memory_gb=float(peak.value) if peak is not None and peak.value else None,
        buckets=_buckets(p.get("ddp_buckets")), alt_precision=alt, classes=tuple(classes),
        model_params={k: v for k, v in p.items() if k in PARAM_KEYS}, legacy=True)
