"""NVIDIA DCGM's `dcgmi diag` as a reference: run it where installed, read its JSON, and turn
its verdicts and the figures it prints into Measurements (suite "dcgm").

DCGM diagnostics are a health gate, not a benchmark: each test passes or fails against per-SKU
thresholds with a ~25-30 % margin (research-bench-peers.md §3.1). So every test × GPU becomes a
verdict row (value 1.0 pass / 0.0 fail, `verified` False on a failure, which the runner turns
into a FAIL finding), and the numbers dcgmi prints in its info and warning texts (PCIe
bandwidth and latency, GEMM rates, power, memory bandwidth) become figures beside ours.

Two JSON layouts exist. DCGM ≤ 3.x: root key "DCGM GPU Diagnostic", results keyed by "gpu_ids"
(one id, or several sharing one entry), "info" a list or one comma-joined string, statuses
"Pass"/"PASS". DCGM 4.x (NVIDIA/DCGM dcgmi/Diag.cpp HelperJsonBuildOutput): root key
"DCGM Diagnostic", results keyed by "entity_group"/"entity_id", a per-test "test_summary",
top-level "entity_groups" and "metadata". A run that could not start prints
{"DCGM Diagnostic": {"version": ..., "runtime_error": ...}}.

DCGM GPU ids are taken to be NVML indices (DCGM enumerates GPUs through NVML).
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.stats import skipped
from gpuaudit.bench.transfer import link_spec
from gpuaudit.binaries import find_binary
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import Measurement, Params

SUITE = "dcgm"
ENV_VAR = "GPUAUDIT_DCGMI"
NOT_FOUND = "dcgmi not found (install DCGM, or set GPUAUDIT_DCGMI)"
ROOT_KEYS = ("DCGM Diagnostic", "DCGM GPU Diagnostic")  # 4.x, then ≤ 3.x
# Seconds a level may take before we stop it (the CLI reference: level 1 "seconds", level 2
# "approximately two minutes", level 3 "approximately 15 minutes"), with room for many GPUs.
LEVEL_TIMEOUT_S = {1: 300.0, 2: 900.0, 3: 3600.0}
# After SIGTERM, dcgmi stops the diagnostic in the host engine (dcgmi/Diag.cpp
# handle_signal_during_diag); it gets this long before SIGKILL.
TERM_GRACE_S = 30.0
HOST_ENGINE_DOWN = re.compile(
    r"unable to connect to host engine|host engine connection invalid|"
    r"unable to establish a connection", re.I)
HOST_ENGINE_HINT = "start the DCGM host engine: systemctl start nvidia-dcgm, or nv-hostengine"
# DiagnosticPlugin.cpp counts 2n^3 + n^2 FLOP per GEMM (OPS_PER_2048_MUL) but divides by 1024^3
# and calls it "gigaflops": × this to get 10^9 FLOP/s.
GIB_FLOPS = 2**30 / 1e9

# dcgmi's words → ours; anything else is kept as printed and treated as not passing.
_STATUS = {"pass": "Pass", "passed": "Pass", "fail": "Fail", "failed": "Fail",
           "warn": "Warn", "warning": "Warn", "skip": "Skip", "skipped": "Skip",
           "not run": "Not Run", "notrun": "Not Run"}
_RANK = {"Fail": 5, "Warn": 4, "Pass": 3, "Skip": 2, "Not Run": 1}


@dataclass(frozen=True)
class DcgmResult:
    """One entity's result in one test. `gpu_index` is None for a result about the whole run
    (≤ 3.x software checks carry no GPU) or about a non-GPU entity (4.x CPU tests)."""

    status: str  # "Pass", "Fail", "Warn", "Skip", "Not Run", or an unknown word as printed
    gpu_index: int | None = None
    warnings: tuple[str, ...] = ()
    info: tuple[str, ...] = ()
    error_ids: tuple[int, ...] = ()  # DCGM_FR_* codes of the warnings, where given
    entity: str = ""  # "gpu:0", "cpu:0"; "" for the whole run
    # The GPUs the dcgmi entry named: ≤ 3.x may put several under one entry ("0,1,2,3").
    covers: tuple[int, ...] = ()


@dataclass(frozen=True)
class DcgmTest:
    name: str  # as dcgmi printed it: "pcie", "PCIe", "Targeted Stress", "software"
    category: str  # "Deployment", "Integration", "Hardware", "Stress", "Custom", ...
    result: str  # the test's overall status (4.x test_summary, else the worst result)
    results: tuple[DcgmResult, ...]
    summary_warnings: tuple[str, ...] = ()  # 4.x: warnings not tied to one entity
    summary_info: tuple[str, ...] = ()


@dataclass(frozen=True)
class DcgmDiag:
    tests: tuple[DcgmTest, ...]
    layout: str  # "4.x" ("DCGM Diagnostic") or "3.x" ("DCGM GPU Diagnostic")
    version: str | None = None
    driver_version: str | None = None
    runtime_error: str | None = None  # the run did not happen; dcgmi says why

    def test(self, name: str) -> DcgmTest | None:
        key = slug(name)
        return next((t for t in self.tests if slug(t.name) == key), None)


@dataclass(frozen=True)
class DcgmFigure:
    """A number dcgmi printed: `suffix` names it within its test ("h2d", "gflops", ...)."""

    suffix: str
    value: float
    unit: str
    gpu_index: int | None
    text: str  # the line it came from
    target: float | None = None  # dcgmi's threshold, when the line states one
    notes: tuple[str, ...] = field(default=())


def slug(name: str) -> str:
    """"Page Retirement/Row Remap" → "page_retirement_row_remap"; "PCIe" → "pcie"."""
    return re.sub(r"[^a-z0-9]+", "_", name.lower()).strip("_")


def normalize_status(raw: Any) -> str:
    text = str(raw or "").strip()
    return _STATUS.get(text.lower(), text or "unknown")


def _texts(value: Any) -> tuple[str, ...]:
    """"info"/"warnings" as a tuple of strings: a list, one string, or warning objects."""
    if value is None:
        return ()
    items = value if isinstance(value, list) else [value]
    out = []
    for item in items:
        if isinstance(item, Mapping):
            item = item.get("warning", item.get("info", ""))
        if item not in (None, ""):
            out.append(str(item))
    return tuple(out)


def _error_ids(value: Any) -> tuple[int, ...]:
    items = value if isinstance(value, list) else [value]
    return tuple(int(w["error_id"]) for w in items
                 if isinstance(w, Mapping) and isinstance(w.get("error_id"), int))


def _gpu_ids(value: Any) -> tuple[int, ...]:
    """≤ 3.x "gpu_ids": "0", "0,1,2,3", or a bare number."""
    if isinstance(value, bool) or value is None:
        return ()
    if isinstance(value, int):
        return (value,)
    return tuple(int(x) for x in re.findall(r"\d+", str(value)))


def _results(raw: Mapping[str, Any]) -> list[DcgmResult]:
    status = normalize_status(raw.get("status"))
    warnings, info = _texts(raw.get("warnings")), _texts(raw.get("info"))
    ids = _error_ids(raw.get("warnings"))
    if "entity_id" in raw:  # 4.x
        group = str(raw.get("entity_group") or "GPU")
        entity_id = raw.get("entity_id")
        eid = entity_id if isinstance(entity_id, int) and not isinstance(entity_id, bool) \
            else None
        is_gpu = group.upper() == "GPU" and eid is not None
        return [DcgmResult(status, eid if is_gpu else None, warnings, info, ids,
                           f"{group.lower()}:{eid}" if eid is not None else group.lower(),
                           (eid,) if is_gpu and eid is not None else ())]
    gpus = _gpu_ids(raw.get("gpu_ids"))
    if not gpus:
        return [DcgmResult(status, None, warnings, info, ids)]
    return [DcgmResult(status, g, warnings, info, ids, f"gpu:{g}", gpus) for g in gpus]


def _worst(statuses: Iterable[str]) -> str:
    found = list(statuses)
    if not found:
        return "Not Run"
    unknown = [s for s in found if s not in _RANK]
    return unknown[0] if unknown else max(found, key=_RANK.__getitem__)


def _test(raw: Mapping[str, Any], category: str) -> DcgmTest:
    results: list[DcgmResult] = []
    for r in raw.get("results") or []:
        if isinstance(r, Mapping):
            results.extend(_results(r))
    summary = raw.get("test_summary")
    if isinstance(summary, Mapping):
        overall = normalize_status(summary.get("status"))
        s_warn, s_info = _texts(summary.get("warnings")), _texts(summary.get("info"))
    else:
        overall, s_warn, s_info = _worst(r.status for r in results), (), ()
    return DcgmTest(str(raw.get("name", "")), category, overall, tuple(results), s_warn, s_info)


def _candidates(text: str) -> Iterator[Any]:
    """Every JSON value that starts at a '{' beginning a line (dcgmi may print a banner)."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^[ \t]*\{", text, re.M):
        try:
            found, _ = decoder.raw_decode(text, m.end() - 1)
        except json.JSONDecodeError as e:
            yield e
            continue
        yield found


