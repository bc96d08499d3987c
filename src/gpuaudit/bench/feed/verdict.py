"""Can this server feed a training job? Storage, CPU decode and host→device copies, each turned
into the samples per second it can deliver, against the job's rate.

The job comes from the user (`--job 2500:110K:jpeg:random`) or from the `train` suite: its
`MODEL/MODE/throughput` figures (samples/s on one GPU); the fastest is judged (the hardest to
feed), times the GPUs benchmarked. From its params: `stored_bytes_per_sample`,
`input_bytes_per_sample` and `data` where given; else an image model (`image_size`, or a
resnet/vit/... name) is ImageNet-like JPEGs (110 KB stored, 3×side² uint8 on the GPU, read at
random) and a language model (`seq_len`) reads uint16 token ids in order (2×seq_len bytes)
and copies int64 ones (8×seq_len bytes).

Pure functions over Measurements: CI tests them with exact values.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from gpuaudit.errors import BadInputError
from gpuaudit.model import Finding, Measurement, Severity
from gpuaudit.parse import human_bytes, number, size_bytes

IMAGE_DEVICE_BYTES = 3 * 224 * 224  # a 224×224 RGB crop in uint8, normalised on the GPU
# ImageNet-1k train: 1,281,167 JPEGs in about 140 GB.
IMAGENET_JPEG_BYTES = 110_000
TIGHT = 1.25  # less headroom than this: it feeds the job today, not a faster one
IMAGE_MODEL = re.compile(r"resnet|vit|cnn|efficientnet|convnext|image|regnet", re.I)
KINDS = ("jpeg", "raw")
ACCESS = ("seq", "random")


@dataclass(frozen=True)
class FeedJob:
    samples_per_s: float
    stored_bytes_per_sample: int
    kind: str = "raw"  # "jpeg": each sample is decoded and augmented on the CPU
    access: str = "seq"  # "random": one random read per sample (a file per sample)
    device_bytes_per_sample: int | None = None  # None: 3×224×224 for jpeg, stored for raw
    source: str = "given"

    @property
    def device_bytes(self) -> int:
        if self.device_bytes_per_sample is not None:
            return self.device_bytes_per_sample
        return IMAGE_DEVICE_BYTES if self.kind == "jpeg" else self.stored_bytes_per_sample


# What `gpuaudit run` judges when it knows no job: an ImageNet-style training input.
REFERENCE_JOB = FeedJob(samples_per_s=0.0, stored_bytes_per_sample=IMAGENET_JPEG_BYTES,
                        kind="jpeg", access="random", source="reference")

JOB_HELP = ("RATE:BYTES[:jpeg|raw][:seq|random][:DEVICE_BYTES] — samples/s, stored bytes per "
            "sample, whether samples are JPEGs decoded on the CPU, read in order or one random "
            "read each, bytes copied to the GPU per sample; e.g. 2500:110K:jpeg:random")


def _bytes(text: str) -> int:
    """A byte size, ValueError when it is not one (size_bytes may say so either way)."""
    try:
        return size_bytes(text, "size")
    except BadInputError as exc:
        raise ValueError(str(exc)) from None


def parse_job(text: str) -> FeedJob:
    """'2500:110K:jpeg:random' → FeedJob. Bad text is bad input (exit 2)."""
    parts = [p.strip() for p in text.split(":")]
    bad = BadInputError(f"--job {text!r}: expected {JOB_HELP.split(' — ')[0]}")
    if len(parts) < 2:
        raise bad
    # The grammar's number: finite, ASCII digits, at most a billion samples a second.
    rate = number(parts[0], "--job RATE", lo=0, lo_open=True, hi=1e9, example="2500")
    try:
        stored = _bytes(parts[1])
    except ValueError:
        raise bad from None
    job = FeedJob(samples_per_s=rate, stored_bytes_per_sample=stored, source="--job")
    for token in parts[2:]:
        word = token.lower()
        if word in KINDS:
            job = replace(job, kind=word)
        elif word in ACCESS:
            job = replace(job, access=word)
        else:
            try:
                job = replace(job, device_bytes_per_sample=_bytes(token))
            except ValueError:
                raise bad from None
    return job


def job_from_train(measured: Sequence[Measurement], gpus: int = 1) -> FeedJob | None:
    """The job the train suite measured: its fastest single-GPU `MODEL/MODE/throughput`
    figure, times the GPUs the run benchmarks (a job on the whole box). Data-loading and DDP
    figures are not jobs. None when there is none, or when a sample's size cannot be told."""
    rates = [m for m in measured if m.suite == "train" and m.unit == "samples/s"
             and m.value is not None and m.value > 0 and m.name.endswith("/throughput")
             and not m.name.startswith("data/") and "/ddp/" not in m.name]
    n = max(1, gpus)
    for m in sorted(rates, key=lambda m: -(m.value or 0.0)):
        p = m.params
        stored = p.get("stored_bytes_per_sample")
        device = p.get("input_bytes_per_sample")
        data = str(p.get("data") or "")
        model = str(p.get("model") or m.name.split("/", 1)[0])
        image = data in ("jpeg", "image") or "image_size" in p or bool(IMAGE_MODEL.search(model))
        seq_len = p.get("seq_len")
        if image:
            side = p.get("image_size")
            if not isinstance(device, int) and isinstance(side, int):
                device = 3 * side * side  # uint8 RGB crop, normalised on the GPU
            if not isinstance(stored, int):
                stored = IMAGENET_JPEG_BYTES
        elif isinstance(seq_len, int):
            # token ids: uint16 on disk (nanoGPT-style shards), int64 on the GPU
            stored = stored if isinstance(stored, int) else 2 * seq_len
            device = device if isinstance(device, int) else 8 * seq_len
        elif not isinstance(stored, int):
            if not isinstance(device, int):
                continue  # no idea what a sample weighs
            stored = device
        source = f"train/{m.name}" + (f" × {n} GPUs" if n > 1 else "")
        return FeedJob(samples_per_s=float(m.value or 0.0) * n, stored_bytes_per_sample=stored,
                       kind="jpeg" if image else "raw", access="random" if image else "seq",
                       device_bytes_per_sample=device if isinstance(device, int) else None,
                       source=source)
    return None


