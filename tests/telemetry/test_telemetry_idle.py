"""The idle policy, with exact expected outcomes: every time below is a sample's time."""

from __future__ import annotations

import json
import logging
import sys
from collections.abc import Iterable
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuaudit.errors import BadInputError
from gpuaudit.model import GpuSample, Sample
from gpuaudit.telemetry.idle import (
    ActionResult,
    IdleConfig,
    IdleDecision,
    IdlePolicy,
    evidence_of,
    run_action,
)
from gpuaudit.telemetry.metrics import IdleState
from tests.support import telemetry_traces as tt

T0 = datetime(2026, 11, 30, 9, 0, tzinfo=timezone.utc)
SHUTDOWN = ("sudo", "shutdown", "-h", "now")
TRACES = Path(__file__).parents[1] / "fixtures" / "telemetry"


def gpu(i: int = 0, act: float | None = 0.0, mem: float | None = 0.0,
        pcie: float | None = 0.0, **kw) -> GpuSample:
    """A GPU as NVML reads it without GPM: utilization, memory utilization, PCIe rx+tx."""
    half = None if pcie is None else pcie / 2
    return GpuSample(index=i, uuid=f"GPU-{i}", name="NVIDIA H200", utilization_gpu_pct=act,
                     utilization_memory_pct=mem, pcie_rx_bytes_per_s=half,
                     pcie_tx_bytes_per_s=half, **kw)


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def sample(seconds: float, *gpus: GpuSample) -> Sample:
    return Sample(time=at(seconds), hostname="h1", interval_s=1.0, gpus=gpus or (gpu(),))


def feed(policy: IdlePolicy, ticks: Iterable[tuple[float, tuple[GpuSample, ...]]]
         ) -> list[IdleDecision]:
    out: list[IdleDecision] = []
    for seconds, gpus in ticks:
        out += policy.observe(sample(seconds, *gpus))
    return out


def idle_ticks(start: int, stop: int, step: int = 1, n_gpus: int = 1):
    return ((s, tuple(gpu(i) for i in range(n_gpus))) for s in range(start, stop, step))


def brief(decisions: list[IdleDecision]) -> list[tuple[str, str, int | None, float]]:
    """(kind, outcome, gpu, seconds after T0) of each decision."""
    return [(d.kind, d.outcome, d.gpu, (d.time - T0).total_seconds()) for d in decisions]


class Spy:
    """A runner that records what it was asked to run and answers as told."""

    def __init__(self, result: ActionResult | None = None) -> None:
        self.calls: list[tuple[tuple[str, ...], float]] = []
        self.result = result or ActionResult(0, "ok\n")

    def __call__(self, argv: tuple[str, ...], timeout_s: float) -> ActionResult:
        self.calls.append((argv, timeout_s))
        return self.result


def never_run(argv, timeout_s):
    raise AssertionError(f"a dry run ran {argv}")


# -- warn, act, reset ---------------------------------------------------------------------


def test_warn_at_exactly_the_window_then_act_after_the_grace_period():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    before = feed(policy, idle_ticks(0, 600))
    assert before == []
    assert policy.states() == {0: IdleState(idle=False, idle_seconds_total=0.0)}
    decisions = feed(policy, idle_ticks(600, 1201))
    # Per GPU and for the host at t0 + 10 min, the action at + 5 min more, and nothing after
    # it: one action per idle episode.
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600),
                                ("act", "dry_run", None, 900)]
    warn = decisions[0]
    assert warn.idle_since == T0 and warn.idle_for_s == 600.0 and warn.scope == "gpu"
    ev = warn.evidence[0]
    assert (ev.gpu, ev.verdict, ev.activity_pct, ev.activity_source) == (
        0, "idle", 0.0, "utilization_gpu")
    assert (ev.memory_traffic_source, ev.pcie_source, ev.missing) == (
        "utilization_memory", "pcie", ())
    th = warn.thresholds
    assert (th.activity_max_pct, th.memory_traffic_max_pct, th.pcie_max_bytes_per_s,
            th.window_s, th.grace_s) == (5.0, 5.0, 50e6, 600.0, 300.0)
    assert "activity 0 % < 5 %" in warn.message and "PCIe 0 MB/s < 50 MB/s" in warn.message
    assert policy.states()[0] == IdleState(idle=True, idle_seconds_total=1200.0)


