"""Replayed telemetry kept apart from the real history.

A replay (`monitor --replay`) is a recording played back, not this fleet's present: its
samples are stored, when a store is given at all, under the host name `replay:HOST`. No real
host has a colon in its name, and `Store.history` leaves these hosts out unless asked
(`replays=True`, or the exact host name), so idle-cost and other sums over the history never
count a replay as real GPU time.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from gpuaudit.model import Sample

from .store import Store
from .telemetry import REPLAY_HOST_PREFIX


def replay_hostname(hostname: str) -> str:
    """The host name a replayed sample of `hostname` is stored under."""
    return hostname if is_replay_host(hostname) else REPLAY_HOST_PREFIX + hostname


def is_replay_host(hostname: str) -> bool:
    return hostname.startswith(REPLAY_HOST_PREFIX)


class ReplayHistory:
    """The monitor's history for a replay: saves each sample under `replay:HOST`, and never
    compacts: compaction runs on the tick's clock, and a trace's clock (a recording from
    last year, or a frame dated years ahead) would expire real history by it. A live monitor
    on the same store rolls the replayed samples up in due time."""

    def __init__(self, store: Store) -> None:
        self.store = store

    def save_sample(self, sample: Sample) -> None:
        self.store.save_sample(sample.model_copy(
            update={"hostname": replay_hostname(sample.hostname)}))

    def compact(self, now: datetime, raw_retention: timedelta,
                rollup_retention: timedelta) -> None:
        return None