@dataclass(frozen=True)
class Stage:
    name: str  # "storage", "decode", "host→device"
    capacity: float | None  # samples/s it can deliver; None: not measured
    basis: str  # how the capacity was worked out, or why it is missing


def _ours(measured: Sequence[Measurement], suite: str, name: str) -> list[Measurement]:
    return [m for m in measured if m.suite == suite and m.name == name
            and m.value is not None and not m.params.get("tool")]


def storage_stage(measured: Sequence[Measurement], job: FeedJob) -> Stage:
    seq = _ours(measured, "storage", "seq_read")
    if not seq:
        return Stage("storage", None, "`gpuaudit bench storage PATH`")
    first = seq[0]  # the first PATH given is where the data lives
    where = str(first.params.get("path", "?"))
    gbps = float(first.value or 0.0)
    cap = gbps * 1e9 / job.stored_bytes_per_sample
    basis = (f"sequential reads {gbps:.3g} GB/s on {where} ÷ "
             f"{human_bytes(job.stored_bytes_per_sample)} per sample")
    if job.access == "random":
        rand = [m for m in measured if m.suite == "storage" and m.unit == "IOPS"
                and m.value is not None and not m.params.get("tool")
                and m.params.get("path") == first.params.get("path")]
        if rand:
            best = max(rand, key=lambda m: m.value or 0.0)
            iops = float(best.value or 0.0)
            basis += (f"; one random read per sample: {iops:,.0f} IOPS at depth "
                      f"{best.params.get('queue_depth')}")
            cap = min(cap, iops)
    return Stage("storage", cap, basis)


def decode_stage(measured: Sequence[Measurement], job: FeedJob) -> Stage | None:
    if job.kind != "jpeg":
        return None
    rates = [m for m in measured if m.suite == "host" and m.name.startswith("jpeg_")
             and m.params.get("cores") == "all" and m.value is not None]
    if not rates:
        return Stage("decode", None, "`gpuaudit bench host`")

    def scaled(m: Measurement) -> float:
        """Decode time grows with the image: a rate on our JPEGs, moved to the job's size."""
        size = m.params.get("jpeg_bytes")
        scale = size / job.stored_bytes_per_sample if isinstance(size, int | float) else 1.0
        return float(m.value or 0.0) * scale

    best = max(rates, key=scaled)
    cap = scaled(best)
    size = best.params.get("jpeg_bytes")
    basis = (f"JPEG decode + augment on all {best.params.get('threads', '?')} CPUs with "
             f"{best.params.get('library')}: {best.value:,.0f} images/s")
    if isinstance(size, int | float) and size != job.stored_bytes_per_sample:
        basis += (f" of {human_bytes(int(size))}, scaled by size to "
                  f"{human_bytes(job.stored_bytes_per_sample)}")
    return Stage("decode", cap, basis)


def h2d_stage(measured: Sequence[Measurement], job: FeedJob, kind: str = "pinned") -> Stage:
    total = _ours(measured, "transfer", f"h2d_{kind}_all_total")
    if total:
        gbps, how = float(total[0].value or 0.0), "all GPUs at once"
    else:
        per_gpu = {m.gpu_index: float(m.value or 0.0)
                   for m in _ours(measured, "transfer", f"h2d_{kind}")}
        if not per_gpu:
            return Stage("host→device", None, "`gpuaudit bench transfer` on the GPU machine")
        gbps = sum(per_gpu.values())
        how = "one GPU" if len(per_gpu) == 1 else f"sum of {len(per_gpu)} GPUs alone"
    return Stage("host→device", gbps * 1e9 / job.device_bytes,
                 f"{kind} copies {gbps:.3g} GB/s ({how}) ÷ {human_bytes(job.device_bytes)} "
                 "per sample")


ADVICE = {
    "storage": "Copy the data set to local NVMe first, store it in sharded sequential files "
               "(WebDataset, TFRecord, Parquet) instead of one file per sample, or cache it in "
               "host memory.",
    "decode": "Decode on the GPU (nvJPEG: torchvision.io.decode_jpeg(device='cuda') or "
              "NVIDIA DALI), store images pre-resized, or rent more CPU cores per GPU.",
    "host→device": "Use pinned memory (DataLoader(pin_memory=True)), copy uint8 and convert "
                   "on the GPU, and keep each GPU's loader on its own NUMA node.",
}


