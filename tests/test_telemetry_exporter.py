"""The Prometheus exporter: exact exposition of a constructed sample, dcgm-exporter names and
units, XID counters over samples, and scrapes over real HTTP on 127.0.0.1."""

from __future__ import annotations

import inspect
import re
import socket
import urllib.error
import urllib.request
from datetime import timedelta
from pathlib import Path

import pytest
from prometheus_client.openmetrics.parser import (
    text_string_to_metric_families as openmetrics_families,
)
from prometheus_client.parser import text_string_to_metric_families

from gpuaudit.errors import BadInputError
from gpuaudit.model import XidEvent
from gpuaudit.telemetry import exporter, metrics
from gpuaudit.telemetry.metrics import IdleState, XidTally
from gpuaudit.telemetry.state import Latest, MonitorState
from tests.support.telemetry import T0, latest_for, two_gpus

DOC = Path(__file__).parent.parent / "docs" / "monitor-exporter.md"


L0 = '{gpu="0",hostname="node-7",model="NVIDIA H200",uuid="GPU-0a"}'
L1 = '{gpu="1",hostname="node-7",model="NVIDIA H200",uuid="GPU-1b"}'

# Every sample line, by hand from the GpuSample above: base units (bytes, hertz, joules),
# percentages as 0-1 ratios, and nothing at all for a reading that is None (no NaN, no -1).
EXPECTED_SAMPLES = """\
gpuaudit_up{L0} 1.0
gpuaudit_up{L1} 0.0
gpuaudit_gpu_utilization_ratio{L0} 0.375
gpuaudit_memory_utilization_ratio{L0} 0.12
gpuaudit_memory_used_bytes{L0} 3.758096384e+09
gpuaudit_memory_total_bytes{L0} 1.50754820096e+11
gpuaudit_power_watts{L0} 312.25
gpuaudit_power_limit_watts{L0} 700.0
gpuaudit_energy_joules_total{L0} 1234.5
gpuaudit_temperature_celsius{L0} 41.0
gpuaudit_sm_clock_hertz{L0} 1.98e+09
gpuaudit_memory_clock_hertz{L0} 2.619e+09
gpuaudit_pcie_link_generation{L0} 4.0
gpuaudit_pcie_link_generation_max{L0} 5.0
gpuaudit_pcie_link_width{L0} 16.0
gpuaudit_pcie_link_width_max{L0} 16.0
gpuaudit_pcie_rx_bytes_per_second{L0} 1.5e+09
gpuaudit_pcie_tx_bytes_per_second{L0} 2.5e+08
gpuaudit_ecc_corrected_errors_total{L0} 3.0
gpuaudit_ecc_uncorrected_errors_total{L0} 0.0
gpuaudit_ecc_uncorrected_errors_lifetime_total{L0} 1.0
gpuaudit_remapped_rows_correctable{L0} 2.0
gpuaudit_remapped_rows_uncorrectable{L0} 0.0
gpuaudit_remapping_pending{L0} 0.0
gpuaudit_remapping_failed{L0} 0.0
gpuaudit_sm_activity_ratio{L0} 0.55
gpuaudit_tensor_activity_ratio{L0} 0.25
gpuaudit_dram_bandwidth_utilization_ratio{L0} 0.08
gpuaudit_fp32_activity_ratio{L0} 0.1
gpuaudit_gpm_pcie_rx_bytes_per_second{L0} 1.25e+09
gpuaudit_processes{L0} 2.0
gpuaudit_clock_event_active{L0R} 1.0
gpuaudit_xid_errors_total{L0X} 1.0
gpuaudit_xid_last_timestamp_seconds{L0X} 1.7776368e+09
gpuaudit_idle{L0} 1.0
gpuaudit_idle_seconds_total{L0} 90.5
""".replace("{L0R}", L0.replace('uuid=', 'reason="sw_power_cap",uuid=')) \
    .replace("{L0X}", L0.replace('"GPU-0a"', '"GPU-0a",xid="79"')) \
    .replace("{L0}", L0).replace("{L1}", L1)

