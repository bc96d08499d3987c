"""The feed verdict with exact values: which stage limits a training job first, and by how much.
Host→device figures are the real ones of the 2×H200 recording."""

from __future__ import annotations

import json

import pytest

from gpuaudit.bench.feed.verdict import (
    IMAGE_DEVICE_BYTES,
    IMAGENET_JPEG_BYTES,
    FeedJob,
    decode_stage,
    feed_findings,
    h2d_stage,
    job_from_train,
    parse_job,
    storage_stage,
)
from gpuaudit.errors import BadInputError
from gpuaudit.model import Measurement, Severity

from .conftest import FIXTURES, fixture_machine

H200_TRANSFER = [Measurement.model_validate(m) for m in
                 json.loads((FIXTURES / "feed" / "h200_2gpu_transfer.json").read_text())]
H2D_TOTAL = next(m.value for m in H200_TRANSFER if m.name == "h2d_pinned_all_total")


def m(suite: str, name: str, unit: str, value: float, **params) -> Measurement:
    return Measurement(suite=suite, name=name, unit=unit, value=value, params=params)


STORAGE = [
    m("storage", "seq_read", "GB/s", 2.2, path="/data"),
    m("storage", "seq_read", "GB/s", 9.0, path="/scratch"),
    m("storage", "rand4k_read_qd1", "IOPS", 8_000, path="/data", queue_depth=1),
    m("storage", "rand4k_read_qd16", "IOPS", 12_000, path="/data", queue_depth=16),
    m("storage", "seq_read", "GB/s", 50.0, path="/data", tool="fio"),  # never judged
]
DECODE = [
    m("host", "jpeg_pil_1core", "images/s", 350, cores="1", jpeg_bytes=110_000, threads=1,
      library="pil"),
    m("host", "jpeg_pil_all", "images/s", 30_000, cores="all", jpeg_bytes=110_000,
      threads=96, library="pil"),
    m("host", "jpeg_torchvision_all", "images/s", 33_000, cores="all", jpeg_bytes=55_000,
      threads=96, library="torchvision"),
]


def test_parse_job():
    job = parse_job("2500:110K:jpeg:random")
    assert (job.samples_per_s, job.stored_bytes_per_sample, job.kind, job.access) == (
        2500.0, 110 * 1024, "jpeg", "random")
    assert job.device_bytes == IMAGE_DEVICE_BYTES == 150_528
    raw = parse_job("400:8K:2M")
    assert (raw.kind, raw.access, raw.device_bytes) == ("raw", "seq", 2 << 20)
    assert parse_job("100:4M").device_bytes == 4 << 20  # raw: what is read is what is copied
    for bad in ("2500", "x:110K", "0:110K", "-5:1K", "2500:lots", "2500:1K:gif"):
        with pytest.raises(BadInputError, match="--job"):
            parse_job(bad)


def test_storage_stage_uses_the_first_path_and_one_random_read_per_sample():
    seq = storage_stage(STORAGE, FeedJob(1000, 110_000))
    assert seq.capacity == 2.2e9 / 110_000 == 20_000
    assert "/data" in seq.basis
    rand = storage_stage(STORAGE, FeedJob(1000, 110_000, access="random"))
    assert rand.capacity == 12_000  # the best IOPS (depth 16) binds before 20,000/s
    assert storage_stage([], FeedJob(1, 1)).capacity is None


def test_decode_stage_takes_the_best_all_core_decoder_scaled_by_image_size():
    s = decode_stage(DECODE, FeedJob(1000, 110_000, kind="jpeg"))
    # torchvision decoded 33,000/s of 55 KB images: 16,500/s of 110 KB ones, below PIL's 30,000
    assert s.capacity == 30_000 and "pil" in s.basis
    half = decode_stage(DECODE, FeedJob(1000, 55_000, kind="jpeg"))
    assert half.capacity == 60_000  # PIL at half the size: twice the rate, beats torchvision
    assert decode_stage(DECODE, FeedJob(1000, 110_000, kind="raw")) is None


def test_h2d_stage_on_the_real_h200_pair():
    s = h2d_stage(H200_TRANSFER, FeedJob(1000, 110_000, kind="jpeg"))
    assert s.capacity == H2D_TOTAL * 1e9 / IMAGE_DEVICE_BYTES
    assert "all GPUs at once" in s.basis
    alone = [x for x in H200_TRANSFER if not x.name.endswith("_total")]
    per_gpu = h2d_stage(alone, FeedJob(1000, 4096))
    pinned = sum(x.value for x in alone if x.name == "h2d_pinned")
    assert per_gpu.capacity == pinned * 1e9 / 4096 and "sum of 2 GPUs" in per_gpu.basis


def test_input_bound_job_names_the_first_limit_and_the_wait():
    measured = STORAGE + DECODE + H200_TRANSFER
    (f,) = feed_findings(measured, FeedJob(40_000, 110_000, kind="jpeg", access="random"))
    assert f.code == "feed.input-bound" and f.severity is Severity.WARN
    assert f.evidence["limiting_stage"] == "storage"
    assert f.evidence["headroom"] == 0.3  # 12,000 of 40,000 samples/s
    assert f.evidence["decode_samples_per_s"] == 30_000
    assert "storage delivers at most 12,000 samples/s, 30% of it" in f.message
    assert "wait about 70% of the time" in f.message
    assert "sharded" in f.advice


