"""The host's work of a step at its recorded batch, issued with the device held
(`workloads.hosttime.held_host`), and how a precision change takes it
(`predict.grouped.held_ratio`, `source_host_ms`): checked on the bidirectional LSTM recorded
in bf16 and fp32 on an H200 (a recording that predates the held timing, with rounds planted,
and one that timed them); its decisions on a simulated held device; on a GPU, on real
steps."""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import statistics

import pytest

from gpuaudit.predict import Change, grouped, load_profile, predict
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import h200_rates, zoo_rows, zoo_run

ROOT = FIXTURES.parents[1]
SPECS = load_catalog()
RATES = h200_rates(SPECS)
# each round's issue time (ms) of one step at batch 128, as the held timing keeps them
BF16 = (20.0, 21.0, 19.0, 22.0, 20.5, 21.5, 19.5, 20.0)
TF32 = tuple(b * r for b, r in zip(BF16, (1.0, 1.1, 0.9, 1.05, 1.0, 0.95, 1.0, 1.2),
                                   strict=True))
FP32 = tuple(0.85 * b for b in BF16)


@pytest.fixture(scope="module")
def run():
    return zoo_run("lstm-h200-run")



def _planted(run, precision, held):
    prof = load_profile(run, f"lstm-tagger/{precision}")
    return dataclasses.replace(prof, record=prof.record.model_copy(
        update={"host_held_ms": held}))


def test_the_ratio_is_the_median_of_the_rounds_and_the_base_their_median(run):
    rec = _planted(run, "bf16", {"bf16": BF16, "tf32": TF32}).record
    ratio, unc = grouped.held_ratio(rec, "bf16", "tf32")
    ratios = sorted(t / b for b, t in zip(BF16, TF32, strict=True))
    assert ratio == pytest.approx(statistics.median(ratios))
    q1, _, q3 = statistics.quantiles(ratios, n=4, method="inclusive")
    assert unc == pytest.approx(max(grouped.U_HOST_RATIO, (q3 - q1) / 2 / ratio))
    assert grouped.source_host_ms(rec) == pytest.approx(statistics.median(BF16))
    # one side untimed: no ratio; nothing timed: the base is the step at batch 1
    assert grouped.held_ratio(rec, "bf16", "fp32") is None
    plain = load_profile(run, "lstm-tagger/bf16").record
    assert grouped.source_host_ms(plain) == plain.host_step_ms


def test_a_tf32_step_whose_host_work_does_not_fall_keeps_the_hosts_time(run):
    """From the bf16 recording, the batch-1 steps say the host's work falls × 0.77 without
    autocast (fp32 at batch 1), and the tf32 step comes out at the device's time; where the
    step at batch 128 issues as slowly in tf32 as in bf16, the host binds it at about the bf16
    step's own time, and the basis says which timing set it."""
    plain = predict(load_profile(run, "lstm-tagger/bf16"), RATES, Change(precision="tf32"),
                    SPECS)
    held = predict(_planted(run, "bf16", {"bf16": BF16, "tf32": TF32}), RATES,
                   Change(precision="tf32"), SPECS)
    bf16_step = load_profile(run, "lstm-tagger/bf16").record.step_ms
    assert any("autocast switched off" in b for b in plain.basis)
    assert any("issued with the device held" in b for b in held.basis)
    assert not any("autocast switched" in b for b in held.basis)
    assert held.step_ms > 1.2 * plain.step_ms
    assert held.step_ms == pytest.approx(bf16_step, rel=0.05)
    assert held.step_ms_low < held.step_ms < held.step_ms_high


def test_fp32_to_tf32_takes_the_host_change_that_batch_1_cannot_see(run):
    """fp32 → tf32 keeps the host as it is where only the step at batch 1 was timed (both
    are one precision family there); with the held rounds its host work moves by their
    ratio, from the held fp32 step's issue time as the base."""
    timed = {"fp32": FP32, "tf32": TF32}
    a = predict(load_profile(run, "lstm-tagger/fp32"), RATES, Change(precision="tf32"),
                SPECS)
    b = predict(_planted(run, "fp32", timed), RATES, Change(precision="tf32"), SPECS)
    assert not any("host's work per step" in x for x in a.basis)
    ratio, _ = grouped.held_ratio(_planted(run, "fp32", timed).record, "fp32", "tf32")
    assert any(f"host's work per step × {ratio:.2f}" in x for x in b.basis)
    assert b.step_ms > a.step_ms


def test_off_a_gpu_nothing_is_held_and_the_profile_keeps_the_batch_1_step(monkeypatch):
    """On the CPU a step's host work and its device's are one: nothing is timed held, and
    the recording falls back to its step at batch 1."""
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.hosttime import held_host
    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.trainer import Trainer

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))
    t = Trainer("zoo.mlp:build", TrainMode("fp32"), torch.device("cpu"), batch_size=2)
    notes: list[str] = []
    assert held_host(t, notes, 1.0) == {} and not notes


