"""The doctor's bootstrap on unmodified CPU jobs (plain PyTorch scripts that import nothing of
ours): steps, batch waits, profiles and compile events found from inside; the job's output
and exit status unchanged; a failure inside the bootstrap harmless; children followed; and
py-spy's stacks naming where the main thread spends its time."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from gpuaudit.diagnose import recording
from tests.conftest import cli_env

pytest.importorskip("torch")

ROOT = Path(__file__).resolve().parents[2]
ENV = cli_env(COLUMNS="100", CUDA_VISIBLE_DEVICES="")
BOOT = ROOT / "src" / "gpuaudit" / "diagnose" / "bootstrap" / "_gpuaudit_bootstrap.py"

TRAIN = """
import sys, time, torch
from torch.utils.data import DataLoader, Dataset
torch.manual_seed(0)
class Slow(Dataset):
    def __len__(self): return 96
    def __getitem__(self, i):
        time.sleep({sleep})
        return torch.randn(16), torch.randn(1)
model = torch.nn.Linear(16, 1)
opt = torch.optim.SGD(model.parameters(), lr=0.1)
steps = 0
for x, y in DataLoader(Slow(), batch_size=8):
    loss = torch.nn.functional.mse_loss(model(x), y)
    opt.zero_grad(); loss.backward(); opt.step()
    steps += 1