def parse_dcgmi_diag_json(text: str) -> DcgmDiag:
    """The tests and results in `dcgmi diag -j` output (either layout; unknown keys ignored).
    Raises ValueError (one line) when the output holds no diagnostic JSON."""
    first_error: json.JSONDecodeError | None = None
    for found in _candidates(text):
        if isinstance(found, json.JSONDecodeError):
            first_error = first_error or found
            continue
        if not isinstance(found, dict):
            continue
        if isinstance(found.get("iterations"), list) and found["iterations"]:
            found = found["iterations"][-1]  # -i N runs: the last iteration
            if not isinstance(found, dict):
                continue
        key = next((k for k in ROOT_KEYS if isinstance(found.get(k), dict)), None)
        if key is None:
            continue
        body, meta = found[key], found.get("metadata")
        meta = meta if isinstance(meta, dict) else {}
        tests: list[DcgmTest] = []
        for cat in body.get("test_categories") or []:
            if not isinstance(cat, Mapping):
                continue
            for t in cat.get("tests") or []:
                if isinstance(t, Mapping):
                    tests.append(_test(t, str(cat.get("category", ""))))
        version = meta.get("version") or body.get("version")
        driver = meta.get("Driver Version Detected") or body.get("Driver Version Detected")
        error = body.get("runtime_error")
        return DcgmDiag(tests=tuple(tests), layout="4.x" if key == ROOT_KEYS[0] else "3.x",
                        version=str(version) if version else None,
                        driver_version=str(driver) if driver else None,
                        runtime_error=str(error).strip() if error else None)
    if first_error is not None:
        raise ValueError(f"dcgmi diag output is not valid JSON ({first_error.msg} at line "
                         f"{first_error.lineno} column {first_error.colno})")
    raise ValueError("no dcgmi diag JSON in the output")


