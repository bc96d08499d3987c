"""Alert rules: loading (errors name file, line and rule), the PromQL subset, Prometheus's
`for:` semantics, and every shipped rule against a planted fault and against healthy GPUs.
Where promtool is installed, Prometheus itself checks the same scenarios."""

from __future__ import annotations

import shutil
import subprocess
import textwrap
from dataclasses import dataclass, field
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest
import yaml

from gpuaudit.errors import BadInputError
from gpuaudit.hw.telemetry import Sampler
from gpuaudit.hw.telemetry_trace import TraceReplay
from gpuaudit.model import GpuSample, Sample, XidEvent
from gpuaudit.telemetry.metrics import Series, XidTally, metric_names, series
from gpuaudit.telemetry.promql import parse_duration, selectors
from gpuaudit.telemetry.rules import (
    Evaluation,
    Evaluator,
    load_rules,
    load_shipped_rules,
    parse_rules,
    shipped_rules_path,
)
from gpuaudit.telemetry.templates import (
    go_float,
    humanize,
    humanize1024,
    humanize_duration,
    parse_template,
)

FIXTURES = Path(__file__).parent / "fixtures"
PROMTOOL = shutil.which("promtool")
# Scenario times start at the Unix epoch: promtool's clock (and so its time()) starts at 0.
T0 = datetime(1970, 1, 1, tzinfo=timezone.utc)
GIB = 1 << 30
HOST = "node-a"


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- samples built from model records ----------------------------------------------------

def busy(index: int, **change) -> GpuSample:
    """A healthy H200 at work: 60 % utilization, 40 GiB held, 60 °C, full PCIe link."""
    fields = dict(
        index=index, uuid=f"GPU-{index:04d}", name="NVIDIA H200",
        utilization_gpu_pct=60.0, utilization_memory_pct=30.0,
        memory_used_bytes=40 * GIB, memory_total_bytes=141 * GIB,
        power_w=450.0, power_limit_w=700.0, energy_j=1e6, temperature_gpu_c=60.0,
        temperature_memory_c=55.0, sm_clock_mhz=1980, memory_clock_mhz=3201,
        clock_event_reasons=(), pcie_link_gen=5, pcie_link_gen_max=5, pcie_link_width=16,
        pcie_link_width_max=16, ecc_corrected_volatile=0, ecc_uncorrected_volatile=0,
        ecc_uncorrected_aggregate=0, remapped_rows_correctable=0,
        remapped_rows_uncorrectable=0, remapping_pending=False, remapping_failed=False,
        sm_activity_pct=55.0, tensor_activity_pct=20.0)
    fields.update(change)
    return GpuSample(**fields)


def idle_empty(index: int) -> GpuSample:
    """A healthy GPU nobody uses, as the real idle H200 reads: 615 MiB used, no GPM figure,
    clocks down for gpu_idle, and (as many boards do at idle) the PCIe link trained down."""
    return busy(index, utilization_gpu_pct=0.0, utilization_memory_pct=0.0,
                memory_used_bytes=644939776, power_w=75.0, temperature_gpu_c=31.0,
                sm_clock_mhz=345, clock_event_reasons=("gpu_idle",), pcie_link_gen=1,
                sm_activity_pct=None, tensor_activity_pct=None)


def lost(index: int) -> GpuSample:
    return GpuSample(index=index, uuid=f"GPU-{index:04d}", name="NVIDIA H200",
                     error="GPU is lost")


@dataclass
class Feed:
    """Drives an Evaluator the way the monitor does: Sample → XID tally → series → rules."""

    evaluator: Evaluator
    xids: XidTally = field(default_factory=XidTally)
    log: list[Evaluation] = field(default_factory=list)
    fed: list[tuple[datetime, list[Series]]] = field(default_factory=list)

    def __call__(self, seconds: float, *gpus: GpuSample) -> Evaluation:
        sample = Sample(time=at(seconds), hostname=HOST, interval_s=15.0, gpus=gpus)
        self.xids.add(sample)
        fed = list(series(sample, self.xids))
        self.fed.append((sample.time, fed))
        result = self.evaluator.evaluate(sample.time, fed)
        self.log.append(result)
        return result

    def transitions(self) -> list[tuple[str, str, str | None, float]]:
        return [(t.kind, t.alert.name, t.alert.labels.get("gpu"), (t.at - T0).total_seconds())
                for e in self.log for t in e.transitions]


def rules(text: str, source: str = "test.yml"):
    return parse_rules(textwrap.dedent(text), source)


HOT = """\
groups:
  - name: t
    rules:
      - alert: Hot
        expr: gpuaudit_temperature_celsius > 80
        for: 2m
        labels:
          severity: warning
        annotations:
          summary: "GPU {{ $labels.gpu }} on {{ $labels.hostname }} at {{ $value }} °C"
"""


