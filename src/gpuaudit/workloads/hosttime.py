"""The host's own time per step, for `gpuaudit predict`: the step at a batch so small that its
kernels hide nothing (`HOST_BATCHES`: 1, else 2 for a model that cannot train on one sample,
as batch norm over (N, C) features cannot), timed without the profiler.

It is timed in rounds (`HOST_ROUNDS` × `ROUND_STEPS` steps), each round beside the same step
in the other precision family (fp32 ↔ 16-bit autocast). Two reasons:

- the lent H200's host (a KVM guest) changes pace by tens of percent within a minute: a
  handful of steps measured one moment's pace, and a prediction started from it missed
  host-bound targets by as much; rounds spread over seconds measure the usual pace;
- autocast's own host work (its dispatch, the casts and their cache) differs from model to
  model: the ratio of the two precisions' host time measured round by round, each pair a
  moment apart, is the model's own, where one ratio fitted on other models was off by up to
  a third (ConvNeXt ×1.50 against ×1.18).

On a GPU it also times the host's work of a step at the recorded batch: the step issued
while a spin kernel holds the device, so that no launch waits on a kernel (`held_host`), in
the recorded precision and the others a prediction may ask for, round by round. At batch 1
the host's work can differ from the whole batch's: a bidirectional LSTM's tf32 step took
about 15 ms to issue at batch 1 and 21 at 128 on one H200's host (fp32: 16 and 18 ms), and
its tf32 step ran at the larger figure.

The held rounds are interleaved with the rounds at batch 1 (`HostTime.paired`): each round
times the step at batch 1, then the held steps, so that the two are read at one pace. Timed
one after the other, they were read at two: on one H200 the U-Net's held step came out 1.40×
its step at batch 1 (12.8 against 9.1 ms) after batch-1 rounds that had slowed from 8.0 to
12.0 ms, where its host-bound step at half the batch then ran at 1.02× its step at batch 1.
"""

from __future__ import annotations

import contextlib
import functools
import statistics
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from gpuaudit.workloads.trainer import Trainer

# batch 1, else 2: BatchNorm1d raises on one sample in training ("Expected more than 1 value
# per channel"); its host work is the same, its kernels as short
HOST_BATCHES = (1, 2)
HOST_ROUNDS = 8
ROUND_STEPS = 6
HELD_PRECISIONS = ("fp32", "tf32", "bf16")  # beside the recorded one
HOLD_MAX_S = 1.0  # a step that is not all issued within this hold waits on the device
PARTS_MAX = 8  # a forward or backward still longer than the launch queue in this many waits
FORWARD, BACKWARD = 0, 1  # their places among `eager_phases`


@dataclass(frozen=True)
class HostTime:
    step_ms: float  # the median step over every round
    rounds_ms: tuple[float, ...]  # each round's median step
    # the same step in the other precision family (`alt_precision`) each round, paired with
    # `rounds_ms`; empty where it could not run
    alt_rounds_ms: tuple[float, ...] = ()
    # per precision, the host's time to issue one step at the recorded batch with the device
    # held, one a round (`held_host`); empty off a GPU or for a step that waits on its device
    held_ms: dict[str, tuple[float, ...]] = field(default_factory=dict)
    # the held rounds were timed each right after the round of `rounds_ms` of its index
    paired: bool = False
    batch: int = HOST_BATCHES[0]  # the batch `step_ms` and the rounds were timed at


def alt_precision(precision: str) -> str:
    """The other precision family: fp32 ↔ 16-bit autocast."""
    return "bf16" if precision in ("fp32", "tf32") else "fp32"


def eager_phases(trainer: Trainer, precision: str, inputs: Any = None,
                 target: Any = None) -> tuple[Callable[[], None], ...]:
    """One eager training step of `trainer`'s model in `precision` (autocast on for the
    16-bit families), on its own batch or on `inputs`/`target`, as its phases: the forward
    and loss, the backward, the optimizer's step; each issued after the one before."""
    import torch

    from gpuaudit.workloads.precision import autocast_dtype

    amp = autocast_dtype(torch, precision)
    device = trainer.device
    if inputs is None:
        inputs, target = trainer.inputs, trainer.target
    loss: list[Any] = []

    def forward() -> None:
        ctx = (torch.autocast(device.type, dtype=amp) if amp is not None
               else contextlib.nullcontext())
        with ctx:
            loss.append(trainer.net(*inputs, target))

    def backward() -> None:
        loss.pop().backward()

    def optimizer() -> None:
        trainer.opt.step()
        trainer.opt.zero_grad(set_to_none=True)
    return forward, backward, optimizer