# ---- the numbers in info and warning texts ----

_VALUE = r"(?P<value>\d+(?:\.\d+)?)"
_TARGET = r"(?P<target>\d+(?:\.\d+)?)"
_GPU = r"(?:GPU (?P<gpu>\d+) )?"  # ≤ 3.x prefixes lines with "GPU n " (some twice)


def _p(pattern: str) -> re.Pattern[str]:
    return re.compile(pattern.replace("<V>", _VALUE).replace("<T>", _TARGET)
                      .replace("<G>", _GPU))


# (suffix, unit, pattern): `value` is the figure, `gpu` the GPU the line names (optional),
# `target` dcgmi's threshold where the line states one.
FIGURES: tuple[tuple[str, str, re.Pattern[str]], ...] = (
    # pcie plugin (nvvs/plugin_src/pcie/PcieMain.cpp addBandwidthInfo / addLatencyInfo)
    ("d2h", "GB/s", _p(r"<G>GPU to Host bandwidth:\s*<V>\s*GB/s")),
    ("h2d", "GB/s", _p(r"<G>Host to GPU bandwidth:\s*<V>\s*GB/s")),
    ("bidir", "GB/s", _p(r"<G>bidirectional bandwidth:\s*<V>\s*GB/s")),
    ("d2h_latency", "us", _p(r"<G>GPU to Host latency:\s*<V>\s*us")),
    ("h2d_latency", "us", _p(r"<G>Host to GPU latency:\s*<V>\s*us")),
    ("bidir_latency", "us", _p(r"<G>bidirectional latency:\s*<V>\s*us")),
    # diagnostic (GPU-burn GEMMs, DiagnosticPlugin.cpp): "gigaflops" of 2^30 FLOP/s (GIB_FLOPS)
    ("gflops", "GFLOP/s", _p(r"GPU (?P<gpu>\d+) calculated at approximately <V> gigaflops")),
    # targeted_stress / sm_stress: the average GEMM rate in 10^9 FLOP/s
    # (TargetedStress_wrapper.cpp "relative stress level\t<average of perf_gflops>")
    ("gflops", "GFLOP/s", _p(r"<G>relative stress level:?\s*<V>")),
    # DCGM_FR_STRESS_LEVEL ("did not exceed" in old releases, "did not reach" now)
    ("max_gflops", "GFLOP/s", _p(r"Max stress level of <V> did not (?:reach|exceed) desired "
                                 r"stress level of <T> for GPU (?P<gpu>\d+)")),
    # targeted_power (TargetedPower_wrapper.cpp; ≤ 3.x printed "power average:\t<W> W")
    ("max_w", "W", _p(r"<G>max power: <V> W")),
    ("avg_w", "W", _p(r"<G>(?:average power usage|power average):\s*<V> W")),
    ("max_w", "W", _p(r"Max power of <V> did not reach desired power minimum \S+ of <T> "
                      r"for GPU (?P<gpu>\d+)")),  # DCGM_FR_TARGET_POWER
    # memory_bandwidth (a closed plugin): only its failure message carries a number
    # (DCGM_FR_MEMORY_BANDWIDTH)
    ("bandwidth", "GB/s", _p(r"GPU (?P<gpu>\d+) only achieved a memory bandwidth of <V> GB/s,"
                             r" failing to meet <T> GB/s")),
)