def hot_feed() -> Feed:
    return Feed(Evaluator(rules(HOT)))


# --- for: semantics ----------------------------------------------------------------------

def test_pending_from_the_first_true_evaluation_firing_exactly_at_for_resolved_when_false():
    feed = hot_feed()
    assert feed(0, busy(0, temperature_gpu_c=70.0)).alerts == ()
    e = feed(10, busy(0, temperature_gpu_c=85.0))
    (alert,) = e.alerts
    assert (alert.state, alert.active_since, alert.fired_at, e.transitions) == \
        ("pending", at(10), None, ())
    for t in range(20, 130, 10):  # 110 s after the start: still short of 2 minutes
        (alert,) = feed(t, busy(0, temperature_gpu_c=85.0)).alerts
        assert alert.state == "pending", t
    e = feed(130, busy(0, temperature_gpu_c=85.0))
    (alert,) = e.alerts
    assert (alert.state, alert.active_since, alert.fired_at) == ("firing", at(10), at(130))
    assert alert.labels == {"alertname": "Hot", "gpu": "0", "uuid": "GPU-0000",
                            "model": "NVIDIA H200", "hostname": HOST, "severity": "warning"}
    assert alert.annotations == {"summary": "GPU 0 on node-a at 85 °C"}
    assert alert.value == 85.0
    assert [(t.kind, t.at) for t in e.transitions] == [("firing", at(130))]
    assert feed(140, busy(0, temperature_gpu_c=85.0)).transitions == ()
    e = feed(150, busy(0, temperature_gpu_c=70.0))
    assert e.alerts == ()
    (tr,) = e.transitions
    assert (tr.kind, tr.at, tr.alert.state, tr.alert.fired_at) == \
        ("resolved", at(150), "firing", at(130))


def test_a_blip_below_the_threshold_restarts_the_pending_time():
    feed = hot_feed()
    for t in range(0, 70, 10):
        feed(t, busy(0, temperature_gpu_c=85.0))
    assert feed(70, busy(0, temperature_gpu_c=79.0)).alerts == ()  # the blip
    (alert,) = feed(80, busy(0, temperature_gpu_c=85.0)).alerts
    assert alert.active_since == at(80)
    for t in range(90, 200, 10):
        (alert,) = feed(t, busy(0, temperature_gpu_c=85.0)).alerts
        assert alert.state == "pending", t
    (alert,) = feed(200, busy(0, temperature_gpu_c=85.0)).alerts
    assert (alert.state, alert.fired_at) == ("firing", at(200))
    # A pending alert that goes away is dropped without any notification.
    assert [k for k, *_ in feed.transitions()] == ["firing"]


def test_a_pending_alert_that_goes_away_makes_no_transition():
    feed = hot_feed()
    feed(0, busy(0, temperature_gpu_c=85.0))
    e = feed(60, busy(0, temperature_gpu_c=70.0))
    assert (e.alerts, e.transitions) == ((), ())


def test_for_zero_fires_on_the_first_evaluation_that_returns_the_series():
    feed = Feed(Evaluator(rules(HOT.replace("for: 2m", "for: 0s"))))
    assert feed(0, busy(0)).alerts == ()
    e = feed(15, busy(0, temperature_gpu_c=81.0))
    (alert,) = e.alerts
    assert (alert.state, alert.active_since, alert.fired_at) == ("firing", at(15), at(15))
    assert [t.kind for t in e.transitions] == ["firing"]


def test_each_label_set_is_an_alert_of_its_own():
    feed = hot_feed()
    feed(0, busy(0), busy(1, temperature_gpu_c=90.0))
    e = feed(60, busy(0, temperature_gpu_c=90.0), busy(1, temperature_gpu_c=90.0))
    assert [(a.labels["gpu"], a.active_since) for a in e.alerts] == [("0", at(60)),
                                                                       ("1", at(0))]
    e = feed(120, busy(0, temperature_gpu_c=90.0), busy(1, temperature_gpu_c=90.0))
    assert [(a.labels["gpu"], a.state) for a in e.alerts] == [("0", "pending"),
                                                               ("1", "firing")]
    assert [(t.kind, t.alert.labels["gpu"]) for t in e.transitions] == [("firing", "1")]


def test_a_firing_alert_follows_its_value_and_annotations():
    feed = Feed(Evaluator(rules(HOT.replace("for: 2m", "for: 0s"))))
    feed(0, busy(0, temperature_gpu_c=85.0))
    e = feed(15, busy(0, temperature_gpu_c=91.5))
    (alert,) = e.alerts
    assert (alert.value, alert.annotations["summary"], alert.fired_at, e.transitions) == \
        (91.5, "GPU 0 on node-a at 91.5 °C", at(0), ())


