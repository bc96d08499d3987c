"""The shipped Grafana dashboard: valid, on our metric names only, every panel wired up."""

from __future__ import annotations

import json
import re
import shutil
import socket
import subprocess
import time
import urllib.parse
import urllib.request
from datetime import datetime, timedelta, timezone
from importlib import resources

import pytest
import yaml

from gpuaudit.model import GpuSample, ProcessSample, Sample, XidEvent
from gpuaudit.telemetry.metrics import IdleState, XidTally, metric_names, series

DS_UID = "${datasource}"
# PromQL's functions (Prometheus 2.x) and the words that are not metric names.
FUNCTIONS = {
    "abs", "absent", "absent_over_time", "avg", "avg_over_time", "bottomk", "ceil",
    "changes", "clamp", "clamp_max", "clamp_min", "count", "count_over_time", "count_values",
    "day_of_month", "delta", "deriv", "exp", "floor", "group", "histogram_quantile",
    "holt_winters", "idelta", "increase", "irate", "label_join", "label_replace",
    "last_over_time", "ln", "log2", "log10", "max", "max_over_time", "min", "min_over_time",
    "predict_linear", "quantile", "quantile_over_time", "rate", "resets", "round", "scalar",
    "sgn", "sort", "sort_desc", "sqrt", "stddev", "stddev_over_time", "stdvar", "sum",
    "sum_over_time", "time", "timestamp", "topk", "vector",
}
KEYWORDS = {"by", "without", "on", "ignoring", "group_left", "group_right", "bool", "and",
            "or", "unless", "offset", "inf", "nan"}
GRAFANA_BUILTINS = {"__range", "__rate_interval", "__interval"}


def dashboard() -> dict:
    path = resources.files("gpuaudit") / "data" / "grafana-dashboard.json"
    return json.loads(path.read_text(encoding="utf-8"))


def panels(doc: dict) -> list[dict]:
    out = []
    for p in doc["panels"]:
        out.append(p)
        out += p.get("panels", [])  # a collapsed row keeps its panels inside it
    return out


def queries(doc: dict) -> list[tuple[str, str]]:
    return [(p["title"], t["expr"]) for p in panels(doc) for t in p.get("targets", ())]


def metrics_in(expr: str) -> set[str]:
    """The metric names a PromQL expression reads (Grafana variables allowed)."""
    e = re.sub(r"\$\{?(\w+)\}?", " ", expr)
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', e)  # strings, label values
    e = re.sub(r"\{[^}]*\}", " ", e)  # label matchers
    e = re.sub(r"\[[^\]]*\]", " ", e)  # range selectors
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r"\b\d+(\.\d+)?([eE][+-]?\d+)?\b", " ", e)
    names = set()
    for m in re.finditer(r"[A-Za-z_:][A-Za-z0-9_:]*", e):
        word = m.group(0)
        if e[m.end():].lstrip().startswith("("):
            assert word in FUNCTIONS or word in KEYWORDS, f"unknown function {word}"
        elif word.lower() not in KEYWORDS:
            names.add(word)
    return names


def test_the_metric_name_reader_finds_names_and_nothing_else():
    expr = ('sum by (instance, gpu) (increase(gpuaudit_idle_seconds_total{gpu=~"$gpu", '
            'reason!="gpu_idle"}[$__range])) / 3.6e6 * $price_per_gpu_hour '
            "or on(gpu) DCGM_FI_DEV_GPU_UTIL")
    assert metrics_in(expr) == {"gpuaudit_idle_seconds_total", "DCGM_FI_DEV_GPU_UTIL"}
    assert metrics_in("time() - gpuaudit_xid_last_timestamp_seconds") == {
        "gpuaudit_xid_last_timestamp_seconds"}
    with pytest.raises(AssertionError, match="unknown function"):
        metrics_in("rated(gpuaudit_up[5m])")


def test_it_is_a_grafana_dashboard_with_datasource_instance_and_gpu_variables():
    doc = dashboard()
    assert 36 <= doc["schemaVersion"] <= 41 and doc["uid"] and doc["title"]
    variables = {v["name"]: v for v in doc["templating"]["list"]}
    ds = variables["datasource"]
    assert (ds["type"], ds["query"]) == ("datasource", "prometheus")
    for name in ("instance", "gpu"):
        v = variables[name]
        assert v["type"] == "query" and v["datasource"]["uid"] == DS_UID
        assert v["query"]["query"].startswith("label_values(gpuaudit_up")
        assert v["query"]["query"].endswith(f", {name})")
        assert v["multi"] and v["includeAll"]
    assert variables["price_per_gpu_hour"]["type"] == "textbox"