print("steps", steps, "weight", round(float(model.weight.sum()), 4))
sys.exit({code})
"""


def script(tmp_path: Path, text: str, name: str = "job.py") -> Path:
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def doctor(tmp_path: Path, *args: str, timeout: float = 240
           ) -> tuple[subprocess.CompletedProcess[str], dict, recording.Evidence]:
    save, ev = tmp_path / "d.json", tmp_path / "ev.json.gz"
    proc = subprocess.run([sys.executable, "-m", "gpuaudit", "doctor", "--json-file", str(save),
                           "--save-evidence", str(ev), *args], capture_output=True, text=True,
                          timeout=timeout, env=ENV, cwd=tmp_path)
    assert save.exists(), proc.stderr
    return proc, json.loads(save.read_text()), recording.load(ev)


def test_unmodified_job_keeps_its_output_and_exit_status_and_gets_its_steps(tmp_path):
    job = script(tmp_path, TRAIN.format(sleep=0.01, code=3))
    alone = subprocess.run([sys.executable, str(job)], capture_output=True, text=True,
                           timeout=120, env=ENV)
    proc, d, ev = doctor(tmp_path, "--", sys.executable, str(job))
    assert proc.returncode == alone.returncode == 3
    assert proc.stdout == alone.stdout == "steps 12 weight " + alone.stdout.split()[-1] + "\n"
    assert ev.auto and ev.auto[0].source == "optimizer" and len(ev.auto[0].end_s) == 12
    assert d["sources"]["steps"].startswith("optimizer steps (found by the bootstrap)")
    hooks = {h for b in ev.boots for h in b.hooks}
    assert {"optimizer", "dataloader", "syncs"} <= hooks
    assert not any(b.problems for b in ev.boots)


def test_batch_waits_make_an_unmodified_loader_job_input_bound(tmp_path):
    job = script(tmp_path, TRAIN.format(sleep=0.02, code=0))
    proc, d, ev = doctor(tmp_path, "--", sys.executable, str(job))
    assert proc.returncode == 0, proc.stderr
    assert d["findings"][0]["code"] == "input-bound"
    assert d["findings"][0]["confidence"] == "high"
    waits = [w for w in ev.auto[0].wait_s if w is not None]
    assert len(waits) == 12 and min(waits) > 0.1  # 8 samples × 20 ms each


def test_profile_steps_work_without_markers(tmp_path):
    # the job says whether the profile asked Kineto to detach CUPTI when it stopped
    job = script(tmp_path, TRAIN.format(sleep=0.0, code=0).replace(
        "sys.exit(0)", "import os; print('teardown', os.environ.get('TEARDOWN_CUPTI'))"))
    kept = tmp_path / "trace.json.gz"
    proc, d, ev = doctor(tmp_path, "--profile-steps", "3", "--keep-profile", str(kept), "--",
                         sys.executable, str(job))
    assert proc.returncode == 0, proc.stderr
    assert kept.exists() and ev.trace is not None and ev.trace.steps >= 3
    # input shapes recorded: the loader's batch of 8 into the model's first (linear) layer
    assert (ev.trace.batch, ev.trace.batch_op) == (8, "aten::linear")
    assert "profiler" in d["sources"]
    assert "teardown 1" in proc.stdout
    kinds = [e.kind for e in ev.events]
    assert kinds.count("profile_start") == 1 and kinds.count("profile_end") == 1


def test_children_are_followed(tmp_path):
    job = script(tmp_path, """
        import multiprocessing as mp, torch
        def train(n):
            model = torch.nn.Linear(4, 1)
            opt = torch.optim.SGD(model.parameters(), lr=0.1)
            for _ in range(n):
                model(torch.randn(2, 4)).sum().backward(); opt.step()
        if __name__ == "__main__":
            p = mp.get_context("spawn").Process(target=train, args=(25,))
            p.start(); p.join()
            print("child exit", p.exitcode)
        """)
    proc, _d, ev = doctor(tmp_path, "--", sys.executable, str(job))
    assert proc.returncode == 0 and proc.stdout == "child exit 0\n", proc.stderr
    assert len(ev.boots) >= 2  # the parent and the spawned child both loaded it
    child = [s for s in ev.auto if s.pid != ev.pid and s.source == "optimizer"]
    assert child and len(child[0].end_s) == 25


def test_a_failure_inside_the_bootstrap_leaves_the_job_running(tmp_path):
    # An old or odd "torch" (here a stand-in without the optimizer-step hooks): the hooks that
    # cannot be installed are noted; the job runs as it would.
    fake = tmp_path / "fake" / "torch"
    (fake / "optim").mkdir(parents=True)
    (fake / "__init__.py").write_text("__version__ = '0.0-fake'\nfrom . import optim\n")
    (fake / "optim" / "__init__.py").write_text("")
    (fake / "optim" / "optimizer.py").write_text("")
    job = script(tmp_path, "import torch\nprint('ran with', torch.__version__)\n")
    # the stand-in first; the sources under test after it (not an installed gpuaudit)
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(tmp_path / "fake"), ENV["PYTHONPATH"]])}
    save = tmp_path / "d.json"
    proc = subprocess.run([sys.executable, "-m", "gpuaudit", "doctor", "--json-file", str(save),
                           "--", sys.executable, str(job)], capture_output=True, text=True,
                          timeout=120, env=env, cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout == "ran with 0.0-fake\n"
    notes = json.loads(save.read_text())["notes"]
    assert any("the optimizer hook was not installed" in n for n in notes), notes


def test_the_jobs_own_sitecustomize_still_runs_and_no_inject_turns_it_off(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(
        f"open({str(tmp_path / 'theirs.txt')!r}, 'w').write('ran')\nMARK = 1\n")
    job = script(tmp_path, "import sitecustomize\nprint(getattr(sitecustomize, 'MARK', None))\n")
    env = {**ENV, "PYTHONPATH": os.pathsep.join([str(site), ENV["PYTHONPATH"]])}
    for extra, boots in (([], True), (["--no-inject"], False)):
        ev_path = tmp_path / "ev.json"
        proc = subprocess.run([sys.executable, "-m", "gpuaudit", "doctor", *extra,
                               "--save-evidence", str(ev_path), "--", sys.executable,
                               str(job)], capture_output=True, text=True, timeout=120,
                              env=env, cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout == "1\n"  # theirs ran, its names are sitecustomize's
        assert (tmp_path / "theirs.txt").read_text() == "ran"
        assert bool(recording.load(ev_path).boots) is boots


def test_a_command_that_is_not_python_is_still_diagnosed(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "gpuaudit", "doctor", "--json", "--", "sh",
                           "-c", "sleep 1; echo done"], capture_output=True, text=True,
                          timeout=60, env=ENV)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("done\n")
    d = json.loads(proc.stdout[len("done\n"):])
    assert "process" in d["sources"] and "bootstrap" not in d["sources"]
    assert not any("bootstrap" in n for n in d["notes"])  # no Python: nothing to load into


def test_recompiles_are_seen_with_dynamos_reasons(tmp_path):
    job = script(tmp_path, """
        import torch
        model = torch.compile(torch.nn.Linear(8, 8), backend="eager", dynamic=False)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for n in (2, 3, 4, 5, 6, 7):
            model(torch.randn(n, 8)).sum().backward(); opt.step()
        print("ok")
        """)
    proc, d, ev = doctor(tmp_path, "--", sys.executable, str(job))
    assert proc.returncode == 0 and proc.stdout == "ok\n", proc.stderr
    recompiles = [e for e in ev.events if e.kind == "recompile"]
    assert len(recompiles) >= 4
    assert any("size" in r for e in recompiles for r in e.reasons), recompiles[0].reasons
    assert [e for e in ev.events if e.kind == "compile_start"]
    comp = [f for f in d["findings"] if f["code"] == "compilation"]
    assert comp and "recompiled" in comp[0]["message"]


def test_stacks_name_the_main_threads_busiest_function(tmp_path):
    job = script(tmp_path, """
        import time, torch
        def make_batch():
            t = time.perf_counter()
            while time.perf_counter() - t < 0.05:
                sum(i * i for i in range(200))
            return torch.randn(4, 4)
        model = torch.nn.Linear(4, 4)
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        end = time.time() + 4
        while time.time() < end:
            model(make_batch()).sum().backward(); opt.step()
        """)
    proc, d, ev = doctor(tmp_path, "--", sys.executable, str(job))
    assert proc.returncode == 0, proc.stderr
    assert ev.stacks, ev.stacks_reason
    from gpuaudit.diagnose.doctor import signals

    h = signals(ev)[0].stacks  # the main thread over the window (after the first step)
    top = h.functions[0]
    assert top.function == "make_batch" and top.share > 0.5
    assert top.where.endswith("job.py:6") or top.line.startswith("sum(")
    assert "stacks" in d["sources"]


def _boot_module():
    spec = importlib.util.spec_from_file_location("_gpuaudit_bootstrap_test", BOOT)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_sync_wrappers_count_the_cuda_calls_and_name_their_line(tmp_path):
    boot = _boot_module()

    class Fake:
        def __init__(self, cuda):
            self.is_cuda = cuda

        def item(self):
            return 7

    wrapped = boot._synced(Fake.item, "item", boot._on_cuda)
    assert wrapped(Fake(True)) == 7  # no job: the original, untouched
    boot.JOB = boot.Job(str(tmp_path))
    assert wrapped(Fake(False)) == 7 and wrapped(Fake(True)) == 7  # line of the call site
    sites = boot.JOB.sync_sites
    assert list(sites) == [("item", f"{__file__}:{_line_of('# line of the call site')}")]
    assert sites[next(iter(sites))][0] == 1  # the CPU tensor was not counted
    boot.JOB.optimizer_stepped(object())
    boot.JOB.flush()
    line = next(tmp_path.glob("autosteps-*.txt")).read_text().split()
    assert line[2:5] == ["1", line[3], "opt"] and float(line[3]) >= 0


def test_a_sync_site_in_a_folder_named_torch_is_the_job_s(tmp_path):
    """Call sites are found outside the imported torch package, not outside any path with
    "/torch/" in it (a job or a virtualenv may live under a folder named torch)."""
    import torch  # noqa: F401  (the package whose folder is left out)

    boot = _boot_module()

    class Fake:
        is_cuda = True

        def item(self):
            return 7

    wrapped = boot._synced(Fake.item, "item", boot._on_cuda)
    boot.JOB = boot.Job(str(tmp_path))
    job = str(tmp_path / "torch" / "train.py")
    exec(compile("\n\nwrapped(Fake())\n", job, "exec"), {"wrapped": wrapped, "Fake": Fake})
    assert list(boot.JOB.sync_sites) == [("item", f"{job}:3")]


def _line_of(text: str) -> int:
    return next(i for i, ln in enumerate(Path(__file__).read_text().splitlines(), 1)
                if text in ln and "_line_of" not in ln)


def test_torchrun_ranks_are_followed(tmp_path):
    job = script(tmp_path, """
        import os, sys, torch, torch.distributed as dist
        dist.init_process_group("gloo")
        model = torch.nn.parallel.DistributedDataParallel(torch.nn.Linear(8, 1))
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for _ in range(20):
            model(torch.randn(4, 8)).sum().backward(); opt.step(); opt.zero_grad()
        dist.destroy_process_group()
        # one write each (a print is two): the ranks share the pipe
        sys.stdout.write(f"rank {os.environ['RANK']} done\\n"); sys.stdout.flush()
        """)
    proc, d, ev = doctor(tmp_path, "--", sys.executable, "-m", "torch.distributed.run",
                         "--standalone", "--nproc-per-node", "2", str(job))
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert sorted(proc.stdout.split("\n")[:2]) == ["rank 0 done", "rank 1 done"]
    ranks = [s for s in ev.auto if s.source == "optimizer"]
    assert len(ranks) == 2 and all(len(s.end_s) == 20 for s in ranks)
    assert d["sources"]["steps"].startswith("optimizer steps")