def extract_figures(text: str, gpu_index: int | None = None) -> list[DcgmFigure]:
    """The figures in one info or warning text (≤ 3.x joins several lines with ", ").
    A figure's GPU is the one its line names, else `gpu_index`."""
    found: list[DcgmFigure] = []
    for suffix, unit, pattern in FIGURES:
        for m in pattern.finditer(text):
            groups = m.groupdict()
            gpu = int(groups["gpu"]) if groups.get("gpu") else gpu_index
            value = float(groups["value"])
            notes: tuple[str, ...] = ()
            if suffix == "gflops" and "gigaflops" in m.group(0):
                notes = (f"dcgmi printed {value:g} 'gigaflops' of 2^30 FLOP/s; counted here "
                         "in 10^9 FLOP/s (a mix of the precisions its log names)",)
                value *= GIB_FLOPS
            target = float(groups["target"]) if groups.get("target") else None
            found.append(DcgmFigure(suffix, value, unit, gpu, m.group(0).strip(), target, notes))
    return found


def figures_of(test: DcgmTest) -> list[DcgmFigure]:
    """Every figure of one test, once per (figure, GPU) even where ≤ 3.x shared one entry
    among several GPUs."""
    seen: set[tuple[str, int | None]] = set()
    out: list[DcgmFigure] = []
    texts = [(r, t) for r in test.results for t in (*r.info, *r.warnings)]
    texts += [(None, t) for t in (*test.summary_info, *test.summary_warnings)]
    for result, text in texts:
        own = result.gpu_index if result is not None and len(result.covers) <= 1 else None
        for fig in extract_figures(text, own):
            key = (fig.suffix, fig.gpu_index)
            if key not in seen:
                seen.add(key)
                out.append(fig)
    return out


# ---- Measurements ----

