"""NVIDIA's nvbandwidth as a reference: parse its output, run it where installed, and turn its
figures into Measurements named like ours so the two sit side by side.

nvbandwidth times copy-engine memcpys between a spin kernel and CUDA events and reports the
median of 3 samples. Matrices: host tests are 1×N (column = CUDA device); the device-to-device
read test has row = the GPU that reads (the destination), column = the GPU read from (the
source); `device_local_copy` is 1×N and counts the copied bytes once.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.p2p import expected_gbps
from gpuaudit.bench.stats import skipped
from gpuaudit.bench.transfer import link_spec
from gpuaudit.binaries import find_binary
from gpuaudit.hw.torch_env import apply_safe_env
from gpuaudit.model import Measurement, Params

ENV_VAR = "GPUAUDIT_NVBANDWIDTH"
NOT_FOUND = "nvbandwidth not found (set GPUAUDIT_NVBANDWIDTH or put it on PATH)"
TESTCASES = ("host_to_device_memcpy_ce", "device_to_host_memcpy_ce",
             "device_to_device_memcpy_read_ce", "device_local_copy")
# testcase → (our suite, our name)
OURS = {
    "host_to_device_memcpy_ce": ("transfer", "h2d_pinned"),
    "device_to_host_memcpy_ce": ("transfer", "d2h_pinned"),
    "device_to_device_memcpy_read_ce": ("p2p", "p2p_unidir"),
    "device_local_copy": ("memory", "copy"),
}
LOCAL_COPY_NOTE = ("nvbandwidth counts the copied bytes once; doubled here to count bytes read "
                   "plus written, like the datasheet figure and our memory suite")
TOOL_NOTE = "nvbandwidth: copy-engine memcpy, median of its samples"


@dataclass(frozen=True)
class NvbRow:
    """One cell of an nvbandwidth testcase's matrix; a testcase with no matrix (Waived,
    Error, Not Found) is one row with row/col/value None."""

    testcase: str
    status: str  # "Passed", "Waived", "Error", "Not Found"
    row: int | None
    col: int | None
    value: float | None  # None: "N/A" (not measured, e.g. the diagonal)
    unit: str  # "GB/s", or "ns" for the latency testcases
    sum: float | None  # the testcase's SUM line / "sum"
    description: str = ""
    error: str | None = None


def _unit(description: str) -> str:
    return "ns" if "(ns)" in description else "GB/s"


def _number(cell: Any) -> float | None:
    try:
        return float(cell)
    except (TypeError, ValueError):  # "N/A"
        return None


def _json_root(text: str) -> dict[str, Any]:
    """The {"nvbandwidth": ...} object, even with warnings printed around it."""
    decoder = json.JSONDecoder()
    for m in re.finditer(r"^[ \t]*\{", text, re.M):
        try:
            found, _ = decoder.raw_decode(text, m.end() - 1)
        except json.JSONDecodeError:
            continue
        if isinstance(found, dict) and isinstance(found.get("nvbandwidth"), dict):
            return found["nvbandwidth"]
    raise ValueError("no nvbandwidth JSON object in the output")


def parse_nvbandwidth_json(text: str) -> list[NvbRow]:
    """Rows of `nvbandwidth -j` output. Raises ValueError when there is none, or when the tool
    reported only an error."""
    body = _json_root(text)
    rows: list[NvbRow] = []
    for case in body.get("testcases") or []:
        name, status = str(case.get("name", "")), str(case.get("status", ""))
        description = str(case.get("bandwidth_description", "")).strip()
        total = _number(case.get("sum"))
        error = str(case["error"]) if case.get("error") else None
        matrix = case.get("bandwidth_matrix") or []
        if not matrix:
            rows.append(NvbRow(name, status, None, None, None, _unit(description), total,
                               description, error))
        for r, cells in enumerate(matrix):
            rows.extend(NvbRow(name, status, r, c, _number(cell), _unit(description), total,
                               description, error) for c, cell in enumerate(cells))
    if not rows and body.get("error"):
        raise ValueError(f"nvbandwidth: {body['error']}")
    return rows


_RUNNING = re.compile(r"^Running\s+(\S+?)\.?$")
_HEADER = re.compile(r"^(memcpy|memory latency)\b")
_COLUMNS = re.compile(r"^\d+(\s+\d+)*$")
_ROW = re.compile(r"^(\d+)\s+(\S.*)$")
_SUM = re.compile(r"^SUM\s+(\S+)\s+(\S+)$")


def parse_nvbandwidth_text(text: str) -> list[NvbRow]:
    """Rows of nvbandwidth's default text output: "Running <testcase>." blocks, each with a
    header line, a column-index line, one line per matrix row, then "SUM <testcase> <value>".
    Lines it does not know (version banner, NOTE, COEFFICIENT_OF_VARIATION) are skipped."""
    rows: list[NvbRow] = []
    testcase, open_case, waived = "", False, False
    description: str | None = None
    columns: list[int] | None = None
    cells: list[tuple[int, int, float | None, str]] = []

    def flush(name: str, total: float | None) -> None:
        nonlocal cells, waived, open_case
        if cells:
            rows.extend(NvbRow(name, "Passed", r, c, v, _unit(d), total, d)
                        for r, c, v, d in cells)
        elif name:
            rows.append(NvbRow(name, "Waived" if waived else "No result", None, None, None,
                               "GB/s", total))
        cells, waived, open_case = [], False, False

    for raw in text.splitlines():
        line = raw.strip()
        if m := _RUNNING.match(line):
            if open_case or cells:
                flush(testcase, None)
            testcase, open_case, description, columns = m[1], True, None, None
        elif _HEADER.match(line):
            description, columns = line, None
        elif description is not None and columns is None and _COLUMNS.match(line):
            columns = [int(x) for x in line.split()]
        elif description is not None and columns is not None and (m := _ROW.match(line)):
            values = m[2].split()
            if len(values) == len(columns):
                cells.extend((int(m[1]), col, _number(v), description)
                             for col, v in zip(columns, values, strict=True))
        elif m := _SUM.match(line):
            flush(m[1], _number(m[2]))  # SUM names the testcase even without a Running line
            description, columns = None, None
        elif not line:
            description, columns = None, None  # a blank line ends a matrix
        elif "waived" in line.lower():
            waived = True
    if open_case or cells:
        flush(testcase, None)
    return rows


def testcase_sums(rows: list[NvbRow]) -> dict[str, float]:
    """testcase → its SUM, as nvbandwidth printed it."""
    return {r.testcase: r.sum for r in rows if r.sum is not None}


def _params(row: NvbRow, extra: Params) -> Params:
    return {"tool": "nvbandwidth", "testcase": row.testcase, **extra}


def to_measurements(ctx: BenchContext, rows: list[NvbRow],
                    cuda_to_nvml: Mapping[int, int] | None = None) -> list[Measurement]:
    """Our Measurements from nvbandwidth rows (only the testcases in OURS).

    `cuda_to_nvml` maps nvbandwidth's CUDA device numbers to NVML indices (identity when
    absent: nvbandwidth and NVML both order by PCI bus id under CUDA_DEVICE_ORDER=PCI_BUS_ID).
    """
    nvml = dict(cuda_to_nvml or {})
    found: list[Measurement] = []
    reported: set[str] = set()
    for row in rows:
        if row.testcase not in OURS:
            continue
        suite, name = OURS[row.testcase]
        if row.status.lower() != "passed" or row.col is None or row.row is None:
            if row.testcase not in reported:  # one skip per testcase, not per cell
                reported.add(row.testcase)
                why = f"nvbandwidth {row.testcase}: {row.status or 'no status'}"
                found.append(skipped(suite, name, "GB/s", why + (f" ({row.error})"
                                                                  if row.error else ""),
                                     params=_params(row, {})))
            continue
        if row.testcase == "device_to_device_memcpy_read_ce":
            if row.row == row.col:
                continue  # the diagonal is N/A by design
            src, dst = nvml.get(row.col, row.col), nvml.get(row.row, row.row)
            params = _params(row, {"src": src, "dst": dst})
            spec, gpu, notes = expected_gbps(ctx, src, dst), src, [TOOL_NOTE]
            value = row.value
        else:
            gpu = nvml.get(row.col, row.col)
            params = _params(row, {})
            if suite == "memory":
                spec_rec = ctx.spec(gpu)
                spec = spec_rec.memory_bandwidth_gbps if spec_rec else None
                notes = [TOOL_NOTE, LOCAL_COPY_NOTE]
                value = None if row.value is None else 2 * row.value
            else:
                spec, link_notes = link_spec(ctx, gpu)
                notes = [TOOL_NOTE, *link_notes]
                value = row.value
        if value is None:
            found.append(skipped(suite, name, "GB/s", f"nvbandwidth {row.testcase}: N/A "
                                 "(not measured; for GPU pairs: no peer access)",
                                 gpu_index=gpu, params=params, spec_value=spec))
            continue
        found.append(Measurement(
            suite=suite, name=name, unit="GB/s", value=value, statistic="median",
            samples=(value,), spec_value=spec,
            pct_of_spec=round(100 * value / spec, 2) if spec else None, gpu_index=gpu,
            params=params, notes=tuple(notes)))
    return found


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    """Run nvbandwidth (where installed) on our testcases and yield its figures."""
    path = find_binary("nvbandwidth", path_env=ENV_VAR)
    base: Params = {"tool": "nvbandwidth"}
    if path is None:
        yield skipped("transfer", "nvbandwidth", "GB/s", NOT_FOUND, params=base)
        return
    ctx.step("nvbandwidth (reference copies)")
    env = apply_safe_env(dict(os.environ))
    try:
        done = subprocess.run([path, "-j", "-t", *TESTCASES], capture_output=True, text=True,
                              timeout=ctx.timeout_s, env=env, check=False)
    except subprocess.TimeoutExpired:
        yield skipped("transfer", "nvbandwidth", "GB/s",
                      f"nvbandwidth timed out after {ctx.timeout_s:g} s", params=base)
        return
    except OSError as e:
        yield skipped("transfer", "nvbandwidth", "GB/s", f"nvbandwidth did not start: {e}",
                      params=base)
        return
    try:
        rows = parse_nvbandwidth_json(done.stdout)
    except ValueError as e:
        tail = (done.stderr or done.stdout).strip().splitlines()[-1:] or [""]
        yield skipped("transfer", "nvbandwidth", "GB/s",
                      f"{e} (exit {done.returncode}: {tail[0][:200]})", params=base)
        return
    yield from to_measurements(ctx, rows, {dev.cuda_index: n for dev, n in ctx.devices})
    reported = {r.testcase for r in rows}
    for testcase in TESTCASES:
        if testcase not in reported:  # e.g. an older nvbandwidth without device_local_copy
            suite, name = OURS[testcase]
            yield skipped(suite, name, "GB/s", f"nvbandwidth did not report {testcase}",
                          params={**base, "testcase": testcase})