def test_a_dry_run_says_exactly_what_would_run():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    act = [d for d in feed(policy, idle_ticks(0, 901)) if d.kind == "act"]
    assert len(act) == 1
    assert act[0].command == SHUTDOWN and act[0].outcome == "dry_run"
    assert "would run: sudo shutdown -h now" in act[0].message
    assert act[0].idle_since == T0 and act[0].idle_for_s == 900.0


def test_enabled_actions_run_once_per_episode_and_a_new_episode_acts_again():
    spy = Spy()
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN, enable_actions=True,
                                   action_timeout_s=30.0), runner=spy)
    first = feed(policy, idle_ticks(0, 7200, 10))
    assert brief(first) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600),
                            ("act", "ok", None, 900)]
    assert spy.calls == [(SHUTDOWN, 30.0)]
    assert first[-1].returncode == 0 and first[-1].output == "ok\n"
    # Work shows up (the shutdown was slow, or someone logged in): the episode ends.
    blip = feed(policy, [(7200, (gpu(act=80.0),))])
    assert brief(blip) == [("cancel", "notified", 0, 7200), ("cancel", "notified", None, 7200)]
    assert "after its action" in blip[1].message
    again = feed(policy, idle_ticks(7210, 9000, 10))
    assert brief(again) == [("warn", "notified", 0, 7810), ("warn", "notified", None, 7810),
                            ("act", "ok", None, 8110)]
    assert len(spy.calls) == 2


@pytest.mark.parametrize(("signal", "busy"), [
    ("activity", gpu(act=5.0)),  # at the threshold is not under it
    ("memory_traffic", gpu(mem=30.0)),
    ("pcie", gpu(pcie=50e6)),
])
def test_a_blip_on_any_signal_resets_the_episode(signal, busy):
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    ticks = [(s, (busy if s == 300 else gpu(),)) for s in range(0, 1300)]
    decisions = feed(policy, ticks)
    # Idle again from 301: warned at 901, not 600; acted at 1201.
    assert brief(decisions) == [("warn", "notified", 0, 901), ("warn", "notified", None, 901),
                                ("act", "dry_run", None, 1201)]
    assert decisions[0].idle_since == at(301)
    assert evidence_of(busy, IdleConfig()).over == (signal,)


def test_activity_between_warning_and_action_cancels_the_action():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    ticks = [(s, (gpu(act=40.0) if s == 800 else gpu(),)) for s in range(0, 1100)]
    decisions = feed(policy, ticks)
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600),
                                ("cancel", "notified", 0, 800),
                                ("cancel", "notified", None, 800)]
    assert "before any action" in decisions[3].message
    assert decisions[2].evidence[0].over == ("activity",)


# -- failing actions ----------------------------------------------------------------------


def test_a_failing_action_is_logged_and_retried_only_after_the_backoff(caplog):
    spy = Spy(ActionResult(1, "sudo: a password is required\n", "exit status 1"))
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN, enable_actions=True), runner=spy)
    with caplog.at_level(logging.WARNING, logger="gpuaudit.telemetry.idle"):
        decisions = feed(policy, idle_ticks(0, 3 * 3600 + 1, 10))
    acts = [d for d in decisions if d.kind == "act"]
    # 1081 idle ticks, three attempts: at +15 min, then one hour apart.
    assert [(d.time - T0).total_seconds() for d in acts] == [900, 4500, 8100]
    assert all(d.outcome == "failed" and d.returncode == 1 for d in acts)
    assert acts[0].next_attempt_at == at(4500)
    assert "password is required" in (acts[0].output or "")
    assert "exit status 1" in acts[0].message
    assert len(spy.calls) == 3
    assert sum("idle action for host h1 failed" in r.message for r in caplog.records) == 3


def test_after_a_failure_a_new_episode_tries_again_without_waiting_for_the_backoff():
    spy = Spy(ActionResult(1, "", "exit status 1"))
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN, enable_actions=True), runner=spy)
    feed(policy, idle_ticks(0, 1000, 10))
    assert len(spy.calls) == 1
    feed(policy, [(1000, (gpu(act=90.0),))])
    decisions = feed(policy, idle_ticks(1010, 1920, 10))
    assert brief(decisions)[-1] == ("act", "failed", None, 1910)
    assert len(spy.calls) == 2


