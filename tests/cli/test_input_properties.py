"""Properties over what users hand gpuaudit: the file loaders (catalog CSV, alert rules,
telemetry traces, snapshots) and the command line (numbers, sizes, durations through
typer's CliRunner). Each input is accepted and read, or refused with BadInputError / one line
and exit 2 — never a traceback."""

from __future__ import annotations

import json
import threading
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from typer.testing import CliRunner

from gpuaudit.cli.app import app
from gpuaudit.errors import BadInputError
from tests.support import damage

FIX = Path(__file__).parents[1] / "fixtures"
TRACE = json.loads((FIX / "telemetry" / "h200-1gpu-idle.json").read_text())
SNAPSHOT = json.loads((FIX / "h200-1gpu" / "inspect.json").read_text())
LOADERS = settings(max_examples=60, deadline=None,
                   suppress_health_check=[HealthCheck.function_scoped_fixture,
                                          HealthCheck.too_slow])
CLI = settings(max_examples=40, deadline=None,
               suppress_health_check=[HealthCheck.function_scoped_fixture,
                                      HealthCheck.too_slow])

junk = st.one_of(st.none(), st.booleans(), st.integers(-2**70, 2**70),
                 st.floats(allow_nan=True, allow_infinity=True), st.text(max_size=12),
                 st.lists(st.integers(), max_size=3), st.dictionaries(st.text(max_size=4),
                                                                      st.integers(), max_size=2))


def _paths(doc, prefix=()):
    """Every (path, value) in a JSON document."""
    yield prefix, doc
    if isinstance(doc, dict):
        for k, v in doc.items():
            yield from _paths(v, (*prefix, k))
    elif isinstance(doc, list):
        for i, v in enumerate(doc):
            yield from _paths(v, (*prefix, i))


def _mutate(doc, picks: list[tuple[int, object]]):
    """The document with the values at a few of its paths (every one, lists' items all)
    replaced by junk."""
    return damage.mutated(doc, picks, among=[p for p, _ in _paths(doc) if p])


mutations = st.lists(st.tuples(st.integers(0, 10**6), junk), min_size=1, max_size=4)


# -- file loaders ----------------------------------------------------------------------------------

@LOADERS
@given(picks=mutations)
def test_a_damaged_telemetry_trace_replays_or_is_refused(tmp_path_factory, picks):
    from gpuaudit.telemetry.setup import MonitorOptions, open_monitor

    path = tmp_path_factory.mktemp("trace") / "t.json"
    path.write_text(json.dumps(_mutate(TRACE, picks)))
    try:
        with open_monitor(MonitorOptions(replay=path, evaluate_rules=True)) as session:
            for _ in session.ticks(threading.Event(), 3):
                pass
    except BadInputError as exc:
        assert "\n" not in str(exc)


@LOADERS
@given(picks=mutations)
def test_a_damaged_snapshot_loads_or_is_refused(picks):
    from gpuaudit.inspect import check_machine
    from gpuaudit.model.schema import load_run

    try:
        run = load_run(json.dumps(_mutate(SNAPSHOT, picks)), origin="snapshot")
    except BadInputError as exc:
        assert "\n" not in str(exc)
        return
    if run.machine is not None:
        check_machine(run.machine)


@LOADERS
@given(data=st.binary(max_size=400))
def test_any_bytes_as_a_file(tmp_path_factory, data):
    from gpuaudit.cost.catalog import read_catalog_file
    from gpuaudit.hw.telemetry_trace import TraceReplay
    from gpuaudit.inspect import read_snapshot
    from gpuaudit.telemetry.rules import load_rules

    path = tmp_path_factory.mktemp("bytes") / "f"
    path.write_bytes(data)
    for load in (read_catalog_file, TraceReplay.from_file, read_snapshot, load_rules):
        try:
            load(path)
        except BadInputError as exc:
            assert "\n" not in str(exc)


CATALOG_HEADER = ["provider", "instance_type", "region", "gpu_model", "gpu_count", "currency",
                  "on_demand_price_per_hour", "spot_price_per_hour", "billing", "source",
                  "price_date"]
cell = st.one_of(st.text(alphabet=st.characters(blacklist_categories=["Cs"],
                                                blacklist_characters="\x00"), max_size=10),
                 st.sampled_from(["inf", "nan", "-1", "0", "1e308", "2.5", "8", "USD", "XYZ",
                                  "h200-sxm", "second", "2026-01-01", "2026-13-01", '"', ""]))


@LOADERS
@given(header=st.lists(st.sampled_from(CATALOG_HEADER), min_size=2, max_size=14),
       rows=st.lists(st.lists(cell, min_size=0, max_size=14), max_size=6))
def test_a_generated_catalog_loads_or_is_refused(tmp_path_factory, header, rows):
    """Duplicated columns are refused, bad rows become problems, every offer kept is sane."""
    import csv
    import math

    from gpuaudit.cost.catalog import read_catalog_file, validate

    path = tmp_path_factory.mktemp("cat") / "c.csv"
    with path.open("w", newline="") as fh:
        writer = csv.writer(fh)
        writer.writerow(header)
        writer.writerows(rows)
    try:
        catalog = read_catalog_file(path)
    except BadInputError as exc:
        assert "\n" not in str(exc)
        if len(set(header)) < len(header):
            assert "twice" in str(exc) or "header" in str(exc)
        return
    assert len(set(header)) == len(header)  # a duplicated column is never silently taken
    for offer in catalog.offers:
        for price in (offer.on_demand_price_per_hour, offer.spot_price_per_hour):
            assert price is None or (math.isfinite(price) and price >= 0)
        assert offer.gpu_count >= 1
    validate(catalog)