@pytest.mark.gpu
def test_held_host_times_each_precision_and_refuses_a_step_that_syncs(tmp_path, monkeypatch):
    """On a GPU: the zoo's MLP issues a step in the recorded precision and the three others,
    every round; a step of about 1,800 launches on one stream (900 in its forward, 900 in its
    backward) is timed in its phases, and one whose backward alone is longer than the launch
    queue, with its backward cut in parts; a model whose forward reads a value back (`.item()`)
    waits on the held device, and none is kept, with a note."""
    torch = pytest.importorskip("torch")
    if not torch.cuda.is_available():
        pytest.skip("needs a CUDA GPU")
    from gpuaudit.workloads.hosttime import HELD_PRECISIONS, held_host
    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.trainer import Trainer

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))
    (tmp_path / "syncing.py").write_text(
        "import torch\n"
        "class Net(torch.nn.Module):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.fc = torch.nn.Linear(64, 8)\n"
        "    def forward(self, x):\n"
        "        out = self.fc(x)\n"
        "        if out.sum().item() > 1e30:\n"
        "            out = out * 0\n"
        "        return out\n"
        "class Chain(Net):\n"
        "    def forward(self, x):\n"
        "        out = self.fc(x)\n"
        "        for _ in range(900):\n"
        "            out = out * 1.0001\n"
        "        return out\n"
        "class Scaled(Net):\n"
        "    def __init__(self):\n"
        "        super().__init__()\n"
        "        self.ws = torch.nn.ParameterList(\n"
        "            torch.nn.Parameter(torch.ones(8)) for _ in range(500))\n"
        "    def forward(self, x):\n"
        "        out = self.fc(x)\n"
        "        for w in self.ws:\n"
        "            out = out * w\n"
        "        return out\n"
        "def _batch(n):\n"
        "    return (torch.randn(n, 64),), torch.randint(0, 8, (n,))\n"
        "def build():\n"
        "    return {'model': Net(), 'batch_size': 32, 'make_batch': _batch}\n"
        "def build_chain():\n"
        "    return {'model': Chain(), 'batch_size': 32, 'make_batch': _batch}\n"
        "def build_scaled():\n"
        "    return {'model': Scaled(), 'batch_size': 32, 'make_batch': _batch}\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    device = torch.device("cuda", 0)
    t = Trainer("zoo.mlp:build", TrainMode("bf16"), device, batch_size=64)
    t.warm_up(2, 0.0)
    notes: list[str] = []
    got = held_host(t, notes, 5.0, rounds=3)
    assert set(got) == {"bf16", *HELD_PRECISIONS} and not notes
    assert all(len(v) == 3 and min(v) > 0 for v in got.values())
    # the LSTM's 2,700 kernels a step: two steps overfill an H200's launch queue, the first
    # step after a sync is timed instead, and said
    lstm = Trainer("zoo.lstm:build", TrainMode("bf16"), device, batch_size=128)
    lstm.warm_up(2, 0.0)
    queued: list[str] = []
    got = held_host(lstm, queued, 20.0, rounds=2)
    assert set(got) == {"bf16", *HELD_PRECISIONS}
    assert all(len(v) == 2 and 1.0 < min(v) < 200.0 for v in got.values())
    assert all("waits on its device" not in n for n in queued)
    chain = Trainer("syncing:build_chain", TrainMode("bf16"), device, batch_size=32)
    chain.warm_up(2, 0.0)
    parted: list[str] = []
    got = held_host(chain, parted, 20.0, rounds=2)
    assert set(got) == {"bf16", *HELD_PRECISIONS}
    assert any("each timed after a sync" in n for n in parted)
    assert all(len(v) == 2 and 1.0 < min(v) < 500.0 for v in got.values())
    # 500 scalings by a parameter each: a forward of about 500 launches, a backward of
    # about 1,500 (a product and a reduction for each scale's gradient), cut in parts
    scaled = Trainer("syncing:build_scaled", TrainMode("bf16"), device, batch_size=32)
    scaled.warm_up(2, 0.0)
    cut: list[str] = []
    got = held_host(scaled, cut, 20.0, rounds=2)
    assert set(got) == {"bf16", *HELD_PRECISIONS}, cut
    assert any("the backward in" in n for n in cut), cut
    assert all(len(v) == 2 and 1.0 < min(v) < 500.0 for v in got.values())
    s = Trainer("syncing:build", TrainMode("fp32"), device, batch_size=32)
    s.warm_up(2, 0.0)
    assert held_host(s, notes, 1.0, rounds=2) == {}
    assert any("waits on its device" in n for n in notes)


def test_the_recorded_lstms_tf32_host_work_grows_with_the_batch_as_the_docs_say():
    """The H200 probe of the bidirectional LSTM (`validation/predict/host_at_batch.py`): each
    step issued with the device held, at batch 1 and 128. tf32's issue time grows with the
    batch by a third, fp32's and bf16's by less; the figures the docs and `held_ratio`
    cite are the medians; and issued right after a sync, a host-bound step at batch 1 takes
    6–8 % longer than its pace in a loop (why the held timing times the second of two)."""
    import json

    rows = {(r["precision"], r["batch"]): r for r in json.loads(
        (FIXTURES / "predict" / "zoo" / "lstm-host-at-batch-h200.json").read_text())["rows"]}

    def issued(p, b):
        return statistics.median(rows[(p, b)]["issued_held_ms"])

    grown = {p: issued(p, 128) / issued(p, 1) for p in ("bf16", "fp32", "tf32")}
    assert grown["tf32"] > 1.3 and grown["fp32"] < 1.2 and grown["bf16"] < 1.1
    assert [(round(issued(p, 1)), round(issued(p, 128))) for p in ("tf32", "fp32", "bf16")] \
        == [(15, 21), (16, 18), (20, 21)]
    for p in ("bf16", "fp32", "tf32"):
        loop = statistics.median(rows[(p, 1)]["step_rounds_ms"])
        assert 1.06 <= issued(p, 1) / loop <= 1.085
    # the tf32 step at 128 ran above its host's time at batch 1, with more kernels than bf16's
    step = statistics.median(rows[("tf32", 128)]["step_rounds_ms"])
    assert step > statistics.median(rows[("tf32", 1)]["step_rounds_ms"])
    assert rows[("tf32", 128)]["kernels"] > rows[("bf16", 128)]["kernels"]


def test_the_lstms_tf32_cases_recorded_with_the_held_timing_meet_their_measurements():
    """The 14th zoo recording: the LSTM profiled in bf16 and fp32 with its host's work timed
    held. Its tf32 predictions land within 10.5 % of the tf32 step measured on that loan,
    inside their band; the same recording without the held rounds (the batch-1 steps'
    rule) predicts them over a quarter too fast, as every earlier slow host's did."""

    run = zoo_run("lstm-held-h200-run")
    rows = {r["case"]: r for r in zoo_rows("fourteenth") if r.get("measured")}
    for src in ("bf16", "fp32"):
        prof = load_profile(run, f"lstm-tagger/{src}")
        assert set(prof.record.host_held_ms) == {"bf16", "fp32", "tf32"}
        bare = dataclasses.replace(prof, record=prof.record.model_copy(
            update={"host_held_ms": {}}))
        row = rows[f"{src} → tf32"]
        held = predict(prof, RATES, Change(precision="tf32"), SPECS)
        old = predict(bare, RATES, Change(precision="tf32"), SPECS)
        per_s = 128 * 1e3 / held.step_ms
        assert abs(per_s / row["measured"] - 1) < 0.105
        assert row["low"] <= row["measured"] <= row["high"]
        assert 128 * 1e3 / old.step_ms > 1.25 * row["measured"]


class _Device:
    """A held device on a virtual clock: a hold ends `hold_ms` of virtual time after it is
    queued. A step is three phases (forward, backward, optimizer) of `launches` launches,
    issued in `issue_ms` of host time all told; the launch queue holds `queue_steps` steps'
    launches past a hold, and a launch that finds it full waits for the hold to end (the
    device then runs what was queued at once), as does a step that syncs. The backward is
    forward and backward are issued in as many parts as `phase_cuts` asks, calling its
    `cut(phase)` between them."""

    def __init__(self, issue_ms: float, queue_steps: float = 2, syncs: bool = False,
                 clock: float = 1.0, launches: tuple[int, int, int] = (100, 100, 100)):
        self.now = 0.0
        self.hold_end = 0.0
        self.queued = 0
        self.syncs, self.clock, self.launches = syncs, clock, launches
        self.per_ms = issue_ms / sum(launches)
        self.capacity = queue_steps * sum(launches)
        self.phases = tuple(functools.partial(self._phase, i) for i in range(3))
        self.parts: dict[int, int] = {}
        self.cut = None
        self.parts_asked: list[dict[int, int]] = []

    def sleep(self, cycles: int) -> None:  # cycles at 1,000 a µs: ms = cycles / 1e6 / clock
        self.hold_end = self.now + cycles / 1e6 / self.clock
        self.queued = 0

    @contextlib.contextmanager
    def cuts(self, trainer, parts, cut):
        self.parts, self.cut = dict(parts), cut
        self.parts_asked.append(dict(parts))
        try:
            yield
        finally:
            self.parts, self.cut = {}, None

    def _issue(self, n: int) -> None:
        held = self.now < self.hold_end
        room = max(0, int(self.capacity - self.queued)) if held else n
        if room >= n:
            self.now += self.per_ms * n
            self.queued += n
        else:  # fill the queue, wait for the hold, then issue the rest
            self.now = max(self.now + self.per_ms * room, self.hold_end) \
                + self.per_ms * (n - room)
            self.queued = 0

    def _phase(self, i: int) -> None:
        n = self.launches[i]
        parts = self.parts.get(i, 1)
        for k in range(parts):
            if k:
                self.cut(i)
            self._issue(n * (k + 1) // parts - n * k // parts)
        if self.syncs:
            self.now = max(self.now, self.hold_end)

    def sync(self, *_: object) -> None:
        self.now = max(self.now, self.hold_end)
        self.queued = 0


def _held_on(monkeypatch, dev: _Device, hold_ms: float, between=None):
    torch = pytest.importorskip("torch")
    import types

    from gpuaudit.bench import timing as bench_timing
    from gpuaudit.workloads import hosttime, precision, timing

    class Event:
        def __init__(self, enable_timing: bool = False):
            self.at = None

        def record(self) -> None:
            self.at = dev.hold_end if dev.hold_end > dev.now else dev.now

        def query(self) -> bool:
            return dev.now >= self.at

        def elapsed_time(self, other: Event) -> float:
            return other.at - self.at

    monkeypatch.setattr(torch.cuda, "_sleep", dev.sleep)
    monkeypatch.setattr(torch.cuda, "Event", Event)
    monkeypatch.setattr(bench_timing, "spin_cycles_per_us", lambda _: 1000.0)
    monkeypatch.setattr(timing, "is_cuda", lambda _: True)
    monkeypatch.setattr(timing, "sync", dev.sync)
    monkeypatch.setattr(precision, "float32_matmuls", lambda *a, **k: contextlib.nullcontext())
    monkeypatch.setattr(hosttime, "eager_phases", lambda t, p: dev.phases)
    monkeypatch.setattr(hosttime, "phase_cuts", dev.cuts)
    monkeypatch.setattr(hosttime, "time", types.SimpleNamespace(
        perf_counter=lambda: dev.now / 1e3))
    trainer = types.SimpleNamespace(device="cuda", mode=types.SimpleNamespace(precision="bf16"),
                                    workload=types.SimpleNamespace(batch_size=128))
    notes: list[str] = []
    return hosttime.held_host(trainer, notes, hold_ms, rounds=3, between=between), notes


def test_held_timing_keeps_the_second_step_where_the_queue_holds_both(monkeypatch):
    got, notes = _held_on(monkeypatch, _Device(issue_ms=20.0), hold_ms=60.0)
    assert set(got) == {"bf16", "fp32", "tf32"} and not notes
    assert all(v == (20.0, 20.0, 20.0) for v in got.values())


def test_a_full_launch_queue_times_the_first_step_and_says_so(monkeypatch):
    """The second step's launches wait for the hold though it had room for two: every
    precision keeps its first step, with a note; a hold first too short for one step grows,
    and a spin whose cycles were counted at half the clock it runs at still counts as room
    (the hold is read off the device)."""
    dev = _Device(issue_ms=100.0, queue_steps=1, clock=2.0)
    got, notes = _held_on(monkeypatch, dev, hold_ms=10.0)
    assert set(got) == {"bf16", "fp32", "tf32"}
    assert all(v == (100.0, 100.0, 100.0) for v in got.values())
    assert any("launch queue does not hold two steps" in n for n in notes)


class _DriftingDevice(_Device):
    """A host that slows within each round: every step issued after the round's start
    (`between`) takes `drift` × the base longer than the one before it."""

    def __init__(self, issue_ms: float, drift: float):
        super().__init__(issue_ms)
        self.base, self.drift, self.steps = self.per_ms, drift, 0

    def _phase(self, i: int) -> None:
        self.per_ms = self.base * (1 + self.drift * self.steps)
        super()._phase(i)
        self.steps += i == 2  # the optimizer's phase ends a step

    def new_round(self, _: int) -> None:
        self.steps = 0


def test_the_held_order_is_reversed_every_other_round_so_a_drift_leaves_the_ratios(
        monkeypatch):
    """A host slowing by 5 % a step within each round: timed in one order, the precision
    timed last reads ~27 % slower than the first (each precision's warm step, then its two
    held ones, the second timed: steps 2, 5 and 8 of the round), and a precision change
    would take it as autocast's host work; with the order reversed every other round each
    pair's ratios straddle 1 and their median (as `held_ratio` reads them) stays within 3 %."""
    dev = _DriftingDevice(issue_ms=20.0, drift=0.05)
    got, notes = _held_on(monkeypatch, dev, hold_ms=200.0, between=dev.new_round)
    assert not notes and list(got) == ["bf16", "fp32", "tf32"]
    first = {p: v[0] for p, v in got.items()}  # round 0: bf16, fp32, tf32
    assert first["tf32"] / first["bf16"] == pytest.approx(1.4 / 1.1, rel=0.02)
    second = {p: v[1] for p, v in got.items()}  # round 1: tf32, fp32, bf16
    assert second["bf16"] / second["tf32"] == pytest.approx(1.4 / 1.1, rel=0.02)
    even = {p: v[:2] for p, v in got.items()}  # one round of each order
    for p in ("fp32", "tf32"):
        ratios = [b / a for a, b in zip(even["bf16"], even[p], strict=True)]
        assert statistics.median(ratios) == pytest.approx(1.0, abs=0.03)


def test_each_held_round_follows_its_round_at_batch_1_and_a_retry_times_them_again(
        monkeypatch):
    """`between(i)` runs before round i's held steps (the rounds at batch 1 interleaved, so
    both are read at one pace); where the whole step waits and the phases are timed instead,
    the rounds start over and round 0 at batch 1 is timed again, so the pairs stay a moment
    apart."""
    calls: list[int] = []
    got, _ = _held_on(monkeypatch, _Device(issue_ms=20.0), hold_ms=60.0, between=calls.append)
    assert calls == [0, 1, 2] and all(len(v) == 3 for v in got.values())
    calls.clear()
    got, notes = _held_on(monkeypatch, _Device(issue_ms=30.0, queue_steps=0.8), hold_ms=15.0,
                          between=calls.append)
    assert any("each timed after a sync" in n for n in notes)
    assert calls[-3:] == [0, 1, 2] and calls.count(0) == 2


def test_paired_held_rounds_give_the_base_as_batch_1_times_their_ratio(run):
    """Held rounds timed beside the rounds at batch 1: the base is the step at batch 1 × the
    median of the rounds' ratios, so a pace that slowed for the last rounds (both read
    slower) leaves it where the rounds' ratio puts it; unpaired, the held median."""
    plain = load_profile(run, "lstm-tagger/bf16").record
    b1 = (10.0, 10.0, 10.0, 10.0, 14.0, 14.0, 14.0, 14.0)
    held = tuple(1.1 * b for b in b1)
    rec = plain.model_copy(update={"host_rounds_ms": b1, "host_step_ms": 10.5,
                                   "host_held_ms": {"bf16": held}})
    assert grouped.source_host_ms(rec) == pytest.approx(statistics.median(held))
    paired = rec.model_copy(update={"host_held_paired": True})
    assert grouped.source_host_ms(paired) == pytest.approx(10.5 * 1.1)
    # paired, but with too few rounds at batch 1 to pair: the held median
    short = paired.model_copy(update={"host_rounds_ms": (10.0,)})
    assert grouped.source_host_ms(short) == pytest.approx(statistics.median(held))


def test_host_time_times_every_round_at_batch_1_off_a_gpu_and_pairs_nothing(monkeypatch):
    """On the CPU nothing is held, so the rounds at batch 1 are all timed by `host_time`
    itself, each beside the other precision family, and the recorded batch is put back."""
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.hosttime import host_time
    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.trainer import Trainer

    monkeypatch.syspath_prepend(str(ROOT / "examples" / "predict"))
    t = Trainer("zoo.mlp:build", TrainMode("fp32"), torch.device("cpu"), batch_size=4)
    keep = t.inputs
    got = host_time(t, [], rounds=3, steps=2)
    assert got is not None and not got.paired and got.held_ms == {}
    assert len(got.rounds_ms) == 3 and len(got.alt_rounds_ms) in (0, 3)
    assert got.step_ms > 0 and t.inputs is keep


def test_host_time_takes_batch_2_where_the_model_cannot_train_on_one_sample(tmp_path,
                                                                           monkeypatch):
    """BatchNorm1d over (N, C) features raises on one sample in training: the host's rounds
    are timed at batch 2 instead, and the record says so; a model that fails at both is
    not timed, the note naming both."""
    torch = pytest.importorskip("torch")
    from gpuaudit.workloads.hosttime import host_time
    from gpuaudit.workloads.precision import TrainMode
    from gpuaudit.workloads.trainer import Trainer

    (tmp_path / "bnmlp.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "def build():\n"
        "    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 3))\n"
        "    return m, lambda n: (torch.randn(n, 8), torch.randint(0, 3, (n,)))\n"
        "def pairs():  # splits its batch in two halves: an odd batch fails\n"
        "    m = nn.Linear(8, 3)\n"
        "    def make(n):\n"
        "        if n < 4:\n"
        "            raise ValueError(f'needs 4 samples, got {n}')\n"
        "        return torch.randn(n, 8), torch.randint(0, 3, (n,))\n"
        "    return m, make\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    t = Trainer("bnmlp:build", TrainMode("fp32"), torch.device("cpu"), batch_size=4)
    notes: list[str] = []
    got = host_time(t, notes, rounds=2, steps=2)
    assert got is not None and got.batch == 2 and len(got.rounds_ms) == 2
    assert t.inputs[0].shape[0] == 4
    assert any(n.startswith("host time measured at batch 2 (batch 1: Expected more than 1 "
                            "value per channel") for n in notes), notes
    t = Trainer("bnmlp:pairs", TrainMode("fp32"), torch.device("cpu"), batch_size=4)
    notes = []
    assert host_time(t, notes, rounds=2, steps=2) is None
    assert notes == ["host time not measured: batch 1: needs 4 samples, got 1; "
                     "batch 2: needs 4 samples, got 2"]


def test_a_step_longer_than_the_launch_queue_is_timed_in_its_phases(monkeypatch):
    """A step of more launches than the queue holds waits for any hold: its forward,
    backward and optimizer step are each issued behind a hold of their own after a sync, and
    their times summed, in every precision, with a note; a phase longer than the queue too
    keeps nothing."""
    got, notes = _held_on(monkeypatch, _Device(issue_ms=30.0, queue_steps=0.8), hold_ms=15.0)
    assert set(got) == {"bf16", "fp32", "tf32"}
    assert all(v == pytest.approx((30.0, 30.0, 30.0)) for v in got.values())
    assert any("each timed after a sync" in n for n in notes)
    got, notes = _held_on(monkeypatch, _Device(issue_ms=30.0, queue_steps=0.2), hold_ms=15.0)
    assert got == {} and any("waits on its device" in n for n in notes)


def test_a_backward_longer_than_the_launch_queue_is_cut_where_gradients_accumulate(
        monkeypatch):
    """A backward of more launches than the queue holds (the diffusion U-Net's on an H200),
    behind a forward that fits: it is cut into 2, then 4 parts, each issued after a sync
    behind its own hold, and the parts' times summed, the same cut in every precision, the
    forward left whole; one still longer than the queue in `PARTS_MAX` parts keeps nothing."""
    from gpuaudit.workloads.hosttime import BACKWARD, FORWARD, PARTS_MAX

    dev = _Device(issue_ms=60.0, queue_steps=250 / 750, launches=(100, 600, 50))
    got, notes = _held_on(monkeypatch, dev, hold_ms=15.0)
    assert set(got) == {"bf16", "fp32", "tf32"}
    assert all(v == pytest.approx((60.0, 60.0, 60.0)) for v in got.values())
    asked = [(a[FORWARD], a[BACKWARD]) for a in dev.parts_asked]
    assert asked[0] == (1, 1) and asked[-1] == (1, 4)
    assert set(asked[asked.index((1, 4)):]) == {(1, 4)}
    assert any("(the backward in 4 parts" in n for n in notes)
    dev = _Device(issue_ms=60.0, queue_steps=250 / 2550, launches=(100, 2400, 50))
    got, notes = _held_on(monkeypatch, dev, hold_ms=15.0)
    assert got == {} and max(a[BACKWARD] for a in dev.parts_asked) == PARTS_MAX
    assert any("waits on its device" in n for n in notes)


def test_a_forward_longer_than_the_launch_queue_is_cut_after_its_leaf_modules(monkeypatch):
    """A forward of more launches than the queue holds (a user's T5 v1.1 on an H100, whose
    held timing kept nothing while only the backward could be cut): it is cut too, and only
    the phases that waited are cut finer, so a forward that fits in 2 parts stays at 2 while
    its backward goes on to 4."""
    from gpuaudit.workloads.hosttime import BACKWARD, FORWARD

    dev = _Device(issue_ms=60.0, queue_steps=250 / 750, launches=(300, 400, 50))
    got, notes = _held_on(monkeypatch, dev, hold_ms=15.0)
    assert set(got) == {"bf16", "fp32", "tf32"}
    assert all(v == pytest.approx((60.0, 60.0, 60.0)) for v in got.values())
    assert (dev.parts_asked[-1][FORWARD], dev.parts_asked[-1][BACKWARD]) == (2, 2)
    assert any("(the forward in 2 parts, cut after its leaf modules; the backward in 2 parts"
               in n for n in notes), notes
    dev = _Device(issue_ms=60.0, queue_steps=250 / 1150, launches=(400, 700, 50))
    got, notes = _held_on(monkeypatch, dev, hold_ms=15.0)
    assert (dev.parts_asked[-1][FORWARD], dev.parts_asked[-1][BACKWARD]) == (2, 4)
    assert all(v == pytest.approx((60.0, 60.0, 60.0)) for v in got.values())


def test_phase_cuts_fire_between_a_real_models_layers_and_are_removed():
    """On a CPU model of eight linear layers (16 parameters), 4 parts: in the forward a cut
    after layers 2, 4 and 6 have run (each when the layers before it have and the ones after
    it have not); in the backward once the gradients of parameters 12, 8 and 4 are
    accumulated, in that order, each when the layers after it have their gradients and the
    ones before it none; none once the block ends."""
    torch = pytest.importorskip("torch")
    import types

    from gpuaudit.workloads.hosttime import BACKWARD, FORWARD, phase_cuts

    net = torch.nn.Sequential(*(torch.nn.Linear(4, 4) for _ in range(8)))
    params = list(net.parameters())
    ran: list[int] = []
    for i, layer in enumerate(net):
        layer.register_forward_pre_hook(lambda *_, i=i: ran.append(i))
    seen: list[tuple[int, int]] = []

    def cut(phase: int) -> None:
        done = len(ran) if phase == FORWARD else sum(q.grad is not None for q in params)
        seen.append((phase, done))

    with phase_cuts(types.SimpleNamespace(net=net), {FORWARD: 4, BACKWARD: 4}, cut):
        net(torch.randn(2, 4)).sum().backward()
    # at the cut on parameter 12 (layer 6's weight), layers 6 and 7 have their gradients
    assert seen == [(FORWARD, 2), (FORWARD, 4), (FORWARD, 6),
                    (BACKWARD, 4), (BACKWARD, 8), (BACKWARD, 12)]
    for q in params:
        q.grad = None
    net(torch.randn(2, 4)).sum().backward()
    assert len(seen) == 6


def test_a_step_that_syncs_keeps_nothing(monkeypatch):
    got, notes = _held_on(monkeypatch, _Device(issue_ms=20.0, syncs=True), hold_ms=10.0)
    assert got == {} and any("waits on its device" in n for n in notes)


def test_a_step_held_at_its_batch_keeps_its_hosts_pace_and_fills_the_rest_with_gaps(
        monkeypatch):
    """The 15th zoo recording: MobileNetV2's fp32 step, 25.7 ms, replays in 25.2 at its host's
    pace held at batch 256 (16.0 ms), the device waiting on launches 10 % of the replay; a gap
    of about a microsecond between its queued kernels fills the rest. Its tf32 prediction
    then meets the tf32 step measured on that loan, inside its band. Where the held pace was
    doubted as a step at batch 1 is (α raised until the replay lasts the step), the host came
    out at 25 ms, and tf32 was predicted slower than fp32, a fifth slower than measured."""

    from gpuaudit.predict import timeline as tlm

    prof = load_profile(zoo_run("mobilenet-held-h200-run"), "mobilenet-v2/fp32")
    rec = prof.record
    row = next(r for r in zoo_rows("fifteenth")
               if r["case"] == "fp32 → tf32" and r["family"].startswith("MobileNetV2"))
    held_ms = statistics.median(rec.host_held_ms["fp32"])
    rep = tlm.calibrate(rec.timeline, rec.step_ms * 1e3, held_ms * 1e3, held=True)
    assert rep.alpha == pytest.approx(held_ms * 1e3 / tlm.host_us(rec.timeline))
    assert 0 < rep.gap_us <= tlm.queued_gap_us(rec.timeline)
    assert rep.period_us == pytest.approx(rec.step_ms * 1e3, rel=1e-3)

    got = predict(prof, RATES, Change(precision="tf32"), SPECS)
    per_s = 256e3 / got.step_ms
    assert abs(per_s / row["measured"] - 1) < 0.05
    assert 256e3 / got.step_ms_high <= row["measured"] <= 256e3 / got.step_ms_low

    real = tlm.calibrate
    monkeypatch.setattr(tlm, "calibrate", lambda *a, **k: real(*a, **{**k, "held": False}))
    doubted = predict(prof, RATES, Change(precision="tf32"), SPECS)
    assert doubted.step_ms > rec.step_ms
    assert 256e3 / doubted.step_ms < 0.85 * row["measured"]


def test_a_shortfall_the_hosts_own_unsteadiness_explains_is_the_hosts_not_a_gap():
    """The 44th zoo recording: the DLRM's bf16 step, 5.76 ms, replays 2 % short at its host's
    pace held at its batch (5.65 ms), a pace that moved ±10 % over its rounds. A host 2 %
    slower fills the step as well as a gap between queued kernels does, and the gap, carried
    to the fp32 step's more queued kernels, made it 9 % slow (−8.6 % in samples/s; the size
    change −13.8 %); read as the host's, the fp32 step comes within 3 %."""
    from gpuaudit.predict import timeline as tlm

    prof = load_profile(zoo_run("recsys-held-h200-run"), "dlrm/bf16")
    rec = prof.record
    rows = {r["case"]: r for r in zoo_rows("forty-fourth")
            if r["family"].startswith("DLRM") and r.get("measured")}
    host = grouped.source_host_ms(rec) * 1e3
    assert rec.step_ms * 1e3 / host == pytest.approx(1.02, abs=0.01)
    moved = max(tlm.rounds_moved(rec.host_rounds_ms), tlm.rounds_moved(rec.host_held_ms["bf16"]))
    assert moved > 0.05
    gapped = tlm.calibrate(rec.timeline, rec.step_ms * 1e3, host, held=True)
    assert gapped.gap_us > 0
    hosts = tlm.calibrate(rec.timeline, rec.step_ms * 1e3, host, moved, held=True)
    # the host's: no gap fitted to fill the step, the device's own kept (the trace's median)
    assert hosts.gap_us == pytest.approx(tlm.queued_gap_us(rec.timeline))
    assert hosts.alpha > gapped.alpha
    assert hosts.period_us == pytest.approx(rec.step_ms * 1e3, rel=1e-3)
    got = predict(prof, RATES, Change(precision="fp32"), SPECS)
    assert abs(4096e3 / got.step_ms / rows["bf16 → fp32"]["measured"] - 1) < 0.03


def test_the_diffusion_unets_step_held_with_its_backward_cut_predicts_as_published():
    """The 17th zoo recording: the diffusion U-Net's backward, longer than an H200's launch
    queue, was cut in two and its step held in every precision (it was refused whole and in
    its phases before). From bf16 its predictions land within 2 % of the measured steps
    (published at +3.0 and +4.9 %, before its linear layers kept their step's time past
    their units' and its host-bound replay the device's gap); from fp32 the host-bound bf16
    target misses as published, for this cause: the held rounds in the fp32 source's
    process put bf16's host work × 1.2 above fp32's, round by round."""
    run = zoo_run("diffusion-held-h200-run")
    assert sum("the backward in 2 parts" in n for m in run.measurements for n in m.notes) == 2
    rows = {r["case"]: r for r in zoo_rows("seventeenth")
            if r["family"].startswith("diffusion") and r.get("measured")}
    for src, target in (("bf16", "fp32"), ("bf16", "tf32"), ("fp32", "bf16")):
        prof = load_profile(run, f"diffusion-unet/{src}")
        assert set(prof.record.host_held_ms) == {"bf16", "fp32", "tf32"}
        assert all(len(v) == 8 for v in prof.record.host_held_ms.values())
        got = predict(prof, RATES, Change(precision=target), SPECS)
        row = rows[f"{src} → {target}"]
        assert any("issued with the device held" in b for b in got.basis)
        error = 64e3 / got.step_ms / row["measured"] - 1
        if src == "bf16":
            assert abs(error) < 0.02 and abs(row["predicted"] / row["measured"] - 1) > 0.025
        else:
            assert 64e3 / got.step_ms == pytest.approx(row["predicted"], rel=1e-6)
            assert -0.2 < error < -0.15
    ratio, _ = grouped.held_ratio(load_profile(run, "diffusion-unet/fp32").record,
                                  "fp32", "bf16")
    assert 1.15 < ratio < 1.25


def test_the_zoo_compare_reads_paired_rounds_apart_only_when_asked(run, monkeypatch):
    """`zoo.py compare --unpaired` predicts a paired recording as an unpaired one (its held
    rounds' median the host's base), so the two readings of one recording can be set side by
    side; without it the recording is predicted as it is."""
    import gpuaudit.predict as predict_pkg
    from validation.predict import zoo

    b1 = (20.0, 20.0, 20.0, 20.0, 28.0, 28.0, 28.0, 28.0)
    held = tuple(1.1 * b for b in b1)
    rec = _planted(run, "bf16", {"bf16": held}).record.model_copy(
        update={"host_rounds_ms": b1, "host_step_ms": 20.0, "host_held_paired": True})
    paired_run = run.model_copy(update={"op_profiles": tuple(
        rec if p.workload == rec.workload else p for p in run.op_profiles)})
    bases: list[float | None] = []
    monkeypatch.setattr(predict_pkg, "predict",
                        lambda prof, *a: bases.append(grouped.source_host_ms(prof.record)))
    for unpaired in (False, True):
        zoo._predict_case(paired_run, rec, {"precision": "tf32"}, {}, RATES, SPECS, unpaired)
    assert bases == [pytest.approx(22.0), pytest.approx(statistics.median(held))]


class _ColdAfterTheRoundAtBatch1(_Device):
    """A step issued first after the round at batch 1 (`between`) pays `cold_ms` more: the
    switch of batch (plans, workspaces, the allocator's blocks), which a training loop's
    steps do not pay."""

    def __init__(self, issue_ms: float, cold_ms: float, **kw):
        super().__init__(issue_ms, **kw)
        self.cold_ms, self.cold = cold_ms, False

    def _phase(self, i: int) -> None:
        if self.cold and i == 0:
            self.now += self.cold_ms
            self.cold = False
        super()._phase(i)

    def new_round(self, _: int) -> None:
        self.cold = True


def test_a_held_step_follows_a_step_of_its_own_not_the_round_at_batch_1(monkeypatch):
    """Where the launch queue holds one step only, the first step after the hold is timed:
    without a step of its own before it, the precision timed first in each round (bf16 in
    even rounds, tf32 in odd ones) would carry the switch from batch 1 (+30 ms on a 20 ms
    step); each held step follows an untimed one of its precision, so no round reads it."""
    dev = _ColdAfterTheRoundAtBatch1(issue_ms=20.0, cold_ms=30.0, queue_steps=1)
    got, notes = _held_on(monkeypatch, dev, hold_ms=60.0, between=dev.new_round)
    assert any("the first step after a sync is timed" in n for n in notes)
    assert all(v == pytest.approx((20.0,) * len(v)) for v in got.values())
