"""Terminal tables for the train and infer suites: one row per mode (training), per
(precision, mode, batch) (inference), per GPU count (DDP), per worker count (data loading)."""

from __future__ import annotations

from collections.abc import Sequence

from rich import box
from rich.console import Group, RenderableType
from rich.table import Table
from rich.text import Text

from gpuaudit.model import Measurement

WORKLOAD_SUITES = ("train", "infer")


def _f(value: object, digits: int = 1, unit: str = "") -> str:
    if value is None:
        return ""
    if isinstance(value, float | int) and not isinstance(value, bool):
        text = f"{value:,.{digits}f}"
        return f"{text} {unit}".rstrip()
    return str(value)


def _table(title: str, columns: Sequence[tuple[str, str]]) -> Table:
    """Borderless, one space between columns: the tables fit 80 columns."""
    t = Table(title=title, title_justify="left", header_style="bold", box=box.SIMPLE_HEAD,
              padding=(0, 0), show_edge=False)
    for i, (name, justify) in enumerate(columns):
        t.add_column(name, justify=justify, no_wrap=i < 2)  # type: ignore[arg-type]
    return t


def _rate(x: float | None) -> str:
    return "" if x is None else (f"{x:,.0f}" if x >= 100 else f"{x:.3g}")


def _short(ms: object) -> str:
    """Three significant digits: 65.1, 1.23, 312."""
    if not isinstance(ms, int | float):
        return "?"
    return f"{ms:.3g}" if ms < 1000 else f"{ms:,.0f}"


def _split(name: str) -> list[str]:
    return name.split("/")


def train_table(ms: Sequence[Measurement]) -> Table | None:
    rows: dict[tuple[str, str], dict[str, Measurement]] = {}
    for m in ms:
        parts = _split(m.name)
        if m.suite != "train" or len(parts) != 3 or parts[0] == "data" or parts[1] == "ddp":
            continue
        rows.setdefault((parts[0], parts[1]), {})[parts[2]] = m
    if not rows:
        return None
    t = _table("Training (MFU: model FLOPs / dense datasheet peak; warm-up not timed)", (
        ("model", "left"), ("mode", "left"), ("smpl/s", "right"), ("tok/s", "right"),
        ("step ms 50/90/99", "right"), ("MFU%", "right"), ("×fp32", "right"),
        ("GB", "right"), ("warm", "right")))
    for (model, mode), f in rows.items():
        thr = f.get("throughput")
        if thr is None or thr.value is None:
            continue  # listed under "not measured"
        st = f.get("step_time")
        steps = "/".join(_short(st.params.get(k)) for k in ("p50_ms", "p90_ms", "p99_ms")) \
            if st else ""
        mf = f.get("model_flops")
        mfu = mf.params.get("mfu_pct") if mf else None
        tok, mem, warm = f.get("tokens"), f.get("peak_memory"), f.get("warmup")
        t.add_row(model, mode, _rate(thr.value), _f(tok.value, 0) if tok else "", steps,
                  _f(mfu, 1) if mfu is not None else "",
                  _f(thr.params.get("speedup_vs_fp32"), 2),
                  _f(mem.value, 1) if mem else "", _f(warm.value, 1) if warm else "")
    return t


def flop_lines(ms: Sequence[Measurement]) -> list[Text]:
    out = []
    for m in ms:
        if m.suite == "train" and m.name.endswith("/flop_count") and m.value is not None:
            ref = (f" vs formula {m.spec_value:.4g} ({m.pct_of_spec:.2f} %)"
                   if m.spec_value else "")
            out.append(Text(f"{m.params.get('model')}: FlopCounterMode counts {m.value:.4g} "
                            f"GFLOP per training sample{ref}"))
    return out


def ddp_table(ms: Sequence[Measurement]) -> Table | None:
    rows: dict[tuple[str, str, str], dict[str, Measurement]] = {}
    for m in ms:
        parts = _split(m.name)
        if m.suite == "train" and len(parts) >= 3 and parts[1] == "ddp":
            accum = parts[3] if len(parts) == 5 else "accum1"
            rows.setdefault((parts[0], parts[2], accum), {})[parts[-1]] = m
        elif m.suite == "train" and m.name.endswith("/ddp/scaling"):
            rows.setdefault((parts[0], "", ""), {})["skip"] = m
    if not rows:
        return None
    t = _table("DDP (one process per GPU; weak scaling)", (
        ("model", "left"), ("GPUs", "right"), ("accumulation", "right"),
        ("samples/s", "right"), ("tokens/s", "right"), ("scaling", "right")))
    for (model, n, accum), f in rows.items():
        thr = f.get("throughput") or f.get("skip")
        if thr is None:
            continue
        if thr.value is None:
            continue
        tok, sc = f.get("tokens"), f.get("scaling")
        t.add_row(model, n.lstrip("n"), accum.removeprefix("accum"), _rate(thr.value),
                  _f(tok.value, 0) if tok else "", _f(sc.value, 1, "%") if sc else "")
    return t