expr = st.recursive(
    st.sampled_from(["gpuaudit_gpu_temperature_celsius", "1", "2.5", "up", "time()"]),
    lambda inner: st.one_of(
        st.builds(lambda a: f"({a})", inner), st.builds(lambda a: f"-{a}", inner),
        st.builds(lambda a, op, b: f"{a} {op} {b}", inner,
                  st.sampled_from(["+", "*", ">", "and", "/"]), inner),
        st.builds(lambda a: f"avg_over_time({a}[5m])", st.just("up")),
        st.builds(lambda a: f"max({a})", inner)),
    max_leaves=30)


@LOADERS
@given(e=st.one_of(expr, st.text(max_size=30), st.integers(1, 3000).map(
    lambda n: "(" * n + "1" + ")" * n)), duration=st.one_of(st.just("5m"), st.text(max_size=6)))
def test_a_generated_rule_file_loads_or_is_refused(e, duration):
    from gpuaudit.telemetry.rules import parse_rules

    text = ("groups:\n- name: g\n  rules:\n  - alert: A\n    expr: " + json.dumps(e)
            + "\n    for: " + json.dumps(duration) + "\n")
    try:
        parse_rules(text, "r.yml")
    except BadInputError as exc:
        assert "\n" not in str(exc) and str(exc).startswith("r.yml:")


# -- the command line ----------------------------------------------------------------------------

runner = CliRunner()
numberish = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.integers(-10**30, 10**30).map(str),
    st.from_regex(r"\A-?[0-9]{0,4}(\.[0-9]{0,3})?([eE][+-]?[0-9]{1,4})?[%a-zA-Z]{0,3}\Z"),
    st.text(max_size=8))


def invoke(*args: str):
    result = runner.invoke(app, list(args), env={"COLUMNS": "120"})
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        repr(result.exception)
    if result.exit_code == 2:
        lines = [ln for ln in result.stderr.splitlines() if ln.strip()]
        assert len(lines) == 1 and lines[0].startswith("gpuaudit: error: "), result.stderr
    return result


@CLI
@given(option=st.sampled_from(["--years", "--rate-pct", "--residual-pct", "--pue",
                               "--kwh-price", "--utilization", "--maintenance-pct",
                               "--gpus", "--capex", "--power-w"]), value=numberish)
def test_cost_tco_numbers(option, value):
    args = {"--capex": "250000", "--power-w": "8000"}
    args[option] = value
    result = invoke("cost", "tco", *[x for kv in args.items() for x in kv], "--json")
    assert result.exit_code in (0, 2), result.output
    if result.exit_code == 0:
        doc = json.loads(result.stdout)
        assert doc["annual_cost"] >= 0


@CLI
@given(params=numberish, tokens=numberish, deadline=st.one_of(st.none(), numberish),
       layers=st.one_of(st.none(), numberish))
def test_recommend_train_quantities(monkeypatch, params, tokens, deadline, layers):
    from gpuaudit.cli import recommend as cli
    from gpuaudit.model.cost import Offer

    offer = Offer(provider="t", instance_type="8x", gpu_model="h100-sxm", gpu_count=8,
                  currency="USD", on_demand_price_per_hour=20.0, source="test",
                  price_date="2026-01-01")
    monkeypatch.setattr(cli, "load_offers", lambda path: [offer])
    args = ["recommend", "train", "--params", params, "--tokens", tokens, "--json"]
    if deadline is not None:
        args += ["--deadline", deadline]
    if layers is not None:
        args += ["--layers", layers]
    result = invoke(*args)
    assert result.exit_code in (0, 2), result.output


@CLI
@given(interval=numberish, count=st.one_of(st.just("1"), numberish), gpus=st.one_of(
    st.just("0"), st.text(max_size=5)))
def test_monitor_durations_and_gpus(interval, count, gpus):
    trace = str(FIX / "telemetry" / "h200-1gpu-idle.json")
    result = invoke("monitor", "--replay", trace, "--interval", interval, "--count", count,
                    "--gpus", gpus, "--no-export", "--no-history", "--no-rules", "--json")
    assert result.exit_code in (0, 2), result.output


@CLI
@given(sizes=numberish.flatmap(lambda a: st.one_of(st.just(a), numberish.map(
    lambda b: f"{a}:{b}"))), timeout=numberish)
def test_bench_sizes_and_timeout_are_read_before_any_benchmark(monkeypatch, sizes, timeout):
    import gpuaudit.bench.runner as runner_mod

    seen = {}

    def fake_run_bench(names, **kwargs):
        seen.update(kwargs)
        raise BadInputError("stopped before benchmarking (test)")

    monkeypatch.setattr(runner_mod, "run_bench", fake_run_bench)
    result = invoke("bench", "collectives", "--sizes", sizes, "--timeout", timeout,
                    "--no-save")
    assert result.exit_code == 2
    if seen:  # read: bounded, ordered, whole bytes
        lo, hi = seen["size_range"]
        assert 1 <= lo <= hi <= 1 << 40
        assert 1 <= seen["timeout_s"] <= 86400


@pytest.mark.parametrize("days", ["1e20", "0", "-5", "365.5", "x", "99999999999999999999"])
def test_catalog_stale_days_bounds(days):
    result = invoke("catalog", "validate", str(FIX / "catalogs" / "user.csv"), "--stale-days",
                    days)
    assert result.exit_code == 2 and "--stale-days" in result.stderr


def test_runs_limit_bounds(tmp_path):
    result = invoke("runs", "--limit", "99999999999999999999999", "--db",
                    f"sqlite:///{tmp_path / 'r.db'}")
    assert result.exit_code == 2 and "--limit" in result.stderr