def _figure_measurement(ctx: BenchContext, test: DcgmTest, fig: DcgmFigure,
                        base: Params) -> Measurement:
    name = f"{slug(test.name)}_{fig.suffix}"
    params: Params = {**base, "test": test.name}
    if fig.target is not None:
        params["dcgm_threshold"] = fig.target
    notes = [f"dcgmi diag -r {base['level']} {test.name}: as dcgmi reported it", *fig.notes]
    spec = None
    if fig.gpu_index is not None and fig.unit == "GB/s" and fig.suffix in ("h2d", "d2h",
                                                                              "bidir"):
        rate, link_notes = link_spec(ctx, fig.gpu_index)
        spec = rate * 2 if rate and fig.suffix == "bidir" else rate
        notes += list(link_notes)
    elif fig.gpu_index is not None and fig.suffix == "bandwidth":
        spec_rec = ctx.spec(fig.gpu_index)
        spec = spec_rec.memory_bandwidth_gbps if spec_rec else None
    return Measurement(
        suite=SUITE, name=name, unit=fig.unit, value=fig.value, statistic="as reported",
        samples=(fig.value,), spec_value=spec,
        pct_of_spec=round(100 * fig.value / spec, 2) if spec else None,
        gpu_index=fig.gpu_index, params=params, notes=tuple(notes))


def _why(result: DcgmResult, test: DcgmTest) -> str:
    texts = result.warnings or test.summary_warnings or result.info or test.summary_info
    return "; ".join(texts)[:300] if texts else "no reason given"


def verdict_rows(test: DcgmTest, base: Params) -> list[Measurement]:
    """One row per test × entity: value 1.0 pass / 0.0 fail, `verified` False on a failure;
    a skipped test is a skipped Measurement with dcgmi's reason."""
    name = f"diag_{slug(test.name)}"
    results = test.results or (DcgmResult(test.result, None, test.summary_warnings,
                                          test.summary_info),)
    rows: list[Measurement] = []
    for r in results:
        # "entity" keeps each GPU's verdict in its own straggler group: 0/1 is not a speed.
        params: Params = {**base, "test": test.name, "category": test.category,
                          "status": r.status, "entity": r.entity or "run"}
        if r.error_ids:
            params["dcgm_error_ids"] = ",".join(map(str, r.error_ids))
        if r.status in ("Skip", "Not Run"):
            verb = "skipped" if r.status == "Skip" else "did not run"
            rows.append(skipped(SUITE, name, "pass", f"dcgmi {verb} {test.name}: "
                                f"{_why(r, test)}", gpu_index=r.gpu_index, params=params))
            continue
        if r.status not in _RANK:
            rows.append(skipped(SUITE, name, "pass", f"dcgmi reported {test.name} as "
                                f"'{r.status}', a status we do not know",
                                gpu_index=r.gpu_index, params=params))
            continue
        passed = r.status == "Pass"
        notes = [f"dcgmi: {w}" for w in (*r.warnings, *test.summary_warnings)]
        if r.status == "Warn":
            notes.insert(0, "dcgmi Warn: a non-fatal finding (DCGM 4 prints it as Fail)")
        rows.append(Measurement(
            suite=SUITE, name=name, unit="pass", value=1.0 if passed else 0.0,
            statistic="verdict", gpu_index=r.gpu_index, params=params, verified=passed,
            notes=tuple(n[:400] for n in notes)))
    return rows


def to_measurements(ctx: BenchContext, diag: DcgmDiag, level: int,
                    gpus: Sequence[int] | None = None) -> list[Measurement]:
    """Verdict rows and figures for every test; results for GPUs outside `gpus` (when given)
    are dropped (some dcgmi versions ignore -i: NVIDIA/DCGM issue #70)."""
    base: Params = {"tool": "dcgmi", "level": level}
    if diag.version:
        base["dcgm_version"] = diag.version
    wanted = set(gpus) if gpus is not None else None

    def keep(gpu: int | None) -> bool:
        return wanted is None or gpu is None or gpu in wanted

    found: list[Measurement] = []
    for test in diag.tests:
        kept = tuple(r for r in test.results if keep(r.gpu_index))
        if test.results and not kept:
            continue
        test = DcgmTest(test.name, test.category, test.result, kept, test.summary_warnings,
                        test.summary_info)
        found.extend(verdict_rows(test, base))
        found.extend(_figure_measurement(ctx, test, fig, base)
                     for fig in figures_of(test) if keep(fig.gpu_index))
    return found