# The families present, in order, with the kind each TYPE line must say.
EXPECTED_TYPES = """\
gpuaudit_up gauge
gpuaudit_gpu_utilization_ratio gauge
gpuaudit_memory_utilization_ratio gauge
gpuaudit_memory_used_bytes gauge
gpuaudit_memory_total_bytes gauge
gpuaudit_power_watts gauge
gpuaudit_power_limit_watts gauge
gpuaudit_energy_joules_total counter
gpuaudit_temperature_celsius gauge
gpuaudit_sm_clock_hertz gauge
gpuaudit_memory_clock_hertz gauge
gpuaudit_pcie_link_generation gauge
gpuaudit_pcie_link_generation_max gauge
gpuaudit_pcie_link_width gauge
gpuaudit_pcie_link_width_max gauge
gpuaudit_pcie_rx_bytes_per_second gauge
gpuaudit_pcie_tx_bytes_per_second gauge
gpuaudit_ecc_corrected_errors_total counter
gpuaudit_ecc_uncorrected_errors_total counter
gpuaudit_ecc_uncorrected_errors_lifetime_total counter
gpuaudit_remapped_rows_correctable gauge
gpuaudit_remapped_rows_uncorrectable gauge
gpuaudit_remapping_pending gauge
gpuaudit_remapping_failed gauge
gpuaudit_sm_activity_ratio gauge
gpuaudit_tensor_activity_ratio gauge
gpuaudit_dram_bandwidth_utilization_ratio gauge
gpuaudit_fp32_activity_ratio gauge
gpuaudit_gpm_pcie_rx_bytes_per_second gauge
gpuaudit_processes gauge
gpuaudit_clock_event_active gauge
gpuaudit_xid_errors_total counter
gpuaudit_xid_last_timestamp_seconds gauge
gpuaudit_idle gauge
gpuaudit_idle_seconds_total counter
"""


def standard_latest() -> Latest:
    sample = two_gpus(xids=(XidEvent(gpu=0, code=79, time=T0),))
    return latest_for(sample, idle={0: IdleState(idle=True, idle_seconds_total=90.5)})


def split(text: str) -> tuple[str, str, dict[str, str]]:
    samples, types, helps = [], [], {}
    for line in text.splitlines(keepends=True):
        if line.startswith("# TYPE "):
            types.append(line[len("# TYPE "):])
        elif line.startswith("# HELP "):
            name, _, doc = line[len("# HELP "):].rstrip("\n").partition(" ")
            helps[name] = doc
        else:
            samples.append(line)
    return "".join(samples), "".join(types), helps


def test_exposition_is_exactly_the_expected_text():
    samples, types, helps = split(exporter.render(standard_latest()).decode())
    assert samples == EXPECTED_SAMPLES
    assert types == EXPECTED_TYPES
    # HELP from metrics' definitions, so the dashboards' tooltips and our docs agree.
    kinds = metrics.metric_names()
    assert set(helps) <= set(kinds)
    for m in metrics.GPU_METRICS:
        if m.full_name in helps:
            assert helps[m.full_name] == m.help
    assert helps["gpuaudit_xid_errors_total"] == metrics.EXTRA_METRICS["xid_errors_total"][1]


def test_a_gpu_that_errors_has_up_0_and_nothing_else():
    fams = text_string_to_metric_families(exporter.render(standard_latest()).decode())
    gpu1 = [(s.name, s.value) for f in fams for s in f.samples if s.labels.get("gpu") == "1"]
    assert gpu1 == [("gpuaudit_up", 0.0)]


