"""A dynamic-batching server loop fed by Poisson arrivals, and the search for the highest QPS
whose p99 latency meets an SLO (MLPerf Inference's Server scenario).

The loop runs against a clock: the real one (the model really runs; latencies are wall time)
or a virtual one whose `service` advances time by a given service time — the same code, so CI
checks the batching and the search with exact values. Arrivals are an open loop (requests come
when the schedule says, whatever the server is doing), as MLPerf's LoadGen sends them.

Batching rule (Triton's dynamic batcher): when a request is waiting, the server dispatches as
soon as `max_batch` requests are waiting or the oldest has waited `max_wait_s`, whichever is
first; a batch takes at most `max_batch` requests, oldest first.
"""

from __future__ import annotations

import bisect
import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from gpuaudit.percentile import percentile


class RealClock:
    """Wall time. `sleep_until` sleeps, then spins the last fraction of a millisecond:
    time.sleep overshoots by 50–100 µs, as much as a small batch's whole wait."""

    SPIN_S = 0.0003

    def now(self) -> float:
        return time.perf_counter()

    def sleep_until(self, t: float) -> None:
        ahead = t - time.perf_counter()
        if ahead > self.SPIN_S:
            time.sleep(ahead - self.SPIN_S)
        while time.perf_counter() < t:
            pass


@dataclass
class VirtualClock:
    """Simulated time: sleeping jumps to the deadline; `serve(k)` lasts service_s(k)."""

    service_s: Callable[[int], float]
    t: float = 0.0

    def now(self) -> float:
        return self.t

    def sleep_until(self, t: float) -> None:
        self.t = max(self.t, t)

    def serve(self, k: int) -> None:
        self.t += self.service_s(k)


def unit_arrivals(n: int, seed: int = 0) -> list[float]:
    """Arrival times of n requests of a Poisson process of rate 1 (exponential gaps,
    random.Random(seed).expovariate). Divide by a rate to get that rate's schedule: every QPS
    tried in a search sees the same pattern, scaled (common random numbers)."""
    rng = random.Random(seed)
    t, out = 0.0, []
    for _ in range(n):
        t += rng.expovariate(1.0)
        out.append(t)
    return out


def poisson_arrivals(qps: float, n: int, seed: int = 0) -> list[float]:
    if qps <= 0:
        raise ValueError("qps must be positive")
    return [t / qps for t in unit_arrivals(n, seed)]


@dataclass(frozen=True)
class BatchPolicy:
    max_batch: int
    max_wait_s: float

    def __post_init__(self) -> None:
        if self.max_batch < 1 or self.max_wait_s < 0:
            raise ValueError("max_batch ≥ 1 and max_wait_s ≥ 0")


@dataclass(frozen=True)
class ServeResult:
    offered_qps: float
    latencies_s: tuple[float, ...]  # per request, completion − arrival, in arrival order
    batches: tuple[int, ...]  # requests per dispatched batch, in order
    duration_s: float  # first arrival to last completion

    @property
    def p99_s(self) -> float:
        return percentile(self.latencies_s, 99)

    @property
    def p50_s(self) -> float:
        return percentile(self.latencies_s, 50)

    @property
    def achieved_qps(self) -> float:
        return len(self.latencies_s) / self.duration_s if self.duration_s > 0 else 0.0

    @property
    def mean_batch(self) -> float:
        return sum(self.batches) / len(self.batches) if self.batches else 0.0


def serve(arrivals: Sequence[float], policy: BatchPolicy, service: Callable[[int], None],
          clock: RealClock | VirtualClock, *, offered_qps: float = 0.0) -> ServeResult:
    """Serve every request of `arrivals` (seconds from the start, ascending): `service(k)`
    runs one batch of k requests and returns when its results are ready."""
    n = len(arrivals)
    if n == 0:
        raise ValueError("no requests")
    start = clock.now()
    latencies = [0.0] * n
    batches: list[int] = []
    i = 0
    while i < n:
        now = clock.now() - start
        if arrivals[i] > now:  # idle until the next request comes
            clock.sleep_until(start + arrivals[i])
            now = clock.now() - start
        last = i + policy.max_batch - 1
        full_at = arrivals[last] if last < n else math.inf
        dispatch_at = min(arrivals[i] + policy.max_wait_s, full_at)
        if dispatch_at > now:
            clock.sleep_until(start + dispatch_at)
            now = clock.now() - start
        k = bisect.bisect_right(arrivals, now, lo=i, hi=min(n, i + policy.max_batch)) - i
        k = max(k, 1)
        service(k)
        done = clock.now() - start
        for j in range(i, i + k):
            latencies[j] = done - arrivals[j]
        batches.append(k)
        i += k
    return ServeResult(offered_qps=offered_qps, latencies_s=tuple(latencies),
                       batches=tuple(batches), duration_s=done - arrivals[0])


@dataclass(frozen=True)
class Trial:
    qps: float
    p99_s: float
    ok: bool


@dataclass(frozen=True)
class QpsSearch:
    max_qps: float  # highest QPS tried whose p99 met the SLO (0: none did)
    slo_s: float
    trials: tuple[Trial, ...] = field(default_factory=tuple)

    @property
    def p99_at_max_s(self) -> float | None:
        ok = [t for t in self.trials if t.ok and t.qps == self.max_qps]
        return ok[-1].p99_s if ok else None


def find_max_qps(p99_at: Callable[[float], float], slo_s: float, lo: float, hi: float, *,
                 rel_tol: float = 0.02, max_trials: int = 12) -> QpsSearch:
    """Bisect [lo, hi] for the highest QPS whose p99 (from `p99_at(qps)`) is ≤ `slo_s`.

    `hi` is tried first (a server that meets the SLO at its peak throughput needs no search),
    then `lo` (one that misses it even at a light load has no answer), then midpoints until
    the bracket is within `rel_tol` of its top or `max_trials` are spent."""
    if not 0 < lo < hi:
        raise ValueError("need 0 < lo < hi")
    trials: list[Trial] = []

    def trial(q: float) -> bool:
        p99 = p99_at(q)
        trials.append(Trial(q, p99, p99 <= slo_s))
        return p99 <= slo_s

    if trial(hi):
        return QpsSearch(hi, slo_s, tuple(trials))
    if not trial(lo):
        return QpsSearch(0.0, slo_s, tuple(trials))
    while len(trials) < max_trials and (hi - lo) > rel_tol * hi:
        mid = (lo + hi) / 2
        if trial(mid):
            lo = mid
        else:
            hi = mid
    return QpsSearch(lo, slo_s, tuple(trials))


def requests_for(qps: float, duration_s: float, minimum: int) -> int:
    """Requests in one trial: `duration_s` worth at `qps`, at least `minimum` (p99 of fewer
    than a few hundred requests is the few slowest)."""
    return max(minimum, math.ceil(qps * duration_s))