# ---- running dcgmi ----

def _gpu_list(ctx: BenchContext) -> list[int]:
    """The chosen GPUs (NVML indices); without CUDA devices (no torch), the machine's GPUs."""
    chosen = [n for _, n in ctx.devices] or [g.index for g in ctx.machine.gpus]
    return sorted(set(chosen))


def _run(cmd: list[str], env: dict[str, str], timeout: float
         ) -> tuple[int | None, str, str]:
    """(exit status or None on timeout, stdout, stderr). On timeout dcgmi gets SIGTERM, which
    makes it stop the diagnostic in the host engine, then SIGKILL after TERM_GRACE_S."""
    proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            stdin=subprocess.DEVNULL, text=True, env=env)
    try:
        out, err = proc.communicate(timeout=timeout)
        return proc.returncode, out, err
    except subprocess.TimeoutExpired:
        proc.terminate()
        try:
            out, err = proc.communicate(timeout=TERM_GRACE_S)
        except subprocess.TimeoutExpired:
            proc.kill()
            out, err = proc.communicate()
        return None, out or "", err or ""


def _host_engine_line(*texts: str) -> str | None:
    lines = [ln.strip() for t in texts for ln in (t or "").splitlines()
             if HOST_ENGINE_DOWN.search(ln)]
    return lines[-1] if lines else None


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    """`dcgmi diag -r <level> -i <GPUs> -j` (level 1 quick, 2 standard, 3 full) and its
    verdicts and figures. Never raises for the tool's failures: they become skipped rows."""
    level = ctx.pick(1, 2, 3)
    base: Params = {"tool": "dcgmi", "level": level}
    path = find_binary("dcgmi", path_env=ENV_VAR)
    if path is None:
        yield skipped(SUITE, "diag", "", NOT_FOUND, params=base)
        return
    gpus = _gpu_list(ctx)
    if not gpus:
        yield skipped(SUITE, "diag", "", "no NVIDIA GPU to diagnose", params=base)
        return
    timeout = max(ctx.timeout_s, LEVEL_TIMEOUT_S.get(level, max(LEVEL_TIMEOUT_S.values())))
    ctx.step(f"dcgmi diag -r {level} (DCGM diagnostics, up to {timeout / 60:.0f} min)")
    cmd = [path, "diag", "-r", str(level), "-i", ",".join(map(str, gpus)), "-j"]
    try:
        code, out, err = _run(cmd, apply_safe_env(dict(os.environ)), timeout)
    except OSError as e:
        yield skipped(SUITE, "diag", "", f"dcgmi did not start: {e}", params=base)
        return
    if code is None:
        yield skipped(SUITE, "diag", "", f"dcgmi diag -r {level} timed out after "
                      f"{timeout:g} s (stopped)", params=base)
        return
    try:
        diag = parse_dcgmi_diag_json(out)
    except ValueError as e:
        if line := _host_engine_line(out, err):
            yield skipped(SUITE, "diag", "", f"{line} ({HOST_ENGINE_HINT})", params=base)
            return
        tail = ((err or "").strip() or (out or "").strip()).splitlines()[-1:] or [""]
        yield skipped(SUITE, "diag", "", f"{e} (exit {code}: {tail[0][:200]})", params=base)
        return
    if diag.runtime_error:
        yield skipped(SUITE, "diag", "", f"dcgmi diag: {diag.runtime_error.splitlines()[0]}"
                      [:300], params=base)
        return
    found = to_measurements(ctx, diag, level, gpus)
    if not found:
        yield skipped(SUITE, "diag", "", f"dcgmi diag -r {level} reported no test "
                      f"(exit {code})", params=base)
        return
    yield from found
