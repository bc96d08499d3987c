"""Can the host feed it? A job whose input pipeline is known (its data loading measured, its
JPEG decode rate, or a diagnosis that found it input-bound) needs so many vCPUs per GPU to
keep its GPUs busy; cloud instances come at fixed vCPU:GPU ratios (1:1, 2:1 … 16:1 and more),
so a cheap offer may starve its GPUs. Each offer shown is checked: its vCPUs and memory per
GPU against the need at the speed its GPUs run the task.

The need, per GPU:

* loader vCPUs = the reference rate (samples/s per GPU) × CPU-seconds per sample, scaled by
  how much faster the offer's GPU runs the task than the reference GPU;
* one vCPU for the training process itself (the trainer's Python thread feeding the GPU);
* memory: one loader worker per loader vCPU, each `WORKER_BASE_GIB` (a forked Python process
  with torch imported) plus its batches in flight (DataLoader's prefetch_factor 2).

Short of vCPUs, the loader delivers (vCPUs − 1) ÷ loader vCPUs of the rate: the GPUs wait
the rest of the time. The sources:

* `bench train` data loading (`train/data/jpeg/best`): `workers` processes on the host's
  cores deliver `value` images/s, against the image model's training rate in the same run;
* `bench host` JPEG decode on all CPUs (`host/jpeg_*_all`): `threads` CPUs decode `value`
  images/s (scaled to the job's image size as the feed verdict does), against the run's
  training rate (its `train` figures) or the task's measured rate;
* a `doctor` diagnosis with an input-bound finding: its loader workers at `worker_cpu` % of a
  core each (or, with no workers, the training process's own CPU) while the GPU waited
  `share` of the time → workers × cpu ÷ (1 − share) cores.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from gpuaudit.errors import BadInputError
from gpuaudit.model.recommendation import FeedCheck, FeedNeed

if TYPE_CHECKING:
    from gpuaudit.model import Measurement, Run

TRAINER_VCPUS = 1.0
WORKER_BASE_GIB = 0.5
PREFETCH = 2  # torch DataLoader's prefetch_factor: batches each worker keeps ready
# A batch the doctor cannot see: ImageNet's 256 crops of 3×224×224 float32.
DEFAULT_BATCH_BYTES = 256 * 3 * 224 * 224 * 4
# Loader workers below this share of a core each were not waiting on the CPU.
CPU_BOUND_PCT = 80.0
# The most vCPUs per GPU that 8-GPU cloud instances sell (AWS p5.48xlarge: 192 for 8 GPUs).
MOST_VCPUS_PER_GPU = 24.0


def _beyond(loader_vcpus: float) -> list[str]:
    """A need no instance sells, said once in the basis."""
    if loader_vcpus + TRAINER_VCPUS <= MOST_VCPUS_PER_GPU:
        return []
    return [f"{loader_vcpus + TRAINER_VCPUS:,.0f} vCPUs per GPU is more than 8-GPU instances "
            f"sell (AWS p5.48xlarge: {MOST_VCPUS_PER_GPU:g}): decode on the GPU (nvJPEG, DALI) "
            "or store the data decoded"]


def _worker_gib(batch_bytes: float) -> float:
    return WORKER_BASE_GIB + PREFETCH * batch_bytes / 2**30


def _gpu_of(run: Run) -> str | None:
    from gpuaudit.predict.rates import gpu_spec_of
    from gpuaudit.specs.catalog import load_catalog

    spec = gpu_spec_of(run, load_catalog())
    return spec.id if spec is not None else None


def need_from_run(run: Run, task_rate: tuple[float, str] | None = None,
                  where: str | None = None) -> FeedNeed:
    """The input need a stored run measured (module docstring); `task_rate`: the task's own
    samples/s per GPU and the GPU model it was measured on, where its measurement is one.
    BadInputError (one line) when the run has no figure to size it."""
    source = where or f"run {run.id}"
    ms = run.measurements
    loader = next((m for m in ms if m.suite == "train" and m.name == "data/jpeg/best"
                   and m.value), None)
    if loader is not None:
        return _from_loader(loader, source, _gpu_of(run), ms, task_rate)
    decode = [m for m in ms if m.suite == "host" and m.name.startswith("jpeg_")
              and m.params.get("cores") == "all" and m.value]
    if decode:
        return _from_decode(decode, ms, source, _gpu_of(run), task_rate)
    raise BadInputError(f"{source} has no input figures to size the job's feed: `gpuaudit "
                        "bench train` (data loading) or `gpuaudit bench host` (JPEG decode) "
                        "measures them, `gpuaudit doctor --save` diagnoses a job")


def _train_rate(ms: Sequence[Measurement], task_rate: tuple[float, str] | None, source: str,
                gpu: str | None) -> tuple[float, str, str | None]:
    """The samples/s per GPU to feed, what it is, and the GPU it was measured on."""
    from gpuaudit.bench.feed.verdict import job_from_train

    job = job_from_train(ms, 1)
    if job is not None:
        return job.samples_per_s, job.source, gpu
    if task_rate is not None:
        return task_rate[0], f"the task's measured rate on {task_rate[1]}", task_rate[1]
    raise BadInputError(f"{source}: no training rate to feed (no `bench train` image model in "
                        "it, and the task's rate is not in samples/s); recommend --run on a "
                        "bench train run")


def _from_loader(m: Measurement, source: str, gpu: str | None, ms: Sequence[Measurement],
                 task_rate: tuple[float, str] | None) -> FeedNeed:
    p = m.params
    workers = int(p.get("workers") or 0)  # type: ignore[arg-type]
    cores = int(p.get("cpu_cores") or workers)  # type: ignore[arg-type]
    busy = max(1, min(workers, cores))
    rate = float(m.value or 0.0)
    train = p.get("train_rate")
    if isinstance(train, int | float) and train > 0:
        need, of = float(train), "the image model's training rate in the same run"
    else:
        need, of, gpu = _train_rate(ms, task_rate, source, gpu)
    cpu_s = busy / rate  # CPU-seconds per sample: `busy` CPUs made `rate` samples/s
    crop = p.get("crop")
    batch = p.get("batch")
    batch_bytes = (float(batch) * 3 * float(crop) ** 2 * 4
                   if isinstance(batch, int) and isinstance(crop, int) else DEFAULT_BATCH_BYTES)
    return FeedNeed(
        source=f"{source}: bench train data loading", loader_vcpus_per_gpu=need * cpu_s,
        trainer_vcpus_per_gpu=TRAINER_VCPUS, worker_gib=_worker_gib(batch_bytes),
        gpu_model=gpu, samples_per_s_per_gpu=need,
        basis=(f"{p.get('pipeline') or 'JPEG pipeline'}: {rate:,.0f} samples/s with {workers} "
               f"loader workers on {cores} CPUs ({cpu_s * 1e3:.3g} CPU-ms per sample)",
               f"{need:,.0f} samples/s per GPU to feed ({of})", *_beyond(need * cpu_s)))


def _from_decode(decode: list[Measurement], ms: Sequence[Measurement], source: str,
                 gpu: str | None, task_rate: tuple[float, str] | None) -> FeedNeed:
    from gpuaudit.bench.feed.verdict import IMAGENET_JPEG_BYTES, job_from_train

    job = job_from_train(ms, 1)
    size = job.stored_bytes_per_sample if job is not None else IMAGENET_JPEG_BYTES

    def per_cpu(m: Measurement) -> float:
        """Images/s per CPU at the job's image size (decode time grows with the image)."""
        jpeg = m.params.get("jpeg_bytes")
        scale = jpeg / size if isinstance(jpeg, int | float) else 1.0
        return float(m.value or 0.0) * scale / max(1, int(m.params.get("threads") or 1))  # type: ignore[arg-type]

    best = max(decode, key=per_cpu)
    need, of, gpu = _train_rate(ms, task_rate, source, gpu)
    cpu_s = 1 / per_cpu(best)
    device = job.device_bytes if job is not None else 3 * 224 * 224
    return FeedNeed(
        source=f"{source}: bench host JPEG decode", loader_vcpus_per_gpu=need * cpu_s,
        trainer_vcpus_per_gpu=TRAINER_VCPUS,
        worker_gib=_worker_gib(256 * device * 4), gpu_model=gpu, samples_per_s_per_gpu=need,
        basis=(f"JPEG decode + augment with {best.params.get('library')} on "
               f"{best.params.get('threads')} CPUs: {per_cpu(best):,.0f} images/s per CPU at "
               f"{size / 1e3:,.0f} KB per image ({cpu_s * 1e3:.3g} CPU-ms per sample)",
               f"{need:,.0f} samples/s per GPU to feed ({of})", *_beyond(need * cpu_s)))


