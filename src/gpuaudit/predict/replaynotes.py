"""What a step replayed from its timeline (`grouped.replay`) adds to a prediction: the basis
line that says how the host was scaled, and the notes where the replay's reading of the host
is one the user should know the limits of."""

from __future__ import annotations

from .grouped import Step

# Past this, a note says the host's pace moved while the run was profiled (the zoo's H200
# recordings: its rounds at batch 1 moved ±0.1–5 % on a host that held its pace, ±4–34 % on
# unsteady ones).
HOST_MOVED_NOTE = 0.05
# Past this, a note says the replay fills the timed step only with a host slower than its
# measured pace, so part of the step is placed nowhere: a larger batch or model may add more
# than the replay does (the MoE's bf16 step on H100s: its host replayed 28 % slower than its
# step at batch 1 allows; from batch 16 to 32 its step gained 1.42 ms per ms its kernels
# gained, where the replay gains about 0.1; tests/fixtures/predict/zoo/moe-batch-steps-h100.json).
HOST_SHORT_NOTE = 0.10


def basis(replayed: Step) -> str:
    how = ("to match the timed step without the profiler" if replayed.alpha_measured else
           "assumed: the recording's device never waited on its host")
    return (f"the step replayed from its recorded timeline: the host's launches and waits kept "
            f"(host time × {replayed.alpha:.2f}, {how}); the device waited on the host "
            f"{replayed.host_bound_share:.0%} of the replayed step")


def notes(replayed: Step, host_batch: int, source_batch: int, grows: bool) -> list[str]:
    """`host_batch`: the batch the host's pace was timed at; `grows`: the change makes the
    step larger (a larger batch or model)."""
    out = []
    if replayed.host_moved > HOST_MOVED_NOTE:
        out.append(f"the host's pace moved ±{100 * replayed.host_moved:.0f} % while this run "
                   f"was profiled (its step at batch {host_batch}, round by round): the band "
                   "carries it, and a host-bound figure holds only on a host at the profiled "
                   "pace; profile again on a quiet host for a narrower one")
    if replayed.host_read_ms:
        out.append(_host_read(replayed, host_batch, source_batch))
    if grows and replayed.host_short > HOST_SHORT_NOTE:
        syncs = (f" at its {replayed.syncs_per_step:.0f} synchronizations a step"
                 if replayed.syncs_per_step >= 1 else "")
        out.append(f"the replay fills the timed step only with a host "
                   f"{100 * replayed.host_short:.0f} % slower than its measured pace: part of "
                   f"the step is placed nowhere (a device exposed{syncs}, or host work that "
                   "grows with the batch), so a larger batch or model may add more time than "
                   "predicted; time the step at the new size to know")
    return out


def _host_read(replayed: Step, host_batch: int, source_batch: int) -> str:
    """The two readings of a replay's shortfall: the prediction takes the device's gap, the
    band reaches the host's."""
    if replayed.host_read_outlying:
        why = ("the device's own gaps between queued kernels, as the trace shows them, fill "
               f"it, and so would a host as slow as its slowest rounds at batch {host_batch}")
        lead = "the timed step is longer than its kernels replay at the host's measured pace; "
    else:
        syncs = (f": {replayed.syncs_per_step:.0f} synchronizations a step"
                 if replayed.syncs_per_step >= 1 else "")
        why = ("the recording cannot tell whose the rest is: the device's, between its "
               f"kernels, or the host's, slower at batch {source_batch} than at batch "
               f"{host_batch} (no step was timed behind a held device{syncs})")
        lead = "the timed step is longer than its kernels replay at the host's measured pace, and "
    return (f"{lead}{why}. Predicted with the device's reading; the host's gives "
            f"{replayed.host_read_ms:.4g} ms, which the band reaches")