def test_a_runner_that_raises_is_a_failed_action_not_a_crash():
    def broken(argv, timeout_s):
        raise RuntimeError("no route to the cloud API")

    policy = IdlePolicy(IdleConfig(action=SHUTDOWN, enable_actions=True), runner=broken)
    act = feed(policy, idle_ticks(0, 901))[-1]
    assert (act.kind, act.outcome, act.returncode) == ("act", "failed", None)
    assert "RuntimeError: no route to the cloud API" in act.message


def test_the_default_runner_runs_an_argument_list_with_the_safe_environment(monkeypatch):
    monkeypatch.delenv("NCCL_NVLS_ENABLE", raising=False)
    code = "import os, sys; print(os.environ['NCCL_NVLS_ENABLE'], sys.argv[1]); sys.exit(3)"
    got = run_action((sys.executable, "-c", code, "a b; rm -rf /"), 30.0)
    # No shell: the argument arrives as one string, untouched.
    assert (got.returncode, got.output, got.error) == (3, "0 a b; rm -rf /\n", "exit status 3")
    assert not got.ok
    missing = run_action(("/nonexistent/gpuaudit-action",), 30.0)
    assert missing.returncode is None and "could not start" in (missing.error or "")
    slow = run_action((sys.executable, "-c", "import time; time.sleep(30)"), 0.5)
    assert slow.returncode is None and slow.error == "timed out after 0.5 s"
    assert run_action((sys.executable, "-c", "pass"), 30.0).ok


# -- scope --------------------------------------------------------------------------------


def test_the_host_acts_only_when_all_its_gpus_are_idle():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    ticks = [(s, (gpu(0), gpu(1, act=70.0) if s < 300 else gpu(1))) for s in range(0, 1300)]
    decisions = feed(policy, ticks)
    # GPU 0 is warned about on its own; the host waits for GPU 1 (idle from 300).
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", 1, 900),
                                ("warn", "notified", None, 900),
                                ("act", "dry_run", None, 1200)]
    host = decisions[2]
    assert host.idle_since == at(300) and [e.gpu for e in host.evidence] == [0, 1]
    assert [e.idle_since for e in host.evidence] == [T0, at(300)]
    assert "all 2 GPUs idle" in host.message


def test_per_gpu_scope_acts_for_each_gpu_with_its_own_arguments():
    spy = Spy()
    action = ("/usr/local/bin/release-gpu", "--gpu={gpu}", "{uuid}", "{hostname}", "{x}")
    policy = IdlePolicy(IdleConfig(scope="gpu", action=action, enable_actions=True),
                        runner=spy)
    ticks = [(s, (gpu(0), gpu(1, act=70.0) if s < 300 else gpu(1))) for s in range(0, 1300)]
    decisions = feed(policy, ticks)
    assert brief(decisions) == [("warn", "notified", 0, 600), ("act", "ok", 0, 900),
                                ("warn", "notified", 1, 900), ("act", "ok", 1, 1200)]
    assert [c[0] for c in spy.calls] == [
        ("/usr/local/bin/release-gpu", "--gpu=0", "GPU-0", "h1", "{x}"),
        ("/usr/local/bin/release-gpu", "--gpu=1", "GPU-1", "h1", "{x}")]


def test_a_gpu_unreadable_for_a_whole_window_does_not_keep_the_host_up():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    lost = gpu(1, act=None, mem=None, pcie=None, error="GPU is lost")
    decisions = feed(policy, [(s, (gpu(0), lost)) for s in range(0, 1000)])
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600),
                                ("act", "dry_run", None, 900)]
    host = decisions[1]
    assert host.left_out == (1,)
    assert host.evidence[1].verdict == "error" and host.evidence[1].error == "GPU is lost"
    # With no GPU readable there is no idle evidence at all: nothing is decided.
    blind = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    assert feed(blind, [(s, (lost,)) for s in range(0, 2000, 10)]) == []


def test_excluded_gpus_are_not_waited_for():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN, exclude_gpus=frozenset({1})),
                        runner=never_run)
    decisions = feed(policy, [(s, (gpu(0), gpu(1, act=99.0))) for s in range(0, 901)])
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600),
                                ("act", "dry_run", None, 900)]
    assert decisions[1].left_out == (1,) and [e.gpu for e in decisions[1].evidence] == [0]
    assert 1 not in policy.states()