def test_decode_limits_when_data_is_read_in_order():
    (f,) = feed_findings(STORAGE + DECODE + H200_TRANSFER,
                         FeedJob(40_000, 110_000, kind="jpeg"))
    assert f.evidence["limiting_stage"] == "storage"  # 20,000/s sequential still binds
    (g,) = feed_findings(STORAGE[1:] + DECODE + H200_TRANSFER,  # /scratch first: 9 GB/s
                         FeedJob(40_000, 110_000, kind="jpeg"))
    assert g.evidence["limiting_stage"] == "decode" and g.evidence["headroom"] == 0.75
    assert "nvJPEG" in g.advice


def test_a_job_that_fits_is_ok_or_tight_by_its_headroom():
    measured = STORAGE + DECODE + H200_TRANSFER
    (ok,) = feed_findings(measured, FeedJob(5_000, 110_000, kind="jpeg", access="random"))
    assert ok.code == "feed.ok" and ok.severity is Severity.INFO
    assert "limits first at 12,000 samples/s, 2.40× the job's rate" in ok.message
    (tight,) = feed_findings(measured, FeedJob(10_000, 110_000, kind="jpeg", access="random"))
    assert tight.code == "feed.tight" and tight.evidence["headroom"] == 1.2


def test_pageable_copies_that_would_not_keep_up_are_pointed_out():
    # 2 MB raw samples: pinned (2 × 55 GB/s together) feeds 54,700/s, pageable (9.6 GB/s per
    # GPU) about 9,600/s.
    storage = [m("storage", "seq_read", "GB/s", 100.0, path="/dev/shm")]
    (f,) = feed_findings(storage + H200_TRANSFER, FeedJob(20_000, 2_000_000))
    assert f.code == "feed.ok" and "pin_memory=True" in f.advice


def test_unmeasured_stages_are_named_not_guessed():
    (f,) = feed_findings(DECODE, FeedJob(1_000, 110_000, kind="jpeg"))
    assert f.code == "feed.ok" and "not measured: storage" in f.message
    assert f.evidence["storage_samples_per_s"] is None
    (g,) = feed_findings([], FeedJob(1_000, 110_000, kind="jpeg"))
    assert g.code == "feed.not-measured" and g.severity is Severity.INFO


def test_without_a_job_the_capacity_for_imagenet_style_input_is_reported():
    (f,) = feed_findings(STORAGE + DECODE + H200_TRANSFER)
    assert f.code == "feed.capacity"
    assert f.evidence["limiting_stage"] == "storage"
    assert f.evidence["storage_samples_per_s"] == 12_000  # random reads of 110 KB JPEGs
    assert feed_findings(H200_TRANSFER) == []  # no feed suite ran: nothing to say


def test_the_train_suites_fastest_rate_is_the_job():
    # named and parametrised as the workloads package records them
    train = [
        m("train", "resnet50/bf16_compile_cl/throughput", "samples/s", 2_900.0,
          model="resnet50", image_size=224),
        m("train", "resnet50/fp32/throughput", "samples/s", 1_100.0, model="resnet50",
          image_size=224),
        m("train", "gpt-124m/bf16/tokens", "tokens/s", 500_000.0, model="gpt-124m"),
        m("train", "data/jpeg/w8", "samples/s", 9_000.0),  # a loader, not a job
        m("train", "resnet50/ddp/n2/throughput", "samples/s", 5_600.0, model="resnet50"),
    ]
    job = job_from_train(train)
    assert (job.samples_per_s, job.kind, job.access, job.stored_bytes_per_sample,
            job.device_bytes) == (2_900.0, "jpeg", "random", IMAGENET_JPEG_BYTES, 150_528)
    assert job.source == "train/resnet50/bf16_compile_cl/throughput"
    two = job_from_train(train, gpus=2)
    assert two.samples_per_s == 5_800.0 and two.source.endswith("× 2 GPUs")
    lm = job_from_train([m("train", "gpt-124m/bf16/throughput", "samples/s", 480.0,
                           model="gpt-124m", seq_len=1024)])
    assert (lm.kind, lm.access, lm.stored_bytes_per_sample, lm.device_bytes) == (
        "raw", "seq", 2048, 8192)
    given = job_from_train([m("train", "mine/bf16/throughput", "samples/s", 10.0,
                              stored_bytes_per_sample=5000, input_bytes_per_sample=4000)])
    assert (given.stored_bytes_per_sample, given.device_bytes) == (5000, 4000)
    assert job_from_train([m("train", "mystery/fp32/throughput", "samples/s", 10.0)]) is None
    (f,) = feed_findings(STORAGE + DECODE + H200_TRANSFER + train, gpus=2)
    assert f.evidence["job_source"].startswith("train/resnet50/bf16_compile_cl/throughput")
    assert f.evidence["job_samples_per_s"] == 5_800.0 and f.code == "feed.ok"


def test_run_bench_takes_the_job_as_text_and_refuses_bad_text_before_measuring():
    from gpuaudit.bench import runner


    with pytest.raises(BadInputError, match="--job"):
        runner.run_bench(["latency"], machine=fixture_machine(), options={"job": "fast"})
    run = runner.run_bench(["latency"], machine=fixture_machine(), options={"job": "100:1M"})
    (f,) = [f for f in run.findings if f.code.startswith("feed.")]
    assert f.code == "feed.not-measured" and f.evidence["job_samples_per_s"] == 100.0
