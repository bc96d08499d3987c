"""The host-side rules on real H200 evidence (the doctor's zoo recordings) with one fault
planted in each copy: host syncs, the host's own work, PyTorch's dispatch, a GPU left idle
with no named cause, compilation; and the records they read (stacks, steps, compile events)."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from gpuaudit.diagnose import doctor, recording
from gpuaudit.diagnose.channel import JobEvent, StepTimes, read_channel
from gpuaudit.diagnose.compilation import compile_stats
from gpuaudit.diagnose.engine import diagnose
from gpuaudit.diagnose.hoststats import step_stats
from gpuaudit.diagnose.stacks import HostStacks, classify
from gpuaudit.hw.pystacks import Frame, parse_raw

ZOO = Path(__file__).parents[1] / "fixtures" / "doctor" / "zoo-h200"


def sig_of(name: str):
    return doctor.signals(recording.load(ZOO / f"{name}.json.gz"))[0]


def codes(sig) -> list[str]:
    return [f.code for f in diagnose(sig)[0]]


def with_gpu(sig, **fields):
    return dataclasses.replace(sig, gpus=(dataclasses.replace(sig.gpus[0], **fields),))


def test_the_healthy_control_is_clean_and_each_planted_fault_shows():
    healthy = sig_of("healthy_bf16_lm")
    assert [f.severity.value for f in diagnose(healthy)[0]] in ([], ["INFO"])
    # the same job, its GPU now idle 80 % of the time with its main thread in its own code
    stacks = HostStacks(pid=1, samples=500, seconds=5.0,
                        shares={"own": 0.7, "library": 0.1, "torch": 0.2},
                        functions=())
    idle = with_gpu(healthy, utilization_pct=20.0, sm_activity_pct=15.0)
    assert codes(dataclasses.replace(idle, stacks=stacks))[:1] == ["host-bound"]
    # ... or in PyTorch's own Python, the trainer on a full core: launch-bound
    torchy = dataclasses.replace(stacks, shares={"own": 0.1, "torch": 0.9})
    assert codes(dataclasses.replace(idle, stacks=torchy))[:1] == ["launch-bound"]


def test_an_idle_gpu_never_gets_a_silent_healthy():
    """Nothing but the GPU's idleness (no stacks, no steps, no profile): still a finding,
    with the evidence there is."""
    healthy = sig_of("healthy_bf16_lm")
    g = healthy.gpus[0]  # (memory well used: not the small-batch pattern either)
    bare = dataclasses.replace(
        with_gpu(healthy, utilization_pct=30.0, sm_activity_pct=25.0,
                 memory_used_max_bytes=int(0.6 * g.memory_total_bytes)),
        stacks=None, steps=None, trace=None)
    findings, changes = diagnose(bare)
    assert findings[0].code == "gpu-underused" and findings[0].severity.value == "WARN"
    assert findings[0].share == pytest.approx(0.7)
    assert "--profile-steps" in changes[0].settings


def test_syncs_counted_per_step_cost_what_could_have_overlapped():
    healthy = sig_of("healthy_bf16_lm")
    st = dataclasses.replace(healthy.steps, syncs_per_step=8.0,
                             sync_wait_median_s=0.3 * healthy.steps.median_s)
    sig = dataclasses.replace(with_gpu(healthy, utilization_pct=60.0), steps=st, trace=None)
    top = diagnose(sig)[0][0]
    # the host's part (70 % not blocked) and the GPU's (60 %): max(h, g) = 0.7 of the step
    assert top.code == "host-syncs" and top.share == pytest.approx(0.3, abs=0.001)
    # a sync that costs nothing (the GPU busy throughout) is not reported from counts
    busy = dataclasses.replace(sig, gpus=(dataclasses.replace(sig.gpus[0],
                                                              utilization_pct=100.0),))
    assert "host-syncs" not in codes(busy)


def test_steady_state_starts_after_compilation():
    steps = StepTimes(1, "optimizer", end_s=(10.0, 20.0, 20.1, 20.2, 20.3, 20.4))
    events = [JobEvent(1, "compile_start", 1.0), JobEvent(1, "compile_end", 19.5),
              JobEvent(1, "compile_start", 30.0), JobEvent(1, "compile_end", 31.0),
              JobEvent(1, "recompile", 30.0, reasons=("tensor 'x' size mismatch at index 0. "
                                                       "expected 2, actual 3",))]
    c = compile_stats(events, job_start_s=0.0, job_end_s=40.0, steps=steps)
    assert c.steady_from_s == 20.0 and c.warmup_s == 20.0
    assert c.compile_s == pytest.approx(19.5) and c.window_compile_s == pytest.approx(1.0)
    assert c.recompiles == 1 and "size mismatch" in c.reasons[0][0]
    # never steady: still compiling at the end
    open_ended = compile_stats(events[:1], job_start_s=0.0, job_end_s=40.0, steps=steps)
    assert open_ended.still_compiling and open_ended.steady_from_s is None
    assert open_ended.window_share == pytest.approx(39 / 40)


def test_new_shape_steps_cost_their_time_beyond_an_ordinary_step():
    ends = [0.0]
    new = [False]
    for i in range(12):
        slow = i % 3 == 0
        ends.append(ends[-1] + (0.5 if slow else 0.1))
        new.append(slow)
    st = step_stats(ends, new_shapes=new, skip=0)
    assert st.new_shape_steps == 4
    assert st.new_shape_extra_share == pytest.approx(4 * 0.4 / (ends[-1] - ends[0]))
    every = step_stats(ends, new_shapes=[True] * len(ends), skip=0)
    assert every.new_shape_extra_share is None  # nothing ordinary to compare with


def test_py_spy_raw_lines_with_command_lines_that_hold_newlines():
    text = ('process 12:"python3 -c \nimport x\nx.run()";thread (12): MainThread;'
            '<module> (/job.py:3);make_batch (/job.py:9) 40\n'
            'process 12:"python3 -c \nimport x\nx.run()";thread (13): Thread-1;'
            'run (/usr/lib/python3.12/threading.py:1010) 7\n')
    frames, stacks = parse_raw(text)
    assert [(s.pid, s.tid, s.thread, s.count) for s in stacks] == [
        (12, 12, "MainThread", 40), (12, 13, "Thread-1", 7)]
    assert [frames[i].function for i in stacks[0].frames] == ["<module>", "make_batch"]
    assert frames[stacks[0].frames[1]].line == 9


def test_a_frame_whose_file_name_came_back_with_a_nul_byte_is_read_as_no_file():
    """py-spy reads names from a running process; one read mid-change held a NUL byte and
    `doctor` died reading its source line (linecache: "embedded null byte")."""
    from gpuaudit.diagnose.stacks import source_lines
    from gpuaudit.hw.pystacks import UNREADABLE, StackChunk

    text = ('process 12:"python3 job.py";thread (12): MainThread;<module> (/job.py:3);'
            'step (/jo\x00b.py:9) 40\n')
    frames, stacks = parse_raw(text)
    assert [f.file for f in frames] == ["/job.py", UNREADABLE]
    chunk = StackChunk(start_s=0.0, end_s=1.0, rate_hz=100, target_pid=12, frames=frames,
                       stacks=tuple(stacks))
    assert source_lines([chunk]) == {}  # /job.py does not exist here; nothing raised


@pytest.mark.parametrize("venv", ["/srv/torch/.venv", "/home/ana/torch/env", "/usr/local/venv"])
def test_libraries_in_a_virtualenv_under_a_folder_named_torch_are_not_pytorch(venv):
    """Stacks are classified by the installed package, not by "/torch/" anywhere in the
    path (an H200's virtualenv at /srv/torch/.venv made pandas read as PyTorch and hid a
    host-bound job)."""
    site = f"{venv}/lib/python3.12/site-packages"
    job = Frame("<module>", "/srv/job/train.py", 30)
    assert classify([job, Frame("transform", f"{site}/pandas/core/groupby/generic.py", 9)]) \
        == "library"
    assert classify([job, Frame("forward", f"{site}/torch/nn/modules/linear.py", 125)]) \
        == "torch"
    assert classify([job, Frame("fit", f"{site}/lightning/pytorch/trainer/trainer.py", 5)]) \
        == "torch"
    assert classify([job, Frame("features", "/srv/job/train.py", 12)]) == "own"
    # a source checkout of PyTorch is still PyTorch
    assert classify([job, Frame("forward", "/src/pytorch/torch/nn/modules/conv.py", 1)]) \
        == "torch"


def test_the_channel_reader_keeps_what_survived(tmp_path):
    (tmp_path / "autosteps-7.txt").write_text("1.0 - 0 0.0 opt 0\n2.0 0.1 3 0.02 opt 1\n"
                                              "garbage\n3.0 0.2 1 0.01 opt 0\n")
    (tmp_path / "boot-7.json").write_text("{not json")
    (tmp_path / "events-7.jsonl").write_text('{"pid": 7, "kind": "compile_start", "t": 1}\n'
                                             "half a line")
    ch = read_channel(tmp_path)
    st = ch.main_steps()
    assert st.end_s == (1.0, 2.0, 3.0) and st.syncs == (0, 3, 1)
    assert st.wait_s == (None, 0.1, 0.2) and st.new_shapes == (False, True, False)
    assert len(ch.events) == 1
    assert any("line 3" in p for p in ch.problems) and any("boot-7" in p for p in ch.problems)