# -- missing readings ---------------------------------------------------------------------


def test_missing_memory_and_pcie_readings_do_not_block_idleness():
    # A vGPU guest has no PCIe throughput; without GPM nor NVML memory utilization either.
    policy = IdlePolicy(IdleConfig(), runner=never_run)
    decisions = feed(policy, [(s, (gpu(mem=None, pcie=None),)) for s in range(0, 601)])
    assert brief(decisions) == [("warn", "notified", 0, 600), ("warn", "notified", None, 600)]
    assert decisions[0].evidence[0].missing == ("memory_traffic", "pcie")
    assert "memory traffic n/a" in decisions[0].message


def test_no_activity_reading_is_never_idle_and_says_so_once():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    decisions = feed(policy, [(s, (gpu(act=None),)) for s in range(0, 3000, 10)])
    assert brief(decisions) == [("blind", "notified", 0, 600)]
    assert "exclude_gpus" in decisions[0].message
    assert decisions[0].evidence[0].verdict == "unknown"
    assert policy.states()[0] == IdleState(idle=False, idle_seconds_total=0.0)


def test_a_short_gap_in_the_readings_neither_resets_nor_decides():
    policy = IdlePolicy(IdleConfig(), runner=never_run)
    # Idle until 550, unreadable 551-650 (100 s, under the 120 s allowed), idle again.
    ticks = [(s, (gpu(act=None) if 550 < s <= 650 else gpu(),)) for s in range(0, 700)]
    decisions = feed(policy, ticks)
    # The window was reached at 600 during the gap: the warning waits for a reading (651),
    # and the episode still started at 0.
    assert brief(decisions) == [("warn", "notified", 0, 651), ("warn", "notified", None, 651)]
    assert decisions[0].idle_since == T0
    assert policy.states()[0].idle_seconds_total == 699.0


def test_a_long_gap_ends_the_episode():
    policy = IdlePolicy(IdleConfig(), runner=never_run)
    # Last idle reading at 299; at 420 it has been 121 s without one.
    ticks = [(s, (gpu(act=None) if 300 <= s <= 430 else gpu(),)) for s in range(0, 1100)]
    decisions = feed(policy, ticks)
    assert brief(decisions) == [("warn", "notified", 0, 1031),
                                ("warn", "notified", None, 1031)]
    assert decisions[0].idle_since == at(431)


def test_work_seen_on_any_reading_is_busy_even_without_activity():
    ev = evidence_of(gpu(act=None, pcie=2e9), IdleConfig())
    assert (ev.verdict, ev.over, ev.missing) == ("busy", ("pcie",), ("activity",))


def test_gpm_readings_are_preferred_to_nvml_coarse_ones():
    # One tiny kernel after another: NVML says 100 % busy, the SMs are 2 % active.
    g = gpu(act=100.0, mem=60.0, sm_activity_pct=2.0, dram_bandwidth_util_pct=1.0,
            pcie=None, gpm_pcie_rx_bytes_per_s=1e6, gpm_pcie_tx_bytes_per_s=2e6)
    ev = evidence_of(g, IdleConfig())
    assert ev.verdict == "idle"
    assert (ev.activity_pct, ev.activity_source) == (2.0, "sm_activity")
    assert (ev.memory_traffic_pct, ev.memory_traffic_source) == (1.0, "dram_bandwidth_util")
    assert (ev.pcie_bytes_per_s, ev.pcie_source) == (3e6, "gpm_pcie")
    # Half a PCIe reading is no reading: it would understate the traffic.
    half = evidence_of(gpu(pcie=None).model_copy(update={"pcie_rx_bytes_per_s": 1e6}),
                       IdleConfig())
    assert half.pcie_bytes_per_s is None and half.missing == ("pcie",)


# -- accounting ---------------------------------------------------------------------------


