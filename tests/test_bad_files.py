"""Every command's file inputs under damage, through the real command line (typer's runner in
this process, a few as real subprocesses): special files named by mistake, files cut short,
broken and bomb gzip, bytes that are not UTF-8, 300 MiB of zeros, and JSON documents whose
values no record holds (NaN, ±inf, negative, 10^30, the wrong type). Each is refused with one
line and exit 2 (or, for a value a document may hold, read), never a traceback, never past a
deadline, and the store the command was pointed at is byte for byte what it was."""

from __future__ import annotations

import gzip
import json
import math
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from tests import damage
from tests.support.cli import gpuaudit

FIX = Path(__file__).parent / "fixtures"
TRACE = FIX / "telemetry" / "h200-1gpu-idle.json"
SNAPSHOT = FIX / "h200-1gpu" / "inspect.json"
OP_RUN = FIX / "predict" / "cpu-gpt-tiny-op-profile.json"
BENCH = FIX / "runs" / "h200-1gpu-bench-quick.json"
CATALOG = FIX / "catalogs" / "user.csv"
EVIDENCE = FIX / "doctor" / "zoo-h200" / "vit_fp32.json.gz"
DEADLINE_S = 60.0  # far beyond any of these on a loaded CI machine; a hang never ends
EXAMPLES = settings(max_examples=12, deadline=None, derandomize=True,
                    suppress_health_check=[HealthCheck.function_scoped_fixture,
                                           HealthCheck.too_slow])
runner = CliRunner()


@dataclass(frozen=True)
class Input:
    """One file input of one command: the argv around the file, a good file for it, and
    whether a NaN in it is read (a snapshot keeps what NVML answered; its check names it)."""

    name: str
    argv: Callable[[str], list[str]]
    good: Callable[[Path], Path]
    nan_ok: bool = False
    saves: bool = False  # a file it takes is saved in the store (else: the store unchanged)


def _fixture(path: Path) -> Callable[[Path], Path]:
    return lambda _work: path


def _profile(work: Path) -> Path:
    from tests.support.kineto import hand_trace

    p = work / "profile.json"
    if not p.exists():
        p.write_text(json.dumps(hand_trace()))
    return p


def _rules(work: Path) -> Path:
    p = work / "rules.yml"
    p.write_text("groups:\n- name: g\n  rules:\n  - alert: Hot\n    expr: "
                 "gpuaudit_gpu_temperature_celsius > 80\n    for: 1m\n")
    return p


def _expect(work: Path) -> Path:
    p = work / "expect.yml"
    p.write_text("gpu_count: 1\ngpu_model: NVIDIA H200\n")
    return p


def _diagnosis(work: Path) -> Path:
    p = work / "diagnosis.json"
    if not p.exists():
        result = runner.invoke(app, ["doctor", "--trace", str(TRACE), "--save", str(p)])
        assert result.exit_code == 0, result.output
    return p


INPUTS = [
    Input("inspect --from", lambda f: ["inspect", "--from", f, "--json"], _fixture(SNAPSHOT),
          nan_ok=True, saves=True),
    Input("show RUN", lambda f: ["show", f, "--json"], _fixture(BENCH)),
    Input("fleet check --from", lambda f: ["fleet", "check", "--expect", "EXPECT", "--from", f,
                                           "--json"], _fixture(SNAPSHOT), nan_ok=True),
    Input("fleet check --expect", lambda f: ["fleet", "check", "--expect", f, "--from",
                                             str(SNAPSHOT), "--json"], _expect),
    Input("monitor --replay", lambda f: ["monitor", "--replay", f, "--count", "3", "--speed",
                                         "0", "--no-export", "--no-history", "--no-rules",
                                         "--json"], _fixture(TRACE)),
    Input("monitor --rules", lambda f: ["monitor", "--replay", str(TRACE), "--rules", f,
                                        "--count", "2", "--speed", "0", "--no-export",
                                        "--no-history", "--json"], _rules),
    Input("doctor --trace", lambda f: ["doctor", "--trace", f, "--json"], _fixture(TRACE)),
    Input("doctor --profile", lambda f: ["doctor", "--profile", f, "--json"], _profile),
    Input("doctor --evidence", lambda f: ["doctor", "--evidence", f, "--json"],
          _fixture(EVIDENCE)),
    Input("predict RUN", lambda f: ["predict", f, "--workload", "gpt-tiny/bf16", "--gpus", "2",
                                    "--rates", str(BENCH), "--json"], _fixture(OP_RUN)),
    Input("predict --rates", lambda f: ["predict", str(OP_RUN), "--workload", "gpt-tiny/bf16",
                                        "--gpus", "2", "--rates", f, "--json"],
          _fixture(BENCH)),
    Input("recommend --run", lambda f: ["recommend", "--run", f, "--workload",
                                             "gpt-tiny/bf16", "--rates", str(BENCH),
                                             "--samples", "1M", "--json"], _fixture(OP_RUN)),
    Input("recommend --catalog", lambda f: ["recommend", "train", "--params", "7B", "--tokens",
                                            "1T", "--catalog", f, "--json"],
          _fixture(CATALOG)),
    Input("recommend --feed", lambda f: ["recommend", "train", "--params", "100M", "--tokens",
                                         "1B", "--feed", f, "--json"], _diagnosis),
    Input("recommend --allreduce-run", lambda f: ["recommend", "train", "--params", "7B",
                                                  "--tokens", "1T", "--allreduce-run", f,
                                                  "--json"], _fixture(BENCH)),
    Input("report RUN", lambda f: ["report", f, "--md", "-", "--no-telemetry"],
          _fixture(BENCH)),
    Input("report --doctor", lambda f: ["report", str(BENCH), "--md", "-", "--no-telemetry",
                                        "--doctor", f], _diagnosis),
    Input("compare A B", lambda f: ["compare", f, str(BENCH), "--json"], _fixture(BENCH)),
    Input("catalog validate", lambda f: ["catalog", "validate", f], _fixture(CATALOG)),
    Input("catalog import", lambda f: ["catalog", "import", f], _fixture(CATALOG)),
    Input("catalog list --catalog", lambda f: ["catalog", "list", "--catalog", f],
          _fixture(CATALOG)),
]
JSON_INPUTS = [i for i in INPUTS if i.name not in (
    "monitor --rules", "fleet check --expect", "recommend --catalog", "catalog validate",
    "catalog import", "catalog list --catalog")]