def test_missing_readings_are_absent_not_sentinels():
    text = exporter.render(standard_latest()).decode()
    for absent in ("gpuaudit_memory_temperature_celsius", "gpuaudit_nvlink_rx_bytes_total",
                   "gpuaudit_sm_occupancy_ratio", "gpuaudit_fp64_activity_ratio",
                   "gpuaudit_gpm_nvlink_rx_bytes_per_second"):
        assert absent not in text
    values = [s.value for f in text_string_to_metric_families(text) for s in f.samples]
    assert all(v == v and 0 <= v < 1e12 for v in values)  # no NaN, no -1, no 2**63 sentinel


def test_every_counter_name_ends_in_total():
    # prometheus_client appends `_total` to a counter's samples; names that already end in it
    # come out unchanged, which is what lets rules and dashboards use metrics' names verbatim.
    for name, kind in metrics.metric_names().items():
        if kind == "counter":
            assert name.endswith("_total"), name
    parsed = {s.name for f in text_string_to_metric_families(
        exporter.render(standard_latest()).decode()) for s in f.samples}
    assert parsed <= set(metrics.metric_names())
    assert "gpuaudit_energy_joules_total" in parsed
    assert "gpuaudit_energy_joules_total_total" not in parsed


def test_nothing_is_exposed_before_the_first_sample():
    assert exporter.render(Latest()) == b""


def test_dcgm_names_units_and_labels():
    text = exporter.render(standard_latest(), dcgm_names=True).decode()
    dcgm = {(s.name, s.labels["gpu"]): (s.value, s.labels)
            for f in text_string_to_metric_families(text) for s in f.samples
            if s.name.startswith("DCGM_")}
    labels = {"gpu": "0", "UUID": "GPU-0a", "modelName": "NVIDIA H200", "Hostname": "node-7",
              "device": "nvidia0"}
    values = {name: v for (name, _), (v, lab) in dcgm.items()}
    assert all(lab == labels for _, lab in dcgm.values())
    assert values["DCGM_FI_DEV_FB_USED"] == 3584.0  # MiB
    assert values["DCGM_FI_DEV_GPU_UTIL"] == 37.5  # %
    assert values["DCGM_FI_DEV_MEM_COPY_UTIL"] == 12.0  # %
    assert values["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION"] == 1234500.0  # mJ
    assert values["DCGM_FI_DEV_SM_CLOCK"] == 1980.0  # MHz
    assert values["DCGM_FI_DEV_MEM_CLOCK"] == 2619.0
    assert values["DCGM_FI_DEV_POWER_USAGE"] == 312.25  # W
    assert values["DCGM_FI_DEV_GPU_TEMP"] == 41.0  # °C
    assert values["DCGM_FI_DEV_PCIE_LINK_GEN"] == 4.0
    assert values["DCGM_FI_PROF_SM_ACTIVE"] == 0.55  # DCGM's profiling fields are 0-1 too
    assert values["DCGM_FI_DEV_XID_ERRORS"] == 79.0  # the last code, dcgm-exporter's gauge
    assert "DCGM_FI_DEV_MEMORY_TEMP" not in values  # missing stays missing
    assert all(gpu == "0" for _, gpu in dcgm)  # the GPU off the bus has no DCGM series
    # The names stay exactly dcgm-exporter's: a counter TYPE would make the client add _total.
    assert "DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION_total" not in text
    assert "# TYPE DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION untyped" in text
    # ...and ours are all still there.
    assert split(text)[0].startswith(EXPECTED_SAMPLES)


def test_dcgm_names_are_off_by_default():
    assert b"DCGM_" not in exporter.render(standard_latest())


def xid_values(latest: Latest) -> dict[tuple[str, str], float]:
    fams = text_string_to_metric_families(exporter.render(latest, dcgm_names=True).decode())
    return {(s.name, s.labels.get("xid", "")): s.value for f in fams for s in f.samples
            if "XID" in s.name or "xid" in s.name}