def test_every_panel_has_a_title_a_datasource_and_queries_on_our_metrics_only():
    doc = dashboard()
    known = set(metric_names())
    variables = {v["name"] for v in doc["templating"]["list"]} | GRAFANA_BUILTINS
    seen_titles = set()
    for p in panels(doc):
        assert p.get("title"), p
        assert p["title"] not in seen_titles, f"two panels titled {p['title']!r}"
        seen_titles.add(p["title"])
        if p["type"] == "row":
            assert not p.get("targets")
            continue
        assert p["datasource"] == {"type": "prometheus", "uid": DS_UID}, p["title"]
        assert p.get("targets"), p["title"]
        assert p.get("description"), p["title"]
        for t in p["targets"]:
            assert t["datasource"]["uid"] == DS_UID, p["title"]
            names = metrics_in(t["expr"])
            assert names, f"{p['title']}: {t['expr']} reads no metric"
            assert names <= known, f"{p['title']}: not ours: {sorted(names - known)}"
            used = set(re.findall(r"\$\{?(\w+)\}?", t["expr"]))
            assert used <= variables, f"{p['title']}: undefined {sorted(used - variables)}"
        refs = [t["refId"] for t in p["targets"]]
        assert len(refs) == len(set(refs)), p["title"]


# Each area the dashboard must show: a word of the panel's title → the metric it must read.
REQUIRED = {
    "utilization": "gpuaudit_gpu_utilization_ratio",
    "SM activity": "gpuaudit_sm_activity_ratio",
    "Tensor": "gpuaudit_tensor_activity_ratio",
    "Memory used": "gpuaudit_memory_used_bytes",
    "Power": "gpuaudit_power_watts",
    "Energy": "gpuaudit_energy_joules_total",
    "Temperature": "gpuaudit_temperature_celsius",
    "Clock events": "gpuaudit_clock_event_active",
    "XID": "gpuaudit_xid_errors_total",
    "ECC": "gpuaudit_ecc_uncorrected_errors_total",
    "Remapped rows": "gpuaudit_remapped_rows_uncorrectable",
    "Idle state": "gpuaudit_idle",
    "Idle time": "gpuaudit_idle_seconds_total",
}


@pytest.mark.parametrize(("word", "metric"), REQUIRED.items())
def test_the_named_panels_exist_and_read_their_metric(word, metric):
    found = [(title, expr) for title, expr in queries(dashboard()) if word in title]
    assert found, f"no panel titled with {word!r}"
    assert any(metric in metrics_in(expr) for _, expr in found), (word, found)


def test_panels_sit_on_the_grid_without_overlapping():
    ps = panels(dashboard())
    ids = [p["id"] for p in ps]
    assert len(ids) == len(set(ids))
    cells: dict[tuple[int, int], str] = {}
    for p in ps:
        g = p["gridPos"]
        assert g["x"] >= 0 and g["w"] > 0 and g["h"] > 0 and g["x"] + g["w"] <= 24, p["title"]
        for x in range(g["x"], g["x"] + g["w"]):
            for y in range(g["y"], g["y"] + g["h"]):
                assert (x, y) not in cells, f"{p['title']} overlaps {cells[(x, y)]}"
                cells[(x, y)] = p["title"]


def test_every_query_is_valid_promql(tmp_path):
    """promtool (Debian's prometheus package, as in CI) parses each query as a rule."""
    promtool = shutil.which("promtool")
    if promtool is None:
        pytest.skip("promtool is not installed")
    subs = {"$__range": "1h", "$__rate_interval": "1m", "$__interval": "1m",
            "$price_per_gpu_hour": "2.5", "$instance": ".*", "$gpu": ".*"}
    rules = []
    for i, (title, expr) in enumerate(queries(dashboard())):
        for var, value in subs.items():
            expr = expr.replace(var, value)
        assert "$" not in expr, (title, expr)
        rules.append({"record": f"dashboard:query_{i}", "expr": expr})
    path = tmp_path / "dashboard-queries.yml"
    path.write_text(yaml.safe_dump({"groups": [{"name": "dashboard", "rules": rules}]}))
    done = subprocess.run([promtool, "check", "rules", str(path)], capture_output=True,
                          text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules)} rules found" in done.stdout


# -- every query against a real Prometheus holding our exporter's series ---------------------

T_END = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(minutes=30)
STEP_S, TICKS = 30, 121  # an hour of samples