@contextlib.contextmanager
def phase_cuts(trainer: Trainer, parts: dict[int, int],
               cut: Callable[[int], None]) -> Iterator[None]:
    """`cut(phase)` called at `parts[phase] - 1` points of each forward (`FORWARD`) and
    backward (`BACKWARD`) of `trainer`'s model: in the forward once every (n / parts)-th of its
    n leaf modules has run, in the backward once the gradient of every (n / parts)-th of its n
    trained parameters is accumulated. Leaf modules are registered about in the order they
    run, and a backward reaches the parameters about in the reverse of theirs, so the cuts
    split each into parts of about as many layers each."""
    def at(n: int, phase: int) -> list[int]:
        return sorted({n * k // parts.get(phase, 1) for k in range(1, parts.get(phase, 1))}
                      - {0})

    leaves = [m for m in trainer.net.modules() if next(m.children(), None) is None]
    params = [q for q in trainer.net.parameters() if q.requires_grad]
    # the forward cut once the first i leaves have run, the backward once parameter i on
    # (the last n - i) have their gradients
    handles = [leaves[i - 1].register_forward_hook(lambda *_: cut(FORWARD))
               for i in at(len(leaves), FORWARD)]
    handles += [params[i].register_post_accumulate_grad_hook(lambda _: cut(BACKWARD))
                for i in at(len(params), BACKWARD)]
    try:
        yield
    finally:
        for h in handles:
            h.remove()


def eager_step(trainer: Trainer, precision: str, inputs: Any = None,
               target: Any = None) -> Callable[[], None]:
    """One eager training step of `trainer`'s model in `precision` (`eager_phases` in turn)."""
    phases = eager_phases(trainer, precision, inputs, target)

    def run() -> None:
        for phase in phases:
            phase()
    return run


def host_time(trainer: Trainer, notes: list[str], rounds: int = HOST_ROUNDS,
              steps: int = ROUND_STEPS) -> HostTime | None:
    """The step at the first of `HOST_BATCHES` the model trains at, in `rounds` rounds of
    `steps` steps, each round followed by the same in the other precision family (an eager
    step: not for a compiled mode, whose host work is inductor's), and on a GPU by the held
    rounds (`held_host`, module docstring). None where the model cannot run at either batch;
    the other family left out, with a note, where it cannot run."""
    import torch

    from gpuaudit.workloads.precision import float32_matmuls
    from gpuaudit.workloads.timing import step_times_s, sync

    device, mode = trainer.device, trainer.mode
    alt = None if mode.compile else alt_precision(mode.precision)
    mine: dict[int, list[float]] = {}
    other: dict[int, list[float]] = {}

    @contextlib.contextmanager
    def at_host_batch() -> Iterator[None]:
        keep = trainer.inputs, trainer.target
        trainer.inputs, trainer.target = small
        try:
            yield
        finally:
            trainer.inputs, trainer.target = keep

    def one_round(i: int) -> None:
        """Round `i` at the host's batch (again, where the held timing starts over)."""
        with at_host_batch():
            mine[i] = [1e3 * s for s in step_times_s(torch, device, trainer.step, steps)]
            if alt_step is not None:
                with float32_matmuls(torch, tf32=alt != "fp32"):
                    other[i] = [1e3 * s for s in step_times_s(torch, device, alt_step, steps)]

    small: tuple[Any, Any] = (None, None)
    failed: list[str] = []
    for batch in HOST_BATCHES:
        try:
            small = trainer.data_at(batch)
            with at_host_batch():
                for _ in range(2):
                    trainer.step()
            break
        except (RuntimeError, ValueError, TypeError) as exc:
            failed.append(f"batch {batch}: {str(exc).splitlines()[0][:100]}")
    else:
        notes.append(f"host time not measured: {'; '.join(failed)}")
        return None
    if failed:
        notes.append(f"host time measured at batch {batch} ({failed[0]})")
    try:
        alt_step = eager_step(trainer, alt, *small) if alt else None
        if alt_step is not None:
            try:
                with float32_matmuls(torch, tf32=alt != "fp32"):
                    for _ in range(2):
                        alt_step()
            except RuntimeError as exc:  # e.g. bf16 autocast unsupported here
                notes.append(f"host time not measured in {alt}: "
                             f"{str(exc).splitlines()[0][:80]}")
                alt = alt_step = None
        sync(torch, device)
        one_round(0)  # sets the hold's length
        held = (held_host(trainer, notes, 3 * statistics.median(mine[0]), rounds,
                          between=one_round) if not mode.compile else {})
        for i in range(rounds):  # those the held timing did not run
            if i not in mine:
                one_round(i)
    except (RuntimeError, ValueError, TypeError) as exc:
        notes.append(f"host time not measured at batch {batch}: "
                     f"{str(exc).splitlines()[0][:80]}")
        return None
    order = sorted(mine)
    return HostTime(
        step_ms=round(statistics.median([s for i in order for s in mine[i]]), 4),
        rounds_ms=tuple(round(statistics.median(mine[i]), 4) for i in order),
        alt_rounds_ms=tuple(round(statistics.median(other[i]), 4) for i in order
                            if i in other), held_ms=held, paired=bool(held), batch=batch)


def held_host(trainer: Trainer, notes: list[str], hold_ms: float,
              rounds: int = HOST_ROUNDS, between: Callable[[int], None] | None = None
              ) -> dict[str, tuple[float, ...]]:
    """Per precision (the recorded one, then `HELD_PRECISIONS`, in that order and reversed in
    turn round by round), the host's time to issue one eager step at the recorded batch while
    a spin kernel holds the device, one step a precision a round: the host's own work at
    that batch, with no launch waiting on a kernel.
    Two steps are queued behind each hold and the second is timed, as a training loop issues
    a step after the last, not after a sync (a step issued right after one took 6–8 % longer
    than the same step's pace in a loop on one H200's host). Where the second step waits for
    the hold to end though the hold, as the device ran it, had room for both (a full launch
    queue: on an H200 a bidirectional LSTM's fp32 step, 2,700 kernels, and ConvNeXt's bf16
    step, 730), every precision's first step is timed instead, with a note, so that the
    precisions' ratios stay like for like. A first step not all issued before its hold ended is
    issued again with a 4× longer one, up to `HOLD_MAX_S`. Past that, in any precision, the
    step's phases (`eager_phases`) are each issued after a sync behind a hold of their own
    and summed, in every precision, with a note: a step of more launches than the queue
    holds waits for a hold however long (the queue's size or a sync, which the phases tell
    apart: on an H200, ConvNeXt's fp32 step, 980 kernels, and BERT's, 950–1,120, were issued
    whole). A backward or forward that still waits, itself longer than the queue (the
    diffusion U-Net's backward on an H200, about 1,150 launches; a user's T5 v1.1's forward
    on an H100, where 2 parts fit), is cut into 2, then 4, up to `PARTS_MAX` parts, the
    backward where parameters' gradients are accumulated, the forward after its leaf modules
    (`phase_cuts`), each part issued after a sync behind a hold of its own. A step that
    waits however it is cut (a sync: a value read back) keeps none, with a note. Off a GPU:
    nothing (the host's work and the device's are one). `between(i)`: called before round
    i's held steps, each time round i is timed (the rounds at batch 1 interleaved,
    `host_time`)."""
    import torch

    from gpuaudit.bench.timing import spin_cycles_per_us
    from gpuaudit.workloads.precision import float32_matmuls
    from gpuaudit.workloads.timing import is_cuda, sync

    device, own = trainer.device, trainer.mode.precision
    if not is_cuda(device):
        return {}
    cycles = spin_cycles_per_us(torch)
    phases: dict[str, tuple[Callable[[], None], ...]] = {}

    def whole(p: str) -> None:
        for part in phases[p]:
            part()

    def warm(p: str, steps: int = 1) -> None:
        """`steps` steps of `p` at the batch, untimed: cuDNN's autotuning and autocast's
        caches first, then one right before each held step, as a loop's step follows a step
        of its own, not the rounds at batch 1 or another precision's step (on an H100 a
        bidirectional LSTM's tf32 step, its first step timed as its launches overfill the
        queue, read 36–96 ms where it came first in its round, right after the rounds at
        batch 1, and 26–32 ms where it followed the other precisions' steps)."""
        with float32_matmuls(torch, tf32=p != "fp32"):
            for _ in range(steps):
                whole(p)
        sync(torch, device)

    for p in (own, *(q for q in HELD_PRECISIONS if q != own)):
        # eager, without fp16's loss scaler: its check for overflows reads a value back
        phases[p] = eager_phases(trainer, p)
        try:
            warm(p, steps=2)
        except RuntimeError as exc:  # out of memory in fp32 at this batch, say
            del phases[p]
            torch.cuda.empty_cache()
            notes.append(f"host work not timed in {p}: {str(exc).splitlines()[0][:80]}")
    sync(torch, device)
    first_hold_s = max(hold_ms, 1.0) / 1e3
    hold_s = first_hold_s  # grows for every later step once one outlasts it

    def hold() -> tuple[Any, Any]:
        """A spin of `hold_s` queued, between timing events (`held` fires when it ends)."""
        begin, held = (torch.cuda.Event(enable_timing=True) for _ in range(2))
        begin.record()
        torch.cuda._sleep(int(hold_s * 1e6 * cycles))
        held.record()
        return begin, held

    def longer() -> bool:
        """The hold 4× longer for the tries after, up to `HOLD_MAX_S`; False past it."""
        nonlocal hold_s
        if hold_s >= HOLD_MAX_S:
            return False
        hold_s = min(4 * hold_s, HOLD_MAX_S)
        return True

    def issued_ms(p: str) -> tuple[float, float | None] | None:
        """The first step's issue time, and the second's where the queue held both."""
        while True:
            begin, held = hold()
            with float32_matmuls(torch, tf32=p != "fp32"):
                t0 = time.perf_counter()
                whole(p)
                t1 = time.perf_counter()
                first_held = not held.query()
                whole(p)
                t2 = time.perf_counter()
            second_held = not held.query()
            sync(torch, device)
            first_ms = (t1 - t0) * 1e3
            if first_held and second_held:
                return first_ms, (t2 - t1) * 1e3
            # the hold as it ran (the spin's cycles may have been counted at another clock)
            # had room for two first steps: the launch queue was full
            if first_held and begin.elapsed_time(held) >= 3 * first_ms:
                return first_ms, None
            if not longer():
                return None

    waited: set[int] = set()  # the phases that waited in the last phased try

    def phased_ms(p: str, parts: dict[int, int]) -> tuple[float, float | None] | None:
        """The step's phases each issued after a sync behind a hold of their own, the forward
        and backward in `parts` parts (`phase_cuts`) each behind its own: the sum of their
        times."""
        total, t0, held = 0.0, 0.0, None

        def start() -> None:
            nonlocal t0, held
            sync(torch, device)
            _, held = hold()
            t0 = time.perf_counter()

        def stop(phase: int) -> None:
            nonlocal total
            total += (time.perf_counter() - t0) * 1e3
            if held is not None and held.query():
                waited.add(phase)

        def cut(phase: int) -> None:  # inside the forward, or on autograd's thread
            stop(phase)
            start()

        while True:
            total = 0.0
            waited.clear()
            with (float32_matmuls(torch, tf32=p != "fp32"),
                  phase_cuts(trainer, parts, cut)):
                for phase, part in enumerate(phases[p]):
                    start()
                    part()
                    stop(phase)
            sync(torch, device)
            if not waited:
                return total, None
            if not longer():
                return None

    def every_round(issue: Callable[[str], tuple[float, float | None] | None]
                    ) -> dict[str, list[tuple[float, float | None]]] | None:
        timed: dict[str, list[tuple[float, float | None]]] = {p: [] for p in phases}
        for i in range(rounds):
            if between is not None:
                between(i)
            # the order reversed every other round (A B C, C B A): a host that drifts within
            # a round would otherwise read a precision always timed later as slower, and the
            # ratios between precisions, which a precision change takes, with it
            for p in (list(phases) if i % 2 == 0 else list(phases)[::-1]):
                warm(p)
                got = issue(p)
                if got is None:
                    return None
                timed[p].append(got)
        return timed

    batch = trainer.workload.batch_size
    timed = every_round(issued_ms)
    phased, parts = timed is None, {FORWARD: 1, BACKWARD: 1}
    while timed is None:
        hold_s = first_hold_s  # a phase is shorter than the step
        timed = every_round(functools.partial(phased_ms, parts=dict(parts)))
        if timed is None:
            # only the forward or the backward waited: cut it finer, unless it is cut as
            # finely as it goes
            if not waited or not waited <= set(parts) or any(
                    parts[w] >= PARTS_MAX for w in waited):
                notes.append(f"host work at batch {batch} not timed with the device held: "
                             "the step waits on its device")
                return {}
            for w in waited:
                parts[w] *= 2
    # like for like: the second step in every precision, or the first (or phases) in all
    both = all(second is not None for v in timed.values() for _, second in v)
    if phased:
        said = [f"the forward in {parts[FORWARD]} parts, cut after its leaf modules"
                if parts[FORWARD] > 1 else "",
                f"the backward in {parts[BACKWARD]} parts, cut where parameters' gradients "
                "are accumulated" if parts[BACKWARD] > 1 else ""]
        cuts = f" ({'; '.join(x for x in said if x)})" if any(said) else ""
        notes.append(f"host work at batch {batch}: a step's launches overfill the launch "
                     "queue; its forward, backward and optimizer step are each timed after a "
                     f"sync, behind a hold of their own{cuts}")
    elif not both:
        notes.append(f"host work at batch {batch}: the launch queue does not hold two steps; "
                     "the first step after a sync is timed")
    return {p: tuple(round(second if both and second is not None else first, 4)
                     for first, second in v) for p, v in timed.items()}