def test_xid_counter_counts_every_event_over_two_samples():
    t1 = T0 + timedelta(seconds=1)
    tally = XidTally()
    latest = Latest()
    first = two_gpus(xids=(XidEvent(gpu=0, code=79, time=T0),))
    tally.add(first)
    latest.set(MonitorState(sample=first, xids=tally))
    assert xid_values(latest) == {
        ("gpuaudit_xid_errors_total", "79"): 1.0,
        ("gpuaudit_xid_last_timestamp_seconds", "79"): T0.timestamp(),
        ("DCGM_FI_DEV_XID_ERRORS", ""): 79.0,
    }
    # The same code again (invisible in dcgm-exporter's last-code gauge), then a new one.
    second = two_gpus(xids=(XidEvent(gpu=0, code=79, time=t1),
                            XidEvent(gpu=0, code=48, time=t1 + timedelta(milliseconds=500))))
    tally.add(second)
    latest.set(MonitorState(sample=second, xids=tally))
    assert xid_values(latest) == {
        ("gpuaudit_xid_errors_total", "48"): 1.0,
        ("gpuaudit_xid_errors_total", "79"): 2.0,
        ("gpuaudit_xid_last_timestamp_seconds", "48"): t1.timestamp() + 0.5,
        ("gpuaudit_xid_last_timestamp_seconds", "79"): t1.timestamp(),
        ("DCGM_FI_DEV_XID_ERRORS", ""): 48.0,
    }


# -- over HTTP ------------------------------------------------------------------------------

def get(url: str, accept: str | None = None) -> tuple[str, str]:
    req = urllib.request.Request(url, headers={"Accept": accept} if accept else {})
    with urllib.request.urlopen(req, timeout=10) as resp:
        return resp.headers["Content-Type"], resp.read().decode()


def test_scrape_over_http_on_loopback():
    latest = standard_latest()
    with exporter.serve(latest, host="127.0.0.1", port=0) as srv:
        assert srv.host == "127.0.0.1" and srv.port > 0
        assert srv.url == f"http://127.0.0.1:{srv.port}/metrics"
        ctype, body = get(srv.url)
        assert ctype.startswith("text/plain; version=0.0.4")
        assert body == exporter.render(latest).decode()
        fams = {f.name: f for f in text_string_to_metric_families(body)}
        used = fams["gpuaudit_memory_used_bytes"].samples
        assert [(s.labels, s.value) for s in used] == [(
            {"gpu": "0", "uuid": "GPU-0a", "model": "NVIDIA H200", "hostname": "node-7"},
            3758096384.0)]
        # The collector reads the box at scrape time: a new state shows on the next scrape.
        changed = two_gpus().model_copy(update={"hostname": "node-8"})
        latest.set(MonitorState(sample=changed))
        _, body = get(srv.url)
        assert 'hostname="node-8"' in body and "node-7" not in body
    # close() frees the port: a new server can take it at once.
    with exporter.serve(latest, port=srv.port) as again:
        assert again.port == srv.port


def test_openmetrics_scrape_as_prometheus_asks():
    # Prometheus asks for OpenMetrics first; its counters and untyped DCGM series must parse.
    accept = ("application/openmetrics-text;version=1.0.0,application/openmetrics-text;"
              "version=0.0.1;q=0.75,text/plain;version=0.0.4;q=0.5,*/*;q=0.1")
    with exporter.serve(standard_latest(), port=0, dcgm_names=True) as srv:
        ctype, body = get(srv.url, accept)
    assert ctype.startswith("application/openmetrics-text")
    samples = {(s.name, s.labels.get("gpu"), s.labels.get("xid")): s.value
               for f in openmetrics_families(body) for s in f.samples}
    assert samples["gpuaudit_energy_joules_total", "0", None] == 1234.5
    assert samples["gpuaudit_xid_errors_total", "0", "79"] == 1.0
    assert samples["DCGM_FI_DEV_TOTAL_ENERGY_CONSUMPTION", "0", None] == 1234500.0
    assert samples["gpuaudit_up", "1", None] == 0.0