def need_from_diagnosis(doc: dict[str, Any], where: str) -> FeedNeed:
    """A `doctor --save` document's input-bound finding turned into a need (module
    docstring). BadInputError when the job was not input-bound by its loader's CPUs."""
    found = next((f for f in doc.get("findings") or () if isinstance(f, dict)
                  and f.get("code") == "input-bound"), None)
    if found is None:
        raise BadInputError(f"diagnosis {where} found no input-bound job: nothing to size the "
                            "feed by")
    ev = {o.get("name"): o.get("value") for o in found.get("evidence") or ()
          if isinstance(o, dict)}
    workers, share = ev.get("loader_workers"), found.get("share")
    cpu, trainer = ev.get("worker_cpu"), ev.get("trainer_cpu")
    if not (isinstance(workers, int | float) and isinstance(share, int | float)
            and 0 <= share < 1):
        raise BadInputError(f"diagnosis {where}: its input-bound finding has no loader "
                            "workers' CPU figures (the job's processes were not watched)")
    gpus = max(1, len(doc.get("gpus") or ()))
    if workers > 0 and isinstance(cpu, int | float):
        if cpu < CPU_BOUND_PCT:
            raise BadInputError(
                f"diagnosis {where}: the loader's {workers:g} workers ran at {cpu:.0f}% of a "
                "core each: input-bound, but not by its CPUs (storage, or too few workers); "
                "vCPUs per GPU cannot tell which offers feed it")
        used = workers * cpu / 100 / gpus
        how = f"{workers:g} loader workers at {cpu:.0f}% of a core each"
    elif workers == 0 and isinstance(trainer, int | float) and trainer >= CPU_BOUND_PCT:
        used = trainer / 100 / gpus  # loading in the training process itself
        how = f"no loader workers: the training process loads, at {trainer:.0f}% of a core"
    else:
        raise BadInputError(f"diagnosis {where}: its input-bound finding has no busy loader "
                            "CPUs to size the feed by")
    need = used / (1 - share)
    basis = [f"{how} on {gpus} GPU(s) while the GPUs waited {share:.0%} of the time: "
             f"{used:.3g} vCPUs per GPU delivered {1 - share:.1%} of the rate the GPUs take",
             "the diagnosed GPU's model is not recorded: the need is taken as it is on every "
             "GPU (a faster GPU needs more)"]
    basis += _beyond(need)
    return FeedNeed(
        source=f"diagnosis {where}: doctor's input-bound finding",
        loader_vcpus_per_gpu=need, trainer_vcpus_per_gpu=TRAINER_VCPUS,
        worker_gib=_worker_gib(DEFAULT_BATCH_BYTES), gpu_model=None, basis=tuple(basis))