def test_idle_gpu_hours_and_their_cost_are_exact():
    policy = IdlePolicy(IdleConfig(price_per_gpu_hour=2.5, currency="EUR"), runner=never_run)
    # GPU 0: idle 0..1800 then busy; GPU 1: idle 0..299 only (never idle by the policy),
    # then idle again from 1500 to the end (2400, 900 s: past the window).
    ticks = [(s, (gpu(0, act=90.0) if s > 1800 else gpu(0),
                  gpu(1, act=90.0) if 300 <= s < 1500 else gpu(1)))
             for s in range(0, 2401)]
    feed(policy, ticks[:1201])
    assert policy.states()[0] == IdleState(idle=True, idle_seconds_total=1200.0)
    assert policy.states()[1] == IdleState(idle=False, idle_seconds_total=0.0)
    feed(policy, ticks[1201:])
    assert policy.states() == {0: IdleState(idle=False, idle_seconds_total=1800.0),
                               1: IdleState(idle=True, idle_seconds_total=900.0)}
    usage = policy.usage()
    assert usage.gpu_idle_seconds == {0: 1800.0, 1: 900.0}
    assert usage.idle_gpu_hours == 0.75
    assert (usage.idle_cost, usage.currency) == (1.875, "EUR")
    assert IdlePolicy().usage().idle_cost is None


# -- records, config, replay --------------------------------------------------------------


def test_the_decision_log_is_one_json_object_per_decision_and_reads_back():
    policy = IdlePolicy(IdleConfig(action=SHUTDOWN), runner=never_run)
    decisions = feed(policy, idle_ticks(0, 901, n_gpus=2))
    lines = [d.model_dump_json() for d in decisions]
    assert all("\n" not in line for line in lines)
    assert [IdleDecision.model_validate_json(line) for line in lines] == decisions
    doc = json.loads(lines[-1])
    assert doc["kind"] == "act" and doc["command"] == list(SHUTDOWN)
    assert doc["idle_since"] == "2026-11-30T09:00:00Z" and doc["thresholds"]["window_s"] == 600
    with pytest.raises(ValueError):
        decisions[0].model_copy().__setattr__("kind", "act")  # frozen


def test_samples_out_of_time_order_are_skipped():
    policy = IdlePolicy(IdleConfig(), runner=never_run)
    feed(policy, idle_ticks(0, 601))
    assert policy.observe(sample(300)) == []
    assert policy.states()[0].idle_seconds_total == 600.0


@pytest.mark.parametrize(("kwargs", "message"), [
    ({"window_s": 0}, "window_s must be > 0"),
    ({"grace_s": -1}, "grace_s must be >= 0"),
    ({"scope": "rack"}, "scope must be"),
    ({"action": "sudo shutdown -h now"}, "argument list of strings"),
    ({"action": ("sudo", 1)}, "argument list of strings"),
    ({"action": ("",)}, "program is empty"),
    ({"action": ("release", "{gpu}")}, "need scope 'gpu'"),
    ({"price_per_gpu_hour": -1.0}, "price_per_gpu_hour"),
])
def test_bad_configuration_is_bad_input(kwargs, message):
    with pytest.raises(BadInputError, match=message):
        IdleConfig(**kwargs)


def test_lists_from_a_config_file_are_taken_as_given():
    cfg = IdleConfig(action=["sudo", "shutdown", "-h", "now"], exclude_gpus=[2, 3])
    assert cfg.action == SHUTDOWN and cfg.exclude_gpus == frozenset({2, 3})




def test_replayed_h200_traces_through_the_policy():
    cfg = IdleConfig(window_s=3.0, grace_s=2.0, action=SHUTDOWN)
    idle = tt.replay("h200-1gpu-idle")
    policy = IdlePolicy(cfg, runner=never_run)
    decisions = [d for s in idle for d in policy.observe(s)]
    start = idle[0].time
    assert [(d.kind, d.gpu, (d.time - start).total_seconds()) for d in decisions] == [
        ("warn", 0, 3.0), ("warn", None, 3.0), ("act", None, 5.0)]
    # The idle H200 has GPM, so NVML's PCIe probe is not read, and the recording has no GPM
    # rates: PCIe is missing and the decision stands on activity and memory traffic.
    assert decisions[0].evidence[0].missing == ("pcie",)
    # Under load (frames 2-7) the episode restarts; two idle frames after it are not enough.
    load = tt.replay("h200-1gpu-load")
    policy = IdlePolicy(cfg, runner=never_run)
    assert [d for s in load for d in policy.observe(s)] == []