def test_scrape_of_chosen_names():
    with exporter.serve(standard_latest(), port=0) as srv:
        _, body = get(srv.url + "?name[]=gpuaudit_up&name[]=gpuaudit_energy_joules_total")
    names = sorted({s.name for f in text_string_to_metric_families(body) for s in f.samples})
    assert names == ["gpuaudit_energy_joules_total", "gpuaudit_up"]


def test_defaults_listen_on_loopback_9835():
    params = inspect.signature(exporter.serve).parameters
    assert params["host"].default == "127.0.0.1"
    assert params["port"].default == 9835
    assert params["dcgm_names"].default is False


def test_port_in_use_is_bad_input_with_one_line():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        with pytest.raises(BadInputError) as err:
            exporter.serve(Latest(), port=port)
    msg = str(err.value)
    assert msg == f"cannot listen on 127.0.0.1:{port}: Address already in use"
    assert err.value.exit_code == 2


@pytest.mark.parametrize(("host", "port", "says"), [
    ("not a host", 9835, "not a local address"),
    ("127.0.0.1", 65536, "the port must be 0-65535"),
    ("127.0.0.1", -1, "the port must be 0-65535"),
    ("192.0.2.1", 0, "Cannot assign requested address"),  # TEST-NET-1: never ours
])
def test_bad_listen_address_is_bad_input(host: str, port: int, says: str):
    with pytest.raises(BadInputError) as err:
        exporter.serve(Latest(), host=host, port=port)
    msg = str(err.value)
    assert msg.startswith(f"cannot listen on {host}:{port}: ") and says in msg
    assert "\n" not in msg


def test_closed_server_refuses_connections():
    srv = exporter.serve(standard_latest(), port=0)
    url = srv.url
    get(url)
    srv.close()
    with pytest.raises(urllib.error.URLError):
        get(url)


# -- the doc's metric table ------------------------------------------------------------------

def doc_table() -> list[list[str]]:
    """Rows of the metric table in docs/monitor-exporter.md (the one whose header starts
    `| Name |`), as stripped cells without backticks."""
    rows, inside = [], False
    for line in DOC.read_text(encoding="utf-8").splitlines():
        if line.startswith("| Name |"):
            inside = True
            continue
        if inside and line.startswith("|---"):
            continue
        if inside and line.startswith("|"):
            rows.append([c.strip().strip("`") for c in line.strip().strip("|").split("|")])
        elif inside:
            break
    return rows


def conversion_factor(text: str) -> float:
    """`× 100`, `÷ 2^20`, `÷ 10^6`, `=`: the factor from our unit to dcgm-exporter's."""
    if text.startswith("="):
        return 1.0
    m = re.match(r"([×÷]) (\d+)(?:\^(\d+))?", text)
    assert m, f"cannot read the conversion {text!r}"
    n = float(int(m[2]) ** int(m[3] or 1))
    return n if m[1] == "×" else 1 / n


def test_doc_table_lists_exactly_our_metrics():
    rows = doc_table()
    assert rows, f"no metric table in {DOC}"
    names = [r[0] for r in rows]
    assert len(names) == len(set(names))
    assert set(names) == set(metrics.metric_names())
    kinds = metrics.metric_names()
    defs = {m.full_name: m for m in metrics.GPU_METRICS}
    for name, kind, _unit, help_, dcgm, conversion in rows:
        assert kind == kinds[name], name
        if name in defs:
            m = defs[name]
            assert help_ == m.help, name
            assert dcgm == (m.dcgm or "—"), name
            if m.dcgm:
                assert conversion_factor(conversion) == pytest.approx(m.dcgm_scale), name
        else:
            assert help_ == metrics.EXTRA_METRICS[name.removeprefix(metrics.PREFIX)][1], name
    assert metrics.DCGM_XID_LAST_CODE in DOC.read_text(encoding="utf-8")
