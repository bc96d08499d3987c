"""`gpuaudit tune`: the batch search and choice on synthetic curves with exact answers, the
accumulation plan, the workers choice, out-of-memory recovery without leaks (real torch on
the CPU), and the command line."""

from __future__ import annotations

import gc
import subprocess
import sys
import weakref
from pathlib import Path

import pytest

from gpuaudit.tune.search import (
    SearchConfig,
    Trial,
    accumulation,
    choose,
    choose_workers,
    search,
)
from tests.conftest import cli_env

ROOT = Path(__file__).resolve().parents[2]
GB = 10**9


def curve(peak_at: int, mem_per_sample: int, fixed: int = 2 * GB, oom_above: int | None = None,
          overhead_s: float = 0.01, per_sample_s: float = 0.001):
    """A device that takes overhead + per-sample time per step until the batch saturates it at
    `peak_at`; memory grows linearly; out of memory above `oom_above`."""
    calls: list[int] = []

    def measure(b: int) -> Trial:
        calls.append(b)
        if oom_above is not None and b > oom_above:
            return Trial(b, "bf16", ok=False, reason="out of memory (140.0 of 141.0 GB in use)")
        step = overhead_s + per_sample_s * b if b >= peak_at else overhead_s + \
            per_sample_s * peak_at * (b / peak_at) ** 0.5
        return Trial(b, "bf16", ok=True, step_s=step, samples_per_s=b / step,
                     peak_memory_bytes=fixed + mem_per_sample * b)
    measure.calls = calls  # type: ignore[attr-defined]
    return measure


