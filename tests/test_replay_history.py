"""Replays stay out of the real history: `monitor --replay` keeps no history unless a store is
named with --db, and there its samples are host `replay:NAME`, which `cost idle` and other
history sums leave out. Real traces, real SQLite stores, the real commands."""

from __future__ import annotations

import json
import os
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pytest

from gpuaudit.model import GpuSample, Sample
from gpuaudit.store import ReplayHistory, Store, replay_hostname
from tests.support import cli
from tests.support.cli import ROOT

IDLE_TRACE = ROOT / "tests/fixtures/telemetry/h200-1gpu-idle.json"


def gpuaudit(*args: str, tmp_path: Path, **env: str) -> subprocess.CompletedProcess[str]:
    """With a user data folder of its own (the default store), no user catalog, no
    GPUAUDIT_DB."""
    return cli.gpuaudit(*args, env={"XDG_DATA_HOME": str(tmp_path / "data"),
                                    "GPUAUDIT_USER_CATALOG": os.devnull, "GPUAUDIT_DB": "",
                                    **env})


def replay(*args: str, tmp_path: Path, trace: Path = IDLE_TRACE, **env: str
           ) -> subprocess.CompletedProcess[str]:
    proc = gpuaudit("monitor", "--replay", str(trace), "--json", "--no-export", "--no-rules",
                    *args, tmp_path=tmp_path, **env)
    assert proc.returncode == 0, proc.stderr
    return proc


def frame_times(trace: Path = IDLE_TRACE) -> list[datetime]:
    return [datetime.fromisoformat(f["time"]) for f in json.loads(trace.read_text())["frames"]]


def test_a_replay_keeps_no_history_in_the_default_or_configured_store(tmp_path: Path) -> None:
    replay(tmp_path=tmp_path)  # history is on by default
    assert not (tmp_path / "data").exists()
    configured = tmp_path / "mine.db"
    with Store(configured) as store:  # the user's real store, named by GPUAUDIT_DB
        store.save_sample(Sample(time=frame_times()[0], hostname="n1", interval_s=1.0,
                                 gpus=(GpuSample(index=0, utilization_gpu_pct=0),)))
    asked = replay("--history", tmp_path=tmp_path, GPUAUDIT_DB=str(configured))
    assert "samples not kept in the history (give --db" in asked.stderr
    with Store(configured, read_only=True) as store:
        assert {p.hostname for p in store.history(since=None, replays=True)} == {"n1"}


def test_replayed_samples_are_kept_apart_and_idle_cost_leaves_them_out(tmp_path: Path) -> None:
    db = tmp_path / "explicit.db"
    times = frame_times()
    with Store(db) as store:  # a real host, idle (0 %) over the same minutes as the trace
        for t in times:
            store.save_sample(Sample(time=t, hostname="n1", interval_s=1.0,
                                     gpus=(GpuSample(index=0, utilization_gpu_pct=0),)))
    replay("--db", str(db), tmp_path=tmp_path)
    host = replay_hostname(json.loads(IDLE_TRACE.read_text())["hostname"])
    assert host == "replay:vm"

    with Store(db, read_only=True) as store:
        assert {p.hostname for p in store.history(since=None)} == {"n1"}
        both = store.history(since=None, replays=True)
        assert {p.hostname for p in both} == {"n1", host}
        assert len([p for p in both if p.hostname == host]) == len(times)

    window = ["--since", (times[0] - timedelta(seconds=30)).isoformat(),
              "--until", (times[-1] + timedelta(seconds=30)).isoformat()]
    price = ["--price-usd-per-gpu-hour", "3600", "--json", "--db", str(db)]
    real = gpuaudit("cost", "idle", *window, *price, tmp_path=tmp_path)
    assert real.returncode == 0, real.stderr
    only_n1 = gpuaudit("cost", "idle", *window, *price, "--host", "n1", tmp_path=tmp_path)
    replayed = gpuaudit("cost", "idle", *window, *price, "--host", host, tmp_path=tmp_path)
    hours = {name: json.loads(p.stdout)["idle_gpu_hours"]
             for name, p in (("all", real), ("n1", only_n1), ("replay", replayed))}
    assert hours["replay"] > 0 and hours["n1"] > 0  # the replay was idle too: asked, it counts
    assert hours["all"] == pytest.approx(hours["n1"])  # but not among the real hosts

    shown = gpuaudit("monitor", "history", *window, "--json", "--db", str(db), tmp_path=tmp_path)
    assert {p["hostname"] for p in json.loads(shown.stdout)["points"]} == {"n1", host}


def test_a_replay_dated_years_ahead_is_refused_and_expires_no_real_history(tmp_path: Path
                                                                           ) -> None:
    doc = json.loads(IDLE_TRACE.read_text())
    ahead = timedelta(days=3650)
    for frame in doc["frames"]:
        frame["time"] = (datetime.fromisoformat(frame["time"]) + ahead).isoformat()
    future = tmp_path / "future.json"
    future.write_text(json.dumps(doc))
    db = tmp_path / "s.db"
    real_time = datetime.now(timezone.utc).replace(microsecond=0) - timedelta(hours=2)
    with Store(db) as store:
        store.save_sample(Sample(time=real_time, hostname="n1", interval_s=1.0,
                                 gpus=(GpuSample(index=0, utilization_gpu_pct=7),)))
    proc = gpuaudit("monitor", "--replay", str(future), "--json", "--no-export", "--no-rules",
                    "--db", str(db), "--keep-raw", "1m", "--keep-rollups", "1h",
                    tmp_path=tmp_path)
    assert proc.returncode == 2 and "frame 0" in proc.stderr and "future" in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1
    with Store(db, read_only=True) as store:
        [kept] = store.history(since=None, hostname="n1", resolution="raw")
        assert kept.time == real_time and kept.utilization_gpu_pct == 7


def test_replay_history_marks_each_sample_once(tmp_path: Path) -> None:
    with Store(tmp_path / "s.db") as store:
        history = ReplayHistory(store)
        at = frame_times()[0]
        history.save_sample(Sample(time=at, hostname="vm", interval_s=1.0,
                                   gpus=(GpuSample(index=0),)))
        history.save_sample(Sample(time=at + timedelta(seconds=1), hostname="replay:vm",
                                   interval_s=1.0, gpus=(GpuSample(index=0),)))
        assert [p.hostname for p in store.history(since=None, replays=True)] == [
            "replay:vm", "replay:vm"]
        assert store.history(since=None) == []