def test_keep_firing_for_holds_a_firing_alert_through_a_short_gap():
    text = HOT.replace("for: 2m", "for: 0s\n        keep_firing_for: 1m")
    feed = Feed(Evaluator(rules(text)))
    feed(0, busy(0, temperature_gpu_c=85.0))
    # Counted from the first evaluation without it (15 s): held until a minute after that.
    for t in (15, 30, 45, 60):
        (alert,) = feed(t, busy(0)).alerts
        assert alert.state == "firing", t
    e = feed(75, busy(0))
    assert e.alerts == ()
    assert feed.transitions() == [("firing", "Hot", "0", 0.0), ("resolved", "Hot", "0", 75.0)]


def test_a_rule_that_cannot_be_evaluated_keeps_its_alerts_and_says_why():
    text = HOT.replace("gpuaudit_temperature_celsius > 80",
                       "gpuaudit_temperature_celsius > on(hostname) gpuaudit_up")
    feed = Feed(Evaluator(rules(text.replace("for: 2m", "for: 0s"))))
    (alert,) = feed(0, busy(0)).alerts  # one GPU: 60 > 1, fires
    e = feed(15, busy(0), busy(1))  # two GPUs on one host: many-to-many
    assert e.alerts == (alert,)
    (error,) = e.errors
    assert error.startswith("test.yml:4: rule Hot: found duplicate series for the match group")


def test_the_clock_going_back_clears_the_range_history():
    feed = Feed(Evaluator(rules("""\
        groups:
          - name: t
            rules:
              - alert: Q
                expr: count_over_time(gpuaudit_temperature_celsius[10m]) > 0
        """)))
    feed(100, busy(0))
    feed(115, busy(0))
    e = feed(50, busy(0))
    assert e.alerts[0].value == 1.0
    assert "is not after the previous one" in e.errors[0]


# --- the PromQL subset -------------------------------------------------------------------

def query(expr: str, ticks: list[tuple[float, list[Series]]]) -> dict[tuple, float]:
    """The result of `expr` at the last tick, label set → value (through an alert rule, so
    what is checked is what an alert would carry)."""
    doc = {"groups": [{"name": "q", "rules": [{"alert": "Q", "expr": expr}]}]}
    ev = Evaluator(parse_rules(yaml.safe_dump(doc)))
    result = None
    for t, fed in ticks:
        result = ev.evaluate(at(t), fed)
        assert result.errors == ()
    assert result is not None
    return {tuple(sorted((k, v) for k, v in a.labels.items() if k != "alertname")): a.value
            for a in result.alerts}


def s(name: str, value: float, **labels: str) -> Series:
    return Series(f"gpuaudit_{name}", tuple(labels.items()), value)


def counter_ticks(values: list[float], step: float = 10.0) -> list[tuple[float, list[Series]]]:
    return [(i * step, [s("energy_joules_total", v, gpu="0")]) for i, v in enumerate(values)]


def test_increase_and_rate_extrapolate_like_prometheus():
    ticks = counter_ticks([0, 1, 2, 3])
    # (t-30s, t] holds the samples at 10, 20, 30 s: 2 counted, extrapolated over 30 s.
    assert query("increase(gpuaudit_energy_joules_total[30s])", ticks) == {(("gpu", "0"),): 3.0}
    assert query("rate(gpuaudit_energy_joules_total[30s])", ticks) == \
        {(("gpu", "0"),): pytest.approx(0.1)}
    # A counter reset (6 → 1) counts what came before it: 1 + 5 ... = 3, times 40/30.
    assert query("increase(gpuaudit_energy_joules_total[40s])", counter_ticks([5, 6, 1, 2])) \
        == {(("gpu", "0"),): pytest.approx(4.0)}
    # One sample in the window: no rate at all.
    assert query("increase(gpuaudit_energy_joules_total[5s])", ticks) == {}