def data_table(ms: Sequence[Measurement]) -> Table | None:
    rows = [m for m in ms if m.suite == "train" and m.name.startswith("data/")]
    if not rows:
        return None
    t = _table("Data loading (JPEG decode + augment, CPU)", (
        ("", "left"), ("workers", "right"), ("pinned", "left"), ("samples/s", "right"),
        ("training consumes", "right"), ("keeps up", "left")))
    for m in rows:
        label = "best" if m.name.endswith("/best") else ""
        if m.value is None:
            continue
        ok = m.params.get("keeps_up")
        t.add_row(label, _f(m.params.get("workers"), 0), "yes" if m.params.get("pin_memory")
                  else "no", _rate(m.value), _rate(m.params.get("train_rate")) if label else "",
                  "" if ok is None else (Text("yes", style="green") if ok
                                         else Text("no", style="yellow")))
    return t


def infer_table(ms: Sequence[Measurement]) -> Table | None:
    rows: dict[tuple[str, ...], dict[str, Measurement]] = {}
    for m in ms:
        if m.suite != "infer" or "/serving/" in m.name or "/best_" in m.name:
            continue
        parts = _split(m.name)
        if len(parts) == 5:
            rows.setdefault(tuple(parts[:4]), {})[parts[4]] = m
    if not any(f.get("latency") and f["latency"].value is not None for f in rows.values()):
        return None
    t = _table("Inference (latency: one request at a time; throughput: back to back)", (
        ("model", "left"), ("prec", "left"), ("mode", "left"), ("batch", "right"),
        ("p50 ms", "right"), ("p90", "right"), ("p99", "right"),
        ("samples/s", "right"), ("TFLOP/s", "right"), ("MFU%", "right")))
    for (model, prec, mode, b), f in rows.items():
        lat, thr = f.get("latency"), f.get("throughput")
        if lat is None or lat.value is None:
            continue
        tf = thr.params.get("model_tflops") if thr else None
        mfu = thr.params.get("mfu_pct") if thr else None
        t.add_row(model, prec, mode, b.lstrip("b"), _short(lat.params.get("p50_ms")),
                  _short(lat.params.get("p90_ms")), _short(lat.params.get("p99_ms")),
                  _rate(thr.value) if thr else "", _f(tf, 1), _f(mfu, 1))
    return t


def winner_lines(ms: Sequence[Measurement]) -> list[Text]:
    out = []
    for m in ms:
        if m.suite != "infer" or m.value is None:
            continue
        p = m.params
        if m.name.endswith("/best_latency"):
            out.append(Text(f"{p.get('model')} {p.get('precision')} batch {p.get('batch')}: "
                            f"fastest {m.value:.3f} ms p50 with {p.get('mode')}"))
        elif m.name.endswith("/best_throughput"):
            out.append(Text(f"{p.get('model')} {p.get('precision')} batch {p.get('batch')}: "
                            f"most {m.value:,.0f} samples/s with {p.get('mode')}"))
    return out


def serving_table(ms: Sequence[Measurement]) -> Table | None:
    rows: dict[str, dict[str, Measurement]] = {m.name.rsplit("/", 1)[0]: {} for m in ms
                                               if "/serving/" in m.name}
    if not rows:
        return None
    for m in ms:
        if "/serving/" in m.name:
            rows[m.name.rsplit("/", 1)[0]][m.name.rsplit("/", 1)[1]] = m
    t = _table("Serving (Poisson arrivals, dynamic batching; max QPS with p99 ≤ SLO)", (
        ("model", "left"), ("SLO ms", "right"), ("batch", "right"), ("wait ms", "right"),
        ("max QPS", "right"), ("p99 ms", "right"), ("avg batch", "right"),
        ("target QPS", "right"), ("GPUs", "right")))
    for prefix, f in rows.items():
        q, g = f.get("max_qps"), f.get("gpus_needed")
        if q is None:
            continue
        p = q.params
        if q.value is None:
            continue
        ok = g is not None and g.value is not None
        t.add_row(prefix.removesuffix("/serving"), _short(p.get("slo_ms")),
                  str(p.get("max_batch")), _short(p.get("max_wait_ms")), _f(q.value, 0),
                  _short(p.get("p99_ms")), _f(p.get("mean_batch"), 1),
                  _f(g.params.get("target_qps"), 0) if g else "",
                  _f(g.value, 0) if g is not None and ok else "")
    return t


def workloads_view(ms: Sequence[Measurement]) -> RenderableType:
    parts: list[RenderableType] = []
    for make in (train_table, ddp_table, data_table, infer_table, serving_table):
        table = make(ms)
        if table is not None:
            parts += [Text(""), table]
    notes = flop_lines(ms) + winner_lines(ms)
    parts += [Text(""), *notes] if notes else []
    skipped = [m for m in ms if m.value is None]
    if skipped:
        parts += [Text(""), Text("not measured:", style="bold yellow")]
        parts += [Text(f"  {m.suite} {_what(m)}: {m.skipped_reason}") for m in skipped]
    return Group(*parts)


def _what(m: Measurement) -> str:
    """The figure's name without its last part (throughput, latency…), plus a batch or GPU
    count the name does not carry."""
    parts = _split(m.name)
    return "/".join(parts[:-1]) if len(parts) > 1 else m.name