def check(need: FeedNeed, vcpus: int | None, ram_gib: float | None, gpus: int,
          speed: float) -> FeedCheck:
    """One offer (`vcpus`, `ram_gib` per instance of `gpus` GPUs) against `need`, its GPUs
    running the task `speed` times as fast as the reference GPU."""
    loader = need.loader_vcpus_per_gpu * speed
    want = need.trainer_vcpus_per_gpu + loader
    ram_want = math.ceil(loader) * need.worker_gib
    have = vcpus / gpus if vcpus else None
    ram = ram_gib / gpus if ram_gib else None
    at = (f"{need.samples_per_s_per_gpu * speed:,.0f} samples/s per GPU"
          if need.samples_per_s_per_gpu else f"{speed:.2g}× the reference rate"
          if speed != 1 else "the rate measured")
    if have is None:
        return FeedCheck(verdict="unknown", vcpus_needed_per_gpu=want,
                         ram_gib_needed_per_gpu=ram_want, ram_gib_per_gpu=ram,
                         reason=f"feed not checked: the offer lists no vCPUs (needs about "
                                f"{want:.3g} per GPU at {at})")
    short = []
    wait = 0.0
    if have < want:
        wait = min(1.0, max(0.0, 1 - (have - need.trainer_vcpus_per_gpu) / loader))
        short.append(f"{have:g} vCPUs per GPU, needs about {want:.3g} to feed {at}: its GPUs "
                     f"would wait about {wait:.0%} of the time")
    if ram is not None and ram < ram_want:
        short.append(f"{ram:g} GiB of memory per GPU, less than the {ram_want:.3g} GiB of "
                     f"{math.ceil(loader)} loader workers")
    if short:
        return FeedCheck(verdict="short", vcpus_needed_per_gpu=want, ram_gib_needed_per_gpu=
                         ram_want, vcpus_per_gpu=have, ram_gib_per_gpu=ram,
                         gpu_wait_share=wait, reason="cannot feed its GPUs: " + "; ".join(short))
    return FeedCheck(verdict="feeds", vcpus_needed_per_gpu=want, ram_gib_needed_per_gpu=ram_want,
                     vcpus_per_gpu=have, ram_gib_per_gpu=ram,
                     reason=f"feeds its GPUs: {have:g} vCPUs per GPU, needs about {want:.3g} "
                            f"at {at}")