def test_range_windows_are_left_open_and_the_over_time_functions():
    ticks = [(t, [s("temperature_celsius", v, gpu="0")])
             for t, v in ((0, 50), (10, 70), (20, 60), (30, 60))]
    expect = {"count_over_time": 2, "avg_over_time": 60, "max_over_time": 60,
              "min_over_time": 60, "sum_over_time": 120, "last_over_time": 60, "changes": 0}
    for func, want in expect.items():  # [20s] at 30 s: the samples at 20 and 30 s only
        assert query(f"{func}(gpuaudit_temperature_celsius[20s]) >= 0", ticks) == \
            {(("gpu", "0"),): want}, func
    # The same metric over a longer range too: its history reaches further back, and the
    # [20s] window must still leave out the sample exactly 20 s old.
    assert query("count_over_time(gpuaudit_temperature_celsius[20s]) and "
                 "count_over_time(gpuaudit_temperature_celsius[1m])", ticks) == \
        {(("gpu", "0"),): 2}
    assert query("changes(gpuaudit_temperature_celsius[1m]) >= 0", ticks) == \
        {(("gpu", "0"),): 2}
    assert query("resets(gpuaudit_temperature_celsius[1m]) >= 0", ticks) == \
        {(("gpu", "0"),): 1}
    assert query("avg_over_time(gpuaudit_temperature_celsius[1m]) >= 0", ticks) == \
        {(("gpu", "0"),): 60}


def test_comparisons_filter_and_keep_the_vectors_value_on_either_side():
    ticks = [(0, [s("temperature_celsius", 90, gpu="0"), s("temperature_celsius", 70, gpu="1")])]
    assert query("gpuaudit_temperature_celsius > 80", ticks) == {(("gpu", "0"),): 90}
    assert query("80 < gpuaudit_temperature_celsius", ticks) == {(("gpu", "0"),): 90}
    assert query("gpuaudit_temperature_celsius != 90", ticks) == {(("gpu", "1"),): 70}
    assert query("gpuaudit_temperature_celsius > bool 80", ticks) == \
        {(("gpu", "0"),): 1, (("gpu", "1"),): 0}
    assert query("gpuaudit_temperature_celsius * 2 - 100 >= 80", ticks) == {(("gpu", "0"),): 80}
    assert query("-gpuaudit_temperature_celsius < -80", ticks) == {(("gpu", "0"),): -90}
    assert query("abs(-gpuaudit_temperature_celsius) == 70", ticks) == {(("gpu", "1"),): 70}


def test_scalar_arithmetic_precedence_and_time():
    one = [(120, [s("up", 1, gpu="0")])]
    assert query("2 ^ 3 ^ 2 == bool 512", one) == {(): 1.0}  # ^ is right-associative
    assert query("-2 ^ 2", one) == {(): -4.0}
    assert query("1 + 2 * 3 % 4", one) == {(): 3.0}
    assert query("time() - 20", one) == {(): 100.0}
    assert query("(time() - 20) / 0", one) == {(): float("inf")}


def test_vector_matching_arithmetic_and_set_operators():
    fed = [s("memory_used_bytes", 30, gpu="0"), s("memory_total_bytes", 120, gpu="0"),
           s("memory_used_bytes", 60, gpu="1"), s("memory_total_bytes", 120, gpu="1"),
           s("memory_used_bytes", 5, gpu="2"),
           s("clock_event_active", 1, gpu="1", reason="gpu_idle")]
    ticks = [(0, fed)]
    assert query("gpuaudit_memory_used_bytes / gpuaudit_memory_total_bytes > 0.3", ticks) == \
        {(("gpu", "1"),): 0.5}
    assert query("gpuaudit_memory_used_bytes < gpuaudit_memory_total_bytes", ticks) == \
        {(("gpu", "0"),): 30, (("gpu", "1"),): 60}
    assert query("gpuaudit_memory_used_bytes and gpuaudit_memory_total_bytes", ticks) == \
        {(("gpu", "0"),): 30, (("gpu", "1"),): 60}
    assert query("gpuaudit_memory_used_bytes unless gpuaudit_memory_total_bytes", ticks) == \
        {(("gpu", "2"),): 5}
    assert query("gpuaudit_memory_used_bytes > 40 or gpuaudit_memory_total_bytes", ticks) == \
        {(("gpu", "0"),): 120, (("gpu", "1"),): 60}
    # The extra `reason` label keeps a plain match from pairing; ignoring() or on() does.
    assert query("gpuaudit_memory_used_bytes unless gpuaudit_clock_event_active", ticks) == \
        {(("gpu", "0"),): 30, (("gpu", "1"),): 60, (("gpu", "2"),): 5}
    assert query("gpuaudit_memory_used_bytes unless ignoring(reason) "
                 "gpuaudit_clock_event_active", ticks) == {(("gpu", "0"),): 30,
                                                           (("gpu", "2"),): 5}
    assert query("gpuaudit_memory_used_bytes and on(gpu) gpuaudit_clock_event_active",
                 ticks) == {(("gpu", "1"),): 60}
    assert query("gpuaudit_memory_used_bytes + on(gpu) gpuaudit_clock_event_active",
                 ticks) == {(("gpu", "1"),): 61}