def _fmt(rate: float) -> str:
    return f"{rate:,.0f}"


def _relevant(measured: Sequence[Measurement]) -> bool:
    return any(m.suite in ("host", "storage") and m.value is not None for m in measured)


def feed_findings(measured: Sequence[Measurement], job: FeedJob | None = None,
                  gpus: int = 1) -> list[Finding]:
    """The feed verdict: one Finding, or none when neither a job nor a feed figure is known.
    Without a job, the train suite's rate on one GPU times `gpus` is the job."""
    job = job or job_from_train(measured, gpus)
    if job is None:
        if not _relevant(measured):
            return []
        return _capacity(measured)
    stages = [s for s in (storage_stage(measured, job), decode_stage(measured, job),
                          h2d_stage(measured, job)) if s is not None]
    known = [s for s in stages if s.capacity is not None]
    missing = [s for s in stages if s.capacity is None]
    evidence: dict[str, str | int | float | bool | None] = {
        "job_samples_per_s": job.samples_per_s, "job_source": job.source,
        "stored_bytes_per_sample": job.stored_bytes_per_sample,
        "device_bytes_per_sample": job.device_bytes, "kind": job.kind, "access": job.access,
        **{f"{s.name}_samples_per_s": None if s.capacity is None else round(s.capacity, 1)
           for s in stages},
        **{f"{s.name}_basis": s.basis for s in stages},
    }
    unmeasured = ", ".join(f"{s.name} ({s.basis})" for s in missing)
    if not known:
        return [Finding(code="feed.not-measured", severity=Severity.INFO,
                        message=f"cannot judge whether this server feeds {_fmt(job.samples_per_s)}"
                                f" samples/s: not measured: {unmeasured}",
                        evidence=evidence)]
    limit = min(known, key=lambda s: s.capacity or 0.0)
    cap = float(limit.capacity or 0.0)
    ratio = cap / job.samples_per_s
    evidence.update(limiting_stage=limit.name, headroom=round(ratio, 3))
    tail = f" (not measured: {unmeasured})" if missing else ""
    need = f"{_fmt(job.samples_per_s)} samples/s ({job.source})"
    if ratio < 1:
        message = (f"cannot feed {need}: {limit.name} delivers at most {_fmt(cap)} samples/s, "
                   f"{ratio:.0%} of it ({limit.basis}); the GPUs would wait about "
                   f"{1 - ratio:.0%} of the time{tail}")
        return [Finding(code="feed.input-bound", severity=Severity.WARN, message=message,
                        advice=ADVICE[limit.name],
                        evidence=evidence)]
    message = (f"feeds {need}: {limit.name} limits first at {_fmt(cap)} samples/s, "
               f"{ratio:.2f}× the job's rate ({limit.basis}){tail}")
    pageable = h2d_stage(measured, job, "pageable")
    advice = None
    if pageable.capacity is not None and pageable.capacity < job.samples_per_s:
        advice = (f"Keep pin_memory=True: pageable copies reach only "
                  f"{_fmt(pageable.capacity)} samples/s here.")
    if ratio < TIGHT:
        return [Finding(code="feed.tight", severity=Severity.INFO,
                        message=message + f": less than {TIGHT:.2f}× headroom",
                        advice=advice or ADVICE[limit.name], evidence=evidence)]
    # INFO, not PASS: the figures behind it are what the user asked for, so it is shown.
    return [Finding(code="feed.ok", severity=Severity.INFO, message=message, advice=advice,
                    evidence=evidence)]


def _capacity(measured: Sequence[Measurement]) -> list[Finding]:
    """No job known: what this server could feed for an ImageNet-style input pipeline."""
    job = REFERENCE_JOB
    stages = [s for s in (storage_stage(measured, job), decode_stage(measured, job),
                          h2d_stage(measured, job)) if s is not None]
    known = [s for s in stages if s.capacity is not None]
    if not known:
        return []
    limit = min(known, key=lambda s: s.capacity or 0.0)
    others = "; ".join(f"{s.name}: {_fmt(s.capacity)}/s" if s.capacity is not None
                       else f"{s.name}: not measured" for s in stages if s is not limit)
    return [Finding(
        code="feed.capacity", severity=Severity.INFO,
        message=f"for ImageNet-style JPEGs ({human_bytes(job.stored_bytes_per_sample)} read at "
                f"random, decoded on the CPU) this server feeds at most "
                f"{_fmt(limit.capacity or 0.0)} samples/s, limited by {limit.name} "
                f"({limit.basis}); {others}",
        advice="Give the job's rate to judge it: --job RATE:BYTES[:jpeg|raw][:seq|random], "
               "or run `gpuaudit bench train`.",
        evidence={"limiting_stage": limit.name,
                  **{f"{s.name}_samples_per_s": None if s.capacity is None
                     else round(s.capacity, 1) for s in stages}})]