def _gpu(i: int, k: int) -> GpuSample:
    """A GPU with every reading there, so that every panel has something to show."""
    return GpuSample(
        index=i, uuid=f"GPU-{i}", name="NVIDIA H200", utilization_gpu_pct=90.0,
        utilization_memory_pct=30.0, memory_used_bytes=(40 + i) << 30,
        memory_total_bytes=140 << 30, power_w=500.0 + i, power_limit_w=700.0,
        energy_j=1e6 + 500.0 * STEP_S * k, temperature_gpu_c=60.0, temperature_memory_c=70.0,
        sm_clock_mhz=1980, memory_clock_mhz=3201, clock_event_reasons=("sw_power_cap",),
        pcie_rx_bytes_per_s=1e9, pcie_tx_bytes_per_s=2e9, nvlink_rx_bytes=k << 30,
        nvlink_tx_bytes=k << 30, ecc_corrected_volatile=k // 10, ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0, remapped_rows_correctable=1,
        remapped_rows_uncorrectable=0, remapping_pending=False, remapping_failed=False,
        sm_activity_pct=70.0, sm_occupancy_pct=40.0, tensor_activity_pct=50.0,
        dram_bandwidth_util_pct=35.0, fp64_activity_pct=0.0, fp32_activity_pct=5.0,
        fp16_activity_pct=1.0, gpm_pcie_rx_bytes_per_s=1e9, gpm_pcie_tx_bytes_per_s=2e9,
        gpm_nvlink_rx_bytes_per_s=1e10, gpm_nvlink_tx_bytes_per_s=1e10,
        processes=(ProcessSample(pid=100 + i, used_memory_bytes=40 << 30),),
        xid_events=((XidEvent(gpu=i, code=79, time=T_END),) if k == 60 and i == 1 else ()))


def _openmetrics() -> str:
    xids = XidTally()
    by_name: dict[str, list[str]] = {}
    for k in range(TICKS):
        t = T_END - timedelta(seconds=STEP_S * (TICKS - 1 - k))
        sample = Sample(time=t, hostname="h1", interval_s=STEP_S, gpus=(_gpu(0, k), _gpu(1, k)))
        xids.add(sample)
        idle = {0: IdleState(idle=k > 60, idle_seconds_total=max(0, k - 40) * STEP_S),
                1: IdleState(idle=False, idle_seconds_total=0.0)}
        for s in series(sample, xids, idle):
            labels = ",".join(f'{key}="{value}"' for key, value in
                              (*s.labels, ("instance", "h1:9835"), ("job", "gpuaudit")))
            by_name.setdefault(s.name, []).append(f"{s.name}{{{labels}}} {s.value} "
                                                   f"{t.timestamp():.3f}")
    # One family after another, each series' samples in time order; no TYPE: all untyped.
    lines = [line for name in sorted(by_name) for line in sorted(
        by_name[name], key=lambda x: (x.rsplit(" ", 2)[0], float(x.rsplit(" ", 1)[1])))]
    return "\n".join([*lines, "# EOF", ""])


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _query(port: int, expr: str, at: datetime) -> dict:
    url = (f"http://127.0.0.1:{port}/api/v1/query?"
           + urllib.parse.urlencode({"query": expr, "time": f"{at.timestamp():.3f}"}))
    with urllib.request.urlopen(url, timeout=10) as r:
        return json.loads(r.read())


def test_every_query_returns_data_from_a_real_prometheus(tmp_path):
    prometheus, promtool = shutil.which("prometheus"), shutil.which("promtool")
    if prometheus is None or promtool is None:
        pytest.skip("prometheus/promtool are not installed")
    (tmp_path / "series.om").write_text(_openmetrics())
    data = tmp_path / "data"
    subprocess.run([promtool, "tsdb", "create-blocks-from", "openmetrics", "-q",
                    str(tmp_path / "series.om"), str(data)], check=True, timeout=120,
                   capture_output=True)
    (tmp_path / "prometheus.yml").write_text("global: {}\n")
    port = _free_port()
    log = (tmp_path / "prometheus.log").open("w")
    server = subprocess.Popen(
        [prometheus, f"--config.file={tmp_path / 'prometheus.yml'}",
         f"--storage.tsdb.path={data}", f"--web.listen-address=127.0.0.1:{port}"],
        stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                with urllib.request.urlopen(f"http://127.0.0.1:{port}/-/ready", timeout=2):
                    break
            except OSError:
                assert server.poll() is None, (tmp_path / "prometheus.log").read_text()
                assert time.monotonic() < deadline, "prometheus did not start"
                time.sleep(0.2)
        subs = {"$__range": "1h", "$__rate_interval": "2m", "$price_per_gpu_hour": "2.5",
                "$instance": ".*", "$gpu": ".*"}
        empty = []
        for title, expr in queries(dashboard()):
            for var, value in subs.items():
                expr = expr.replace(var, value)
            got = _query(port, expr, T_END)
            assert got["status"] == "success", (title, expr, got)
            if not got["data"]["result"]:
                empty.append((title, expr))
        assert empty == []
        # Spot checks that the arithmetic is what the titles say.
        kwh = _query(port, 'sum(increase(gpuaudit_energy_joules_total[1h])) / 3.6e6', T_END)
        # Two GPUs at 500 J/s for an hour: 1 kWh (increase extrapolates to the window edges).
        assert float(kwh["data"]["result"][0]["value"][1]) == pytest.approx(1.0, rel=0.02)
    finally:
        server.terminate()
        server.wait(timeout=30)
        log.close()