def test_label_matchers_are_anchored_and_a_missing_label_reads_empty():
    fed = [s("xid_errors_total", 1, gpu="0", xid="48"), s("xid_errors_total", 2, gpu="0", xid="4"),
           s("xid_errors_total", 3, gpu="1", xid="79"), s("xid_errors_total", 4, gpu="1")]
    ticks = [(0, fed)]
    assert set(query('gpuaudit_xid_errors_total{xid=~"4"}', ticks).values()) == {2}
    assert set(query('gpuaudit_xid_errors_total{xid=~"4.*"}', ticks).values()) == {1, 2}
    assert set(query('gpuaudit_xid_errors_total{xid!~"4|48", gpu="1"}', ticks).values()) == \
        {3, 4}
    assert set(query('gpuaudit_xid_errors_total{xid=""}', ticks).values()) == {4}
    assert set(query('gpuaudit_xid_errors_total{gpu!="0",xid="79"}', ticks).values()) == {3}


def test_durations_as_prometheus_writes_them():
    assert [parse_duration(d) for d in ("0", "90s", "5m", "1h30m", "2d", "1w", "250ms")] == \
        [0, 90, 300, 5400, 172800, 604800, 0.25]
    for bad in ("", "5", "5x", "30m1h", "1.5h", "-5m", "5m5m"):
        with pytest.raises(ValueError):
            parse_duration(bad)


def test_templates_and_the_humanize_functions():
    assert [go_float(v) for v in (85.0, 0.93, 1073741824.0, 1e21, 1e-05, float("nan"))] == \
        ["85", "0.93", "1073741824", "1e+21", "1e-05", "NaN"]
    assert [humanize(v) for v in (0, 1234567, 0.0012, 999)] == ["0", "1.235M", "1.2m", "999"]
    assert humanize1024(2147483648) == "2Gi"
    assert [humanize_duration(v) for v in (3725, 90061, 42.5, 0.25)] == \
        ["1h 2m 5s", "1d 1h 1m 1s", "42.5s", "250ms"]
    t = parse_template("{{ $labels.gpu }}|{{.Labels.gpu}}|{{ index $labels \"gpu\" }}|"
                       "{{ $value | humanizePercentage }}|{{ $labels.nope }}|  {{- $value -}}  |")
    assert t.render({"gpu": "3"}, 0.931) == "3|3|3|93.1%|<no value>|0.931|"
    for bad in ("{{ printf \"%.1f\" $value }}", "{{ $value | round }}", "{{ $labels.gpu ",
                "{{ .Foo }}"):
        with pytest.raises(ValueError):
            parse_template(bad)


# --- bad rule files ----------------------------------------------------------------------

GOOD_RULE = """\
groups:
  - name: g
    rules:
      - alert: GpuHot
        expr: gpuaudit_temperature_celsius > 80
        for: 5m
"""

BAD_FILES = {
    "yaml": (GOOD_RULE.replace("        for", "       for"),
             "alerts.yml:6: not valid YAML: expected <block end>, but found "
             "'<block mapping start>'"),
    "unknown function": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80",
                                           "foo(gpuaudit_temperature_celsius) > 80"),
                         "alerts.yml:5: rule GpuHot: unknown function 'foo'"),
    "bad duration": (GOOD_RULE.replace("5m", "5x"),
                     "alerts.yml:6: rule GpuHot: bad 'for' duration '5x': not a valid duration "
                     "string: '5x'"),
    "missing expr": (GOOD_RULE.replace("        expr: gpuaudit_temperature_celsius > 80\n", ""),
                     "alerts.yml:4: rule GpuHot: field 'expr' must be set in rule"),
    "unknown field": (GOOD_RULE.replace("for:", "fro:"),
                      "alerts.yml:6: rule GpuHot: unknown field 'fro' in rule (known: alert, "
                      "annotations, expr, for, keep_firing_for, labels, record)"),
    "bad range": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80",
                                    "max_over_time(gpuaudit_temperature_celsius[5q]) > 80"),
                  "alerts.yml:5: rule GpuHot: bad range [5q]: not a valid duration string: "
                  "'5q'"),
    "range vector alone": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80",
                                             "gpuaudit_temperature_celsius[5m] > 80"),
                           "alerts.yml:5: rule GpuHot: operator '>' needs instant vectors or "
                           "scalars, not a range vector (wrap it in a function such as "
                           "avg_over_time)"),
    "unsupported function": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80",
                                               "irate(gpuaudit_energy_joules_total[5m]) > 80"),
                             "alerts.yml:5: rule GpuHot: function 'irate' is not supported "
                             "in-process (see docs/monitor-rules.md)"),
    "bad regex": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80",
                                    'gpuaudit_up{gpu=~"("} == 0'),
                  "alerts.yml:5: rule GpuHot: bad regex '(': missing ), unterminated "
                  "subpattern at position 0"),
    "scalar comparison": (GOOD_RULE.replace("gpuaudit_temperature_celsius > 80", "1 > 0"),
                          "alerts.yml:5: rule GpuHot: comparisons between scalars must use "
                          "the bool modifier"),
    "recording rule": (GOOD_RULE.replace("alert: GpuHot", "record: gpu:hot"),
                       "alerts.yml:4: rule gpu:hot: recording rules are not supported "
                       "in-process (Prometheus itself can load this file)"),
    "bad template": (GOOD_RULE + "        annotations:\n          summary: '{{ printf $value }}'\n",
                     "alerts.yml:8: rule GpuHot: annotation 'summary': unsupported template "
                     "action '{{ printf $value }}' (supported: $labels.NAME, $value, piped to "
                     "humanize, humanize1024, humanizePercentage, humanizeDuration)"),
    "bad label name": (GOOD_RULE + "        labels:\n          bad-name: x\n",
                       "alerts.yml:8: rule GpuHot: invalid label name 'bad-name'"),
    "no group name": (GOOD_RULE.replace("name: g", "name: ''"),
                      "alerts.yml:2: group name must not be empty"),
    "group twice": (GOOD_RULE + GOOD_RULE.replace("groups:\n", ""),
                    "alerts.yml:7: group g: name repeated in the file"),
    "rules not a list": ("groups:\n  - name: g\n    rules: 3\n",
                         "alerts.yml:3: group g: rules must be a list"),
    "not a rule file": ("- 1\n- 2\n", "alerts.yml:1: the rule file must be a mapping"),
}