@pytest.fixture(scope="module")
def work(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("bad-files")


@pytest.fixture(scope="module")
def store(work: Path) -> Path:
    """A store with a run in it, named to every command (GPUAUDIT_DB) so that any write shows."""
    db = work / "store.db"
    result = runner.invoke(app, ["inspect", "--from", str(SNAPSHOT), "--save", "--db",
                                 str(db)])
    assert result.exit_code == 0, result.output
    return db


def invoke(inp: Input, path: Path, work: Path, store: Path) -> tuple[int, list[str]]:
    """Run the command on `path`: its exit code and its stderr's lines. Fails on a traceback,
    on a hang, or when the store changed."""
    argv = [str(_expect(work)) if a == "EXPECT" else a for a in inp.argv(str(path))]
    before = damage.checksum(store)
    user_catalog = work / "xdg" / "gpuaudit"
    with damage.deadline(DEADLINE_S):
        result = runner.invoke(app, argv, env={"GPUAUDIT_DB": str(store), "COLUMNS": "100",
                                               "XDG_DATA_HOME": str(work / "xdg")})
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        f"{inp.name} {path.name}: {result.exception!r}"
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert "Traceback" not in result.stderr, result.stderr[-2000:]
    if result.exit_code == 2:
        assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: "), result.stderr
    if result.exit_code == 2 or not inp.saves:
        assert damage.checksum(store) == before, f"{inp.name} changed the store"
    if result.exit_code == 2 and inp.name == "catalog import":
        assert not user_catalog.exists() or not any(user_catalog.rglob("*.csv")), \
            "a refused import wrote the user catalog"
    return result.exit_code, lines


def refused(inp: Input, path: Path, work: Path, store: Path, *, names_file: bool = True
            ) -> str:
    code, lines = invoke(inp, path, work, store)
    assert code == 2, f"{inp.name} took {path.name}: exit {code}"
    if names_file and str(path) != "/dev/zero":
        assert path.name in lines[0], lines[0]
    return lines[0]


# -- special files, bombs, zeros -----------------------------------------------------------------

@pytest.mark.parametrize("kind", list(damage.SPECIAL))
@pytest.mark.parametrize("inp", INPUTS, ids=[i.name for i in INPUTS])
def test_a_special_or_oversized_file_is_refused_naming_it(inp, kind, work, store):
    if inp.name == "monitor --rules" and kind == "empty":
        pytest.skip("an empty rule file holds no rules, as Prometheus reads it: not damage")
    d = work / f"{inp.name.replace(' ', '_')}-{kind.replace('/', '_').replace(' ', '_')}"
    d.mkdir(exist_ok=True)
    suffix = ".json.gz" if "gzip" in kind else ".csv" if "catalog" in inp.name else ".json"
    path = damage.SPECIAL[kind](d, f"input{suffix}")
    started = time.monotonic()
    line = refused(inp, path, work, store, names_file=kind != "empty")
    assert time.monotonic() - started < 20, f"{inp.name} took long to refuse {kind}"
    if kind in ("fifo", "socket", "directory", "/dev/zero"):
        assert "not a regular file" in line or "is a directory" in line, line
    if kind in ("300 MiB of zeros", "gzip bomb", "gzip of a JSON bomb"):
        assert "MiB" in line or "binary" in line, line


# -- byte damage -----------------------------------------------------------------------------------

junk_bytes = st.sampled_from([b"\0", b"\xff\xfe", "é".encode("latin-1"), b"\x1f\x8b",
                              b"\x80\x80", b"\xc3"])


@pytest.mark.parametrize("inp", INPUTS, ids=[i.name for i in INPUTS])
@EXAMPLES
@given(how=st.sampled_from(["cut", "junk", "gzip cut"]), at=st.integers(0, 10**7),
       junk=junk_bytes)
def test_a_damaged_file_is_refused_or_read(inp, how, at, junk, work, store):
    good = inp.good(work)
    raw = good.read_bytes()
    plain = gzip.decompress(raw) if raw[:2] == b"\x1f\x8b" else raw
    if how == "cut":
        data, name = damage.truncated(plain, at), "cut" + "".join(good.suffixes)
    elif how == "junk":
        data, name = damage.with_bytes(plain, at, junk), "junk" + "".join(good.suffixes)
    else:
        data, name = damage.gzip_cut(plain, at), "gzcut.json.gz"
    path = work / f"{inp.name.replace(' ', '_')}-{name}"
    path.write_bytes(data)
    code, _ = invoke(inp, path, work, store)
    not_text = how == "junk" and junk != b"\x1f\x8b"  # NUL or not UTF-8 anywhere: not text
    if not_text or how == "gzip cut":
        assert code == 2, f"{inp.name} took {how} {junk!r}: exit {code}"


# -- JSON values no record holds -------------------------------------------------------------------

values = st.one_of(
    st.sampled_from([math.nan, math.inf, -math.inf]),
    st.sampled_from([-1, -1e9, 10**30, 1e30, "lots", "", [], {}, [1, 2], None, True]),
    st.integers(-2**70, 2**70), st.text(max_size=6))


def _json_of(good: Path) -> tuple[dict, bool]:
    raw = good.read_bytes()
    gz = raw[:2] == b"\x1f\x8b"
    return json.loads(gzip.decompress(raw) if gz else raw), gz


@pytest.mark.parametrize("inp", JSON_INPUTS, ids=[i.name for i in JSON_INPUTS])
@EXAMPLES
@given(picks=st.lists(st.tuples(st.integers(0, 10**6), values), min_size=1, max_size=3))
def test_a_document_with_impossible_values_is_refused_or_read(inp, picks, work, store):
    doc, gz = _json_of(inp.good(work))
    bad = damage.mutated(doc, picks, damage.number_paths(doc))
    text = json.dumps(bad).encode()
    path = work / f"{inp.name.replace(' ', '_')}-values.json{'.gz' if gz else ''}"
    path.write_bytes(gzip.compress(text) if gz else text)
    code, lines = invoke(inp, path, work, store)
    constants: list[str] = []  # NaN, Infinity: what json.dumps writes for them
    json.loads(text, parse_constant=constants.append)
    if constants and not inp.nan_ok:
        assert code == 2 and "JSON" in lines[0], f"{inp.name} read NaN/inf: exit {code}"


# -- traces: what the header and frames claim ---------------------------------------------------

TRACE_DOC = json.loads(TRACE.read_text())


def _trace_with(**change) -> dict:
    doc = json.loads(json.dumps(TRACE_DOC))
    for key, value in change.items():
        if key == "frames":
            doc["frames"] = value(doc["frames"])
        elif key == "gpus":
            doc["setup"]["nvmlDeviceGetCount()"] = {"value": value}
        else:
            doc[key] = value
    return doc


def _shift(frames: list, days: float) -> list:
    from datetime import datetime, timedelta

    for f in frames:
        f["time"] = (datetime.fromisoformat(f["time"]) + timedelta(days=days)).isoformat()
    return frames


BAD_TRACES = {
    "100,000 GPUs": (_trace_with(gpus=100_000), "GPU count"),
    "GPU count as text": (_trace_with(gpus="8"), "GPU count"),
    "interval 'soon'": (_trace_with(interval_s="soon"), "interval_s"),
    "negative interval": (_trace_with(interval_s=-1.0), "interval_s"),
    "no frames": (_trace_with(frames=lambda f: []), "no frames"),
    "a frame a year ahead": (_trace_with(frames=lambda f: _shift(f, 365)), "future"),
    "frames going back": (_trace_with(frames=lambda f: list(reversed(f))), "before"),
    "a clock as text": (_trace_with(frames=lambda f: [
        {**f[0], "calls": {**f[0]["calls"], "nvmlDeviceGetClockInfo(gpu0,1)": {
            "value": "1980"}}}, *f[1:]]), "sm_clock_mhz"),
    "10^30 W": (_trace_with(frames=lambda f: [
        {**f[0], "calls": {**f[0]["calls"], "nvmlDeviceGetPowerUsage(gpu0)": {
            "value": 10**30}}}, *f[1:]]), "power_w"),
    "a time that is a number": (_trace_with(frames=lambda f: [{**f[0], "time": 5}, *f[1:]]),
                                "ISO time"),
}


@pytest.mark.parametrize("case", list(BAD_TRACES))
@pytest.mark.parametrize("command", ["doctor", "monitor"])
def test_a_trace_claiming_the_impossible_is_refused(case, command, work, store):
    doc, needle = BAD_TRACES[case]
    path = work / f"trace-{case.replace(' ', '_').replace('/', '_')}.json"
    path.write_text(json.dumps(doc))
    inp = INPUTS[[i.name for i in INPUTS].index(f"{command} --"
                                                f"{'trace' if command == 'doctor' else 'replay'}")]
    line = refused(inp, path, work, store)
    assert needle in line, line


# -- a few as real processes: the installed command line, not the test runner -------------------

def _run(*args: str, timeout: float = 60) -> subprocess.CompletedProcess[str]:
    return gpuaudit(*args, timeout=timeout, columns=100, stdin=subprocess.DEVNULL)


@pytest.mark.parametrize("argv", [
    ["report", "{}", "--md", "-"],
    ["doctor", "--profile", "{}"],
    ["predict", "{}", "--gpus", "2"],
    ["serve", "--replay", "{}", "--port", "0"],
])
def test_a_fifo_given_to_the_real_command_is_refused_at_once(argv, tmp_path):
    path = damage.fifo(tmp_path, "run.json")
    proc = _run(*[a.replace("{}", str(path)) for a in argv])
    assert proc.returncode == 2 and "FIFO" in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1 and "Traceback" not in proc.stderr


@pytest.mark.parametrize("case", ["no frames", "interval 'soon'", "a frame a year ahead",
                                  "frames going back"])
def test_serve_refuses_a_trace_it_cannot_replay_before_serving(case, tmp_path):
    doc, needle = BAD_TRACES[case]
    path = tmp_path / "t.json"
    path.write_text(json.dumps(doc))
    from gpuaudit.store import Store

    Store(tmp_path / "s.db").close()
    proc = _run("serve", "--replay", str(path), "--port", "0", "--db", str(tmp_path / "s.db"),
                timeout=60)
    assert proc.returncode == 2 and needle in proc.stderr, proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


# -- what the store gives back ---------------------------------------------------------------------

@pytest.mark.parametrize(("column", "value"), [
    ("power_w", "garbage"), ("utilization_gpu_pct", "-40"), ("sm_clock_mhz", "1e30"),
    ("gpu", "-3"), ("memory_used_bytes", "lots"),
])
def test_a_damaged_telemetry_row_in_the_store_is_one_line(column, value, tmp_path):
    """Text in a number's column, a reading no GPU has: `report` names the store and the
    field, exit 2, and the store is left as it was."""
    import sqlite3
    from datetime import timedelta

    from gpuaudit.model import GpuSample, Sample
    from gpuaudit.store import Store

    db = tmp_path / "s.db"
    result = runner.invoke(app, ["inspect", "--from", str(SNAPSHOT), "--save", "--json",
                                 "--db", str(db)])
    run_id = json.loads(result.stdout)["id"]
    with Store(db) as store:
        stored = store.get(run_id)
        store.save_sample(Sample(time=stored.started_at + timedelta(seconds=1),
                                 hostname=stored.machine.host.hostname, interval_s=1.0,
                                 gpus=(GpuSample(index=0, power_w=300.0,
                                                 utilization_gpu_pct=50.0,
                                                 sm_clock_mhz=1980, memory_used_bytes=1),)))
    with sqlite3.connect(db) as conn:
        conn.execute(f"UPDATE telemetry_raw SET {column} = ?", (value,))
    before = damage.checksum(db)
    with damage.deadline(DEADLINE_S):
        result = runner.invoke(app, ["report", run_id, "--md", "-", "--db", str(db)],
                               env={"COLUMNS": "100"})
    lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
    assert result.exit_code == 2 and len(lines) == 1, result.output
    assert "reading telemetry" in lines[0] and "damaged row" in lines[0], lines[0]
    assert damage.checksum(db) == before