def test_search_doubles_then_refines_below_the_first_oom():
    m = curve(peak_at=10**6, mem_per_sample=GB // 10, oom_above=96)
    choice = search(m, capacity_bytes=141 * GB, cfg=SearchConfig(start=8))
    assert m.calls == [8, 16, 32, 64, 128, 96]  # 128 fails; one try between 64 and 128
    assert choice.chosen.batch == 96
    assert "batch 128 ran out of memory" in choice.reason


def test_margin_excludes_batches_that_fit_but_leave_no_room():
    # 1 GB per sample + 2 GB: batch 128 needs 130 GB, over 90 % of 141 GB (126.9 GB).
    m = curve(peak_at=10**6, mem_per_sample=GB, oom_above=None)
    choice = search(m, capacity_bytes=141 * GB, cfg=SearchConfig(start=16, margin=0.10))
    assert choice.memory_limit_bytes == int(141 * GB * 0.9)
    # 128 runs (130 GB < 141 GB) but is over the limit; one try between: 96 (98 GB).
    assert [t.batch for t in choice.trials] == [16, 32, 64, 96, 128]  # sorted by batch
    assert all(t.ok for t in choice.trials)
    assert choice.chosen.batch == 96
    assert "batch 128 leaves less than the 10% margin" in choice.reason


def test_throughput_optimal_not_largest_that_fits():
    # Saturates at 64 samples: beyond it throughput grows only as overhead shrinks.
    m = curve(peak_at=64, mem_per_sample=GB // 100, overhead_s=0.0001, per_sample_s=0.001)
    choice = search(m, capacity_bytes=141 * GB, cfg=SearchConfig(start=8, tolerance=0.03))
    best = max(t.samples_per_s for t in choice.trials if t.ok)
    assert choice.chosen.batch == 64
    assert choice.chosen.samples_per_s >= 0.97 * best
    assert max(t.batch for t in choice.trials) > 64  # larger ones fit, and were not chosen
    assert "of the best" in choice.reason or "highest throughput" in choice.reason
    # it stopped doubling once two doublings gained under 2 %
    assert max(t.batch for t in choice.trials) < 4096


def test_nothing_fits():
    m = curve(peak_at=8, mem_per_sample=GB, oom_above=0)
    choice = search(m, capacity_bytes=141 * GB, cfg=SearchConfig(start=1))
    assert choice.chosen is None and "out of memory" in choice.reason
    over = choose([Trial(1, "bf16", True, 0.1, 10.0, 140 * GB)], 126 * GB)
    assert over.chosen is None and "over the 10% margin" in over.reason


def test_choose_prefers_the_smaller_batch_within_tolerance():
    trials = [Trial(32, "fp32", True, 0.1, 320.0, 10 * GB),
              Trial(64, "fp32", True, 0.195, 328.0, 20 * GB),
              Trial(128, "fp32", True, 0.38, 336.0, 40 * GB)]
    c = choose(trials, None, SearchConfig(tolerance=0.05))
    assert c.chosen.batch == 32  # 320 ≥ 95 % of 336
    assert c.reason.startswith("batch 32, reaches 95.2% of the best (batch 128) within 5%, "
                               "with 10.0 GB instead of 40.0 GB")


@pytest.mark.parametrize(("target", "micro", "world", "want"), [
    (1024, 64, 1, (64, 16, 1024, None)),
    (1024, 64, 4, (64, 4, 1024, None)),
    (1000, 256, 1, (250, 4, 1000, "micro-batch 250 (not 256)")),
    (1000, 64, 3, (64, 6, 1152, "1152 per optimizer step")),
    (32, 64, 1, (32, 1, 32, "micro-batch 32 (not 64)")),
])
def test_accumulation(target, micro, world, want):
    a = accumulation(target, micro, world)
    assert (a.micro_batch, a.steps, a.global_batch) == want[:3]
    assert a.micro_batch * a.world_size * a.steps == a.global_batch
    assert a.micro_batch <= micro
    assert (want[3] is None and a.note is None) or (want[3] in (a.note or ""))


def test_workers_choice():
    rates = {0: 300.0, 2: 900.0, 4: 1700.0, 8: 3000.0}
    w = choose_workers(rates, needed_samples_per_s=1400)
    assert w.workers == 4 and "≥ 1.2 ×" in w.reason  # 1700 ≥ 1680
    w = choose_workers(rates, needed_samples_per_s=5000)
    assert w.workers == 8 and "no worker count keeps up" in w.reason


def test_oom_is_caught_and_nothing_leaks_between_trials(tmp_path, monkeypatch):
    """A model that raises out-of-memory above batch 32, holding a large activation when it
    does (as a real OOM does, through the traceback). The trial is recorded as out of memory,
    the next trial runs, and the failed trial's tensors are all gone."""
    torch = pytest.importorskip("torch")
    from gpuaudit.tune.runner import Runner
    from gpuaudit.workloads.entry import Workload as SimpleTarget

    alive: list[weakref.ref] = []

    class Big(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.lin = torch.nn.Linear(16, 4)

        def forward(self, x):
            h = torch.ones(x.shape[0], 4096)  # an activation
            alive.append(weakref.ref(h))
            if x.shape[0] > 32:
                raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 2.00 GiB")
            return self.lin(x) + h[:, :4]

    target = SimpleTarget("big", Big(), lambda n: ((torch.randn(n, 16),), None))
    runner = Runner(target, "cpu", steps=2, warmup=1)
    bad = runner.measure(64, "fp32")
    assert not bad.ok and bad.oom and bad.reason.startswith("out of memory")
    gc.collect()
    assert all(r() is None for r in alive), "the failed trial's activation is still alive"
    good = runner.measure(16, "fp32")
    assert good.ok and good.samples_per_s > 0
    assert runner.leaks == []
    # Doubling until the out-of-memory error, whatever the timings: the plateau rule (stop when
    # doublings gain under 2 %) stopped at 32 on a loaded CPU, where batches barely differ.
    choice = search(lambda b: runner.measure(b, "fp32"), None,
                    SearchConfig(start=8, plateau=-1.0))
    assert [t.batch for t in choice.trials][:3] == [8, 16, 32]
    assert choice.chosen.batch in (8, 16, 32, 48)
    assert any(t.oom for t in choice.trials)


ENV = cli_env(COLUMNS="100")


def tune_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "gpuaudit", "tune", *args], capture_output=True,
                          text=True, timeout=300, env=ENV, cwd=ROOT / "examples" / "tune")


def test_tune_cli_on_cpu_end_to_end(tmp_path):
    pytest.importorskip("torch")
    save = tmp_path / "t.json"
    proc = tune_cli("--model", "mlp:build", "--device", "cpu", "--start-batch", "16",
                    "--max-batch", "64", "--steps", "3", "--target-global-batch", "256",
                    "--compare", "fp32,bf16", "--dataset", "mlp:dataset", "--workers", "0,1",
                    "--json", "--json-file", str(save))
    assert proc.returncode == 0, proc.stderr
    import json

    doc = json.loads(proc.stdout)
    assert doc == json.loads(save.read_text())
    assert doc["kind"] == "tune" and [t["batch"] for t in doc["trials"]][:3] == [16, 32, 64]
    assert doc["chosen_batch"] in (16, 32, 64)
    assert {t["precision"] for t in doc["precisions"]} == {"fp32", "bf16"}
    a = doc["accumulation"]
    assert a["micro_batch"] * a["accumulation_steps"] == 256
    assert set(doc["loader_rates"]) == {"0", "1"} and doc["loader_workers"] in (0, 1)
    assert f"BATCH_SIZE = {a['micro_batch']}" in doc["settings"]
    assert "Throughput and memory against batch" in proc.stderr and "◀ chosen" in proc.stderr


@pytest.mark.parametrize(("args", "message"), [
    (["--model", "nosuch.module:build", "--device", "cpu"], "cannot import nosuch.module"),
    (["--model", "mlp:nope", "--device", "cpu"], "has no attribute 'nope'"),
    (["--model", "mlp:build", "--device", "cpu", "--precision", "fp12"], "precision 'fp12'"),
    (["--model", "mlp:build", "--device", "cpu", "--workers", "a,b"], "--workers"),
    (["--model", "mlp:build", "--device", "cpu", "--start-batch", "9", "--max-batch", "8"],
     "--start-batch"),
])
def test_tune_bad_input_is_one_line_and_exit_2(args, message):
    proc = tune_cli(*args)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and message in lines[0], proc.stderr


def test_an_entry_point_whose_build_fails(tmp_path):
    (tmp_path / "broken.py").write_text("def build():\n    raise RuntimeError('no data')\n")
    proc = subprocess.run([sys.executable, "-m", "gpuaudit", "tune", "--model", "broken:build",
                           "--device", "cpu"], capture_output=True, text=True, timeout=120,
                          env=ENV, cwd=tmp_path)
    assert proc.returncode == 2
    assert "build() failed: RuntimeError: no data" in proc.stderr


def test_the_optimizers_own_state_is_not_a_leak(monkeypatch):
    """AdamW creates its moments at the first step and keeps them: an H200 run noted "1071 MB
    still allocated after a trial" (GPT-2 small's 124M parameters × 8 bytes). Memory is
    counted here as a GPU would: live tensors' bytes; a tensor a trial keeps is still a
    leak."""
    torch = pytest.importorskip("torch")
    from gpuaudit.tune.runner import Runner
    from gpuaudit.workloads.entry import Workload as SimpleTarget

    kept: list = []
    live = weakref.WeakValueDictionary()

    def allocated(self):
        gc.collect()
        return sum(t.numel() * t.element_size() for t in list(live.values()))

    model = torch.nn.Linear(2048, 2048)  # 4.2M parameters: 34 MB of moments, over 16 MB

    def make_batch(n):
        x = torch.randn(n, 2048)
        return (x,), None

    monkeypatch.setattr(Runner, "cuda", property(lambda self: True))
    monkeypatch.setattr(Runner, "_allocated", allocated)
    monkeypatch.setattr(Runner, "_sync", lambda self: None)
    monkeypatch.setattr(torch.cuda, "synchronize", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "empty_cache", lambda: None)
    monkeypatch.setattr(torch.cuda, "reset_peak_memory_stats", lambda *a: None)
    monkeypatch.setattr(torch.cuda, "max_memory_reserved", lambda *a: 0)
    runner = Runner(SimpleTarget("lin", model, make_batch), "cpu", steps=2, warmup=1)
    for p in model.parameters():
        live[id(p)] = p

    real_step = runner._opt.step

    def step(*a, **k):  # track the optimizer's state tensors as they appear
        out = real_step(*a, **k)
        for st in runner._opt.state.values():
            for t in st.values():
                if isinstance(t, torch.Tensor):
                    live[id(t)] = t
        return out

    monkeypatch.setattr(runner._opt, "step", step)
    assert runner.measure(8, "fp32").ok
    # two moments per parameter (float32) and a step counter each
    assert runner._state_bytes() == 2 * 4 * (2048 * 2048 + 2048) + 2 * 4
    assert runner.leaks == []  # the moments appeared during the trial: not a leak

    def leaky(n):
        x = torch.empty(5 << 20)  # 20 MB the job keeps (over the 16 MB allowance)
        kept.append(x)
        live[id(x)] = x
        return (torch.randn(n, 2048),), None

    runner.target = SimpleTarget("lin", model, leaky)
    assert runner.measure(8, "fp32").ok
    assert runner.leaks and runner.leaks[0].endswith("MB still allocated after a trial")


def test_a_model_that_cannot_train_on_one_sample_is_searched_from_two(tmp_path, monkeypatch):
    """BatchNorm1d over (N, C) features raises on one sample in training: the search starts
    again at batch 2 and says why (one that fails there too is the user's error, named at
    batch 1: tests/cli/test_bad_usage.py)."""
    pytest.importorskip("torch")
    from gpuaudit.tune import SearchConfig, TuneOptions, tune

    (tmp_path / "bnfeat.py").write_text(
        "import torch\n"
        "from torch import nn\n"
        "def build():\n"
        "    m = nn.Sequential(nn.Linear(8, 16), nn.BatchNorm1d(16), nn.Linear(16, 3))\n"
        "    return m, lambda n: (torch.randn(n, 8), torch.randint(0, 3, (n,)))\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    opts = TuneOptions(device="cpu", compare=("fp32",), steps=2, warmup=1,
                       search=SearchConfig(max_batch=4))
    got = tune("bnfeat:build", opts)
    assert [t.batch for t in got.trials][:2] == [2, 4] and got.chosen_batch in (2, 4)
    assert any(n.startswith("the model does not train at batch 1 (ValueError: Expected "
                            "more than 1 value per channel") for n in got.notes), got.notes