@pytest.mark.parametrize("case", BAD_FILES, ids=list(BAD_FILES))
def test_a_bad_rule_file_names_the_file_line_and_rule(case):
    text, message = BAD_FILES[case]
    with pytest.raises(BadInputError) as err:
        parse_rules(text, "alerts.yml")
    assert str(err.value) == message
    assert err.value.exit_code == 2


def test_the_line_of_an_error_inside_a_multi_line_expression():
    text = GOOD_RULE.replace("expr: gpuaudit_temperature_celsius > 80",
                             "expr: |\n          gpuaudit_temperature_celsius > 80\n"
                             "          and\n          sum(gpuaudit_up) > 0")
    with pytest.raises(BadInputError, match=r"^alerts\.yml:8: rule GpuHot: aggregation 'sum' "):
        parse_rules(text, "alerts.yml")


def test_load_rules_reads_the_file_and_says_when_it_cannot(tmp_path):
    path = tmp_path / "mine.yml"
    path.write_text(GOOD_RULE.replace("> 80", "> 80 +"))
    with pytest.raises(BadInputError, match=rf"^{path}:5: rule GpuHot: unexpected end of "):
        load_rules(path)
    with pytest.raises(BadInputError, match="cannot read rule file"):
        load_rules(tmp_path / "missing.yml")
    path.write_text(GOOD_RULE)
    (rule,) = load_rules(path).rules
    assert (rule.name, rule.for_s, rule.where) == ("GpuHot", 300.0, f"{path}:4")
    assert load_rules(path).unknown_metrics() == ()
    path.write_text(GOOD_RULE.replace("gpuaudit_temperature_celsius", "DCGM_FI_DEV_GPU_TEMP"))
    assert load_rules(path).unknown_metrics() == (
        f"{path}:4: rule GpuHot: metric 'DCGM_FI_DEV_GPU_TEMP' is not one gpuaudit exports",)


def test_an_empty_rule_file_has_no_rules():
    assert parse_rules("", "x.yml").rules == ()
    assert parse_rules("groups: []\n", "x.yml").rules == ()


# --- the shipped rules -------------------------------------------------------------------

SHIPPED = load_shipped_rules()
STEP = 15  # seconds between samples, as a Prometheus scrape interval would be
FAULT_AT = 40 * 60  # healthy before, so every range window starts full of healthy samples
RUN_UNTIL = FAULT_AT + 70 * 60


@dataclass(frozen=True)
class Fault:
    rule: str
    planted: dict  # fields of GPU 1's samples from FAULT_AT on
    fires_after_s: float  # from FAULT_AT
    resolves_after_s: float | None = None
    severity: str = "critical"
    once: bool = False  # planted in one sample only (an event such as an XID)


# Idle for the whole window (the last busy sample at FAULT_AT-15 leaves (t-30m, t] at
# FAULT_AT+1785), then `for: 30m`. Utilization: 0.6 before, 1.0 after; the 10-minute mean
# (40 samples) passes 0.9 with 31 of them at 1.0, at FAULT_AT+450, then `for: 30m`.
FAULTS = [
    Fault("GpuXidCritical", {"xid_events": (XidEvent(gpu=1, code=79, time=at(FAULT_AT)),)},
          0, 600, once=True),
    Fault("GpuXidWarning", {"xid_events": (XidEvent(gpu=1, code=94, time=at(FAULT_AT)),)},
          0, 600, "warning", once=True),
    Fault("GpuEccUncorrectable", {"ecc_uncorrected_volatile": 2}, 0),
    Fault("GpuRowRemapFailed", {"remapping_failed": True}, 0),
    Fault("GpuRowRemapPending", {"remapping_pending": True}, 0, severity="warning"),
    Fault("GpuLost", {"error": "GPU is lost"}, 60),
    Fault("GpuHardwareSlowdown", {"clock_event_reasons": ("hw_power_brake_slowdown",)}, 60),
    Fault("GpuThermalSlowdown", {"clock_event_reasons": ("sw_thermal_slowdown",)}, 300,
          severity="warning"),
    Fault("GpuTemperatureHigh", {"temperature_gpu_c": 88.0}, 300, severity="warning"),
    Fault("GpuPcieWidthDegraded", {"pcie_link_width": 8}, 300, severity="warning"),
    Fault("GpuPcieGenBelowMax", {"pcie_link_gen": 4}, 300, severity="warning"),
    Fault("GpuIdleMemoryHeld", {"utilization_gpu_pct": 0.0, "sm_activity_pct": 0.0,
                                "clock_event_reasons": ("gpu_idle",)}, 1785 + 1800,
          severity="warning"),
    Fault("GpuUtilizationSustainedHigh", {"utilization_gpu_pct": 100.0,
                                          "sm_activity_pct": 95.0}, 450 + 1800,
          severity="info"),
]


def faulty(fault: Fault, t: int) -> GpuSample:
    if t < FAULT_AT or (fault.once and t > FAULT_AT):
        return busy(1)
    if "error" in fault.planted:
        return lost(1)
    return busy(1, **fault.planted)


def run_fault(fault: Fault) -> Feed:
    feed = Feed(Evaluator(SHIPPED))
    for t in range(0, RUN_UNTIL + 1, STEP):
        e = feed(t, busy(0), faulty(fault, t))
        assert e.errors == ()
    return feed


def test_the_shipped_rules_load_and_read_only_our_metrics():
    assert shipped_rules_path().name == "alerts.yml"
    assert {r.name for r in SHIPPED.rules} == {f.rule for f in FAULTS}
    used = {sel.name for r in SHIPPED.rules for sel in selectors(r.node)}
    assert used <= set(metric_names()), used - set(metric_names())
    assert SHIPPED.unknown_metrics() == ()
    assert all(dict((k, t.text) for k, t in r.labels)["severity"] in
               ("critical", "warning", "info") for r in SHIPPED.rules)


def test_healthy_gpus_busy_or_idle_never_raise_an_alert():
    feed = Feed(Evaluator(SHIPPED))
    for t in range(0, 3 * 3600 + 1, STEP):
        e = feed(t, busy(0), idle_empty(1))
        assert (e.alerts, e.errors) == ((), ()), t


@pytest.mark.parametrize("fault", FAULTS, ids=[f.rule for f in FAULTS])
def test_each_shipped_rule_fires_on_its_fault_and_on_nothing_else(fault):
    feed = run_fault(fault)
    expected = [("firing", fault.rule, "1", FAULT_AT + fault.fires_after_s)]
    if fault.resolves_after_s is not None:
        expected.append(("resolved", fault.rule, "1", FAULT_AT + fault.resolves_after_s))
    assert feed.transitions() == expected
    fired = next(t.alert for e in feed.log for t in e.transitions)
    assert fired.labels["severity"] == fault.severity
    assert (fired.labels["hostname"], fired.labels["uuid"]) == (HOST, "GPU-0001")
    assert fired.annotations["summary"].startswith(f"GPU 1 on {HOST}")
    assert "<no value>" not in str(fired.annotations)


def test_shipped_annotations_read_well():
    summary = {f.rule: next(t.alert for e in run_fault(f).log for t in e.transitions)
               .annotations["summary"] for f in FAULTS if f.rule in (
                   "GpuXidCritical", "GpuTemperatureHigh", "GpuPcieWidthDegraded",
                   "GpuHardwareSlowdown", "GpuUtilizationSustainedHigh")}
    assert summary == {
        "GpuXidCritical": "GPU 1 on node-a reported XID 79",
        "GpuTemperatureHigh": "GPU 1 on node-a at 88 °C for 5 minutes",
        "GpuPcieWidthDegraded": "GPU 1 on node-a: PCIe link runs x8, narrower than the GPU "
                                "and slot allow",
        "GpuHardwareSlowdown": "GPU 1 on node-a: clocks held down by hw_power_brake_slowdown",
        "GpuUtilizationSustainedHigh": "GPU 1 on node-a busy 100% of the time for 40 minutes",
    }


def test_a_recorded_trace_gpu_falling_off_the_bus():
    """The real H200 recording with XID 79 planted and GPU 1 lost, through the sampler."""
    replay = TraceReplay.from_file(FIXTURES / "telemetry" / "h200-2gpu-xid-lost.json")
    sampler = Sampler(replay, hostname=HOST, interval_s=1.0)
    feed = Feed(Evaluator(SHIPPED))
    states = []
    while (t := replay.advance()) is not None:
        sample = sampler.sample(t)
        feed.xids.add(sample)
        e = feed.evaluator.evaluate(t, list(series(sample, feed.xids)))
        feed.log.append(e)
        states.append(sorted((a.name, a.state, a.labels["gpu"], a.labels.get("xid"))
                             for a in e.alerts if a.name != "GpuUtilizationSustainedHigh"))
    assert states == [
        [], [], [],
        [("GpuXidCritical", "firing", "1", "79")],
        [("GpuLost", "pending", "1", None), ("GpuXidCritical", "firing", "1", "79")],
        [("GpuLost", "pending", "1", None), ("GpuXidCritical", "firing", "1", "79")],
    ]


# --- Prometheus itself on the same scenarios ---------------------------------------------

def promtool_series(fed: list[tuple[datetime, list[Series]]]) -> list[dict]:
    """Our feed in promtool's input_series notation: a value per step, `stale` where a
    series stops (Prometheus then drops it at once, as the evaluator here does), `_` after."""
    keys: dict[tuple, list[str]] = {}
    for i, (_, tick) in enumerate(fed):
        for one in tick:
            labels = tuple((k, v) for k, v in one.labels if v != "")
            keys.setdefault((one.name, labels), ["_"] * len(fed))[i] = repr(one.value)
    out = []
    for (name, labels), values in keys.items():
        for i in range(1, len(values)):
            if values[i] == "_" and values[i - 1] not in ("_", "stale"):
                values[i] = "stale"
        text = ",".join(f'{k}="{v}"' for k, v in labels)
        out.append({"series": f"{name}{{{text}}}", "values": " ".join(values)})
    return out


def firing_at(feed: Feed, seconds: float) -> list[dict]:
    (e,) = [e for e in feed.log if e.time == at(seconds)]
    return [{"exp_labels": {k: v for k, v in a.labels.items() if k != "alertname"},
             "exp_annotations": a.annotations} for a in e.firing]


@pytest.mark.skipif(PROMTOOL is None, reason="needs promtool (Debian: apt-get install "
                                               "prometheus)")
def test_prometheus_agrees_with_the_evaluator_on_every_fault(tmp_path):
    """promtool test rules replays each scenario through Prometheus's own rule engine and
    checks, at points around each transition, the firing alerts the evaluator here gave:
    labels, and annotations with their rendered values. The points sit a step away from
    the transition: Prometheus 2.x still counts a sample exactly at t-range, 3.x does not."""
    tests = []
    for fault in FAULTS:
        feed = run_fault(fault)
        times = [FAULT_AT + fault.fires_after_s - 2 * STEP, FAULT_AT + fault.fires_after_s
                 + STEP]
        if fault.resolves_after_s is not None:
            times += [FAULT_AT + fault.resolves_after_s - STEP,
                      FAULT_AT + fault.resolves_after_s + STEP]
        checks = [{"eval_time": f"{int(t)}s", "alertname": fault.rule,
                   "exp_alerts": firing_at(feed, t)} for t in times]
        assert [bool(c["exp_alerts"]) for c in checks] == \
            [False, True] + ([True, False] if fault.resolves_after_s is not None else [])
        tests.append({"name": fault.rule, "interval": f"{STEP}s",
                      "input_series": promtool_series(feed.fed), "alert_rule_test": checks})
    spec = tmp_path / "test.yml"
    spec.write_text(yaml.safe_dump({"rule_files": [str(shipped_rules_path())],
                                    "evaluation_interval": f"{STEP}s", "tests": tests},
                                   allow_unicode=True, width=1 << 20))
    out = subprocess.run([PROMTOOL, "test", "rules", str(spec)], capture_output=True,
                         text=True, timeout=240)
    assert out.returncode == 0, (out.stdout + out.stderr)[-4000:]
