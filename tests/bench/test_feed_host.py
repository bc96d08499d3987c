"""The host suite on this machine's CPUs: STREAM kernels checked, synthetic JPEGs decoded and
augmented in pinned worker processes; and the feed verdict in `gpuaudit run`'s summary."""

from __future__ import annotations

import io
import json
import os
import random

import pytest

from gpuaudit.bench import runner
from gpuaudit.bench.feed import jpeg, stream
from gpuaudit.bench.stats import MIN_SAMPLES
from tests.conftest import FedRun, fixture_machine

pytest.importorskip("numpy")
pytest.importorskip("PIL")


def test_stream_kernels_are_checked_and_counted_as_stream_does():
    cpus = sorted(os.sched_getaffinity(0))[:2]
    results = stream.run_stream(cpus, 24 << 20, iters=3, warmup=1)
    assert set(results) == {"copy", "triad"}
    for rates, ok, elements in results.values():
        assert ok and len(rates) == 3 and all(r > 0 for r in rates)
        assert elements % stream.BLOCK == 0
        assert 3 * 8 * elements * len(cpus) <= 24 << 20


def test_synthetic_jpegs_look_like_imagenet_photos():
    from PIL import Image

    images = jpeg.make_jpegs(4, seed=1)
    assert len(set(images)) == 4
    assert 60_000 < sum(map(len, images)) / 4 < 160_000  # ImageNet's average is ~110 KB
    with Image.open(io.BytesIO(images[0])) as img:
        assert img.size == (jpeg.WIDTH, jpeg.HEIGHT) and img.format == "JPEG"


def test_augment_gives_a_normalised_224_crop():
    out = jpeg.augment_pil(jpeg.make_jpegs(1)[0], random.Random(3))
    assert out.shape == (224, 224, 3) and str(out.dtype) == "float32"
    lo = min((0 - m) / s for m, s in zip(jpeg.MEAN, jpeg.STD, strict=True))
    hi = max((1 - m) / s for m, s in zip(jpeg.MEAN, jpeg.STD, strict=True))
    assert lo - 1e-5 <= float(out.min()) < float(out.max()) <= hi + 1e-5


def test_pinned_workers_report_every_completion():
    images = jpeg.make_jpegs(4)
    start, done = jpeg.run_workers("pil", images, 0.3, sorted(os.sched_getaffinity(0))[:2],
                                   timeout_s=60)
    assert len(done) >= 2 and done == sorted(done) and done[0] > start
    assert done[-1] - start >= 0.3


def test_a_failing_worker_is_an_error_not_a_hang():
    with pytest.raises(OSError, match="JPEG worker failed"):
        jpeg.run_workers("pil", [b"not a jpeg"], 0.2, [sorted(os.sched_getaffinity(0))[0]],
                         timeout_s=60)


def test_host_suite_and_its_capacity_finding():
    run = runner.run_bench(["host"], machine=fixture_machine())
    found = {m.name: m for m in run.measurements}
    for name in ("stream_copy", "stream_triad"):
        assert found[name].value > 0 and found[name].verified is True
        assert found[name].params["numa_node"] == "0"
    one, every = found["jpeg_pil_1core"], found["jpeg_pil_all"]
    assert every.value > 0 and every.params["cores"] == "all"
    assert every.params["threads"] == len(os.sched_getaffinity(0))
    assert every.params["per_core"] == round(every.value / every.params["threads"], 1)
    # quick's short decode still gives a spread worth reading
    assert len(every.samples) >= MIN_SAMPLES and not any("rough guide" in n for n in every.notes)
    # quick decodes on all cores only (what a loader gets); one core alone is standard's
    assert one.skipped and "--profile standard" in one.skipped_reason
    gpu = found["jpeg_nvjpeg"]
    if gpu.skipped:  # no GPU here: said why
        assert gpu.value is None and gpu.skipped_reason
    else:  # on the GPU machine: nvJPEG's decode agrees with the CPU's
        assert gpu.value > 0 and gpu.verified is True and len(gpu.samples) >= MIN_SAMPLES
        assert gpu.params["vs_cpu_psnr_db"] >= jpeg.AGREE_PSNR_DB
    (cap,) = [f for f in run.findings if f.code.startswith("feed.")]
    assert cap.code == "feed.capacity" and cap.evidence["limiting_stage"] == "decode"


def test_run_judges_a_job_against_storage_and_decode(fed_run: FedRun):
    # `run --json --data DIR --job 1000000:110K:jpeg:random` (tests/conftest.py): 1,000,000
    # samples/s of 110 KB JPEGs, no machine of this size can feed that
    done, data = fed_run.done, fed_run.data
    assert done.returncode in (0, 1), done.stderr
    doc = json.loads(done.stdout)
    (f,) = [f for f in doc["findings"] if f["code"].startswith("feed.")]
    assert f["code"] == "feed.input-bound" and f["severity"] == "WARN"
    assert f["evidence"]["job_source"] == "--job"
    assert f["evidence"]["storage_samples_per_s"] > 0 and f["evidence"]["decode_samples_per_s"]
    assert os.listdir(data) == []
    assert any(m["suite"] == "storage" and m["value"] for m in doc["measurements"])


def test_decode_agreement_tells_another_decoder_from_corrupt_data():
    # nvJPEG's check: the GPU's decode of one test image against the CPU's. A correct decoder
    # that upsamples chroma another way (nearest instead of libjpeg-turbo's triangle filter)
    # must pass; an 8-pixel shift, or a bit error in the scan, must not.
    import io

    import numpy as np
    from PIL import Image

    from gpuaudit.bench.feed import jpeg

    data = jpeg.make_jpegs(1, seed=3)[0]
    ref = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"))
    same = jpeg.agreement(ref, ref)
    assert same.psnr_db == float("inf") and same.worst_tile_abs_levels == 0 and same.ok

    ycc = np.asarray(Image.open(io.BytesIO(data)).convert("YCbCr")).astype(np.float64)
    h, w = ycc.shape[0] // 2 * 2, ycc.shape[1] // 2 * 2
    for ch in (1, 2):  # 4:2:0 chroma, box-averaged, then nearest upsampling
        sub = ycc[:h, :w, ch].reshape(h // 2, 2, w // 2, 2).mean(axis=(1, 3))
        ycc[:h, :w, ch] = np.repeat(np.repeat(sub, 2, 0), 2, 1)
    other = np.asarray(Image.fromarray(np.clip(ycc, 0, 255).astype(np.uint8), "YCbCr")
                       .convert("RGB"))
    a = jpeg.agreement(other, ref)
    assert a.mean_abs_levels > 2.0  # the old check (under 2 levels) called this corrupt
    assert a.ok and a.worst_tile_abs_levels < jpeg.AGREE_TILE_LEVELS / 2

    assert not jpeg.agreement(np.roll(ref, 8, axis=1), ref).ok

    def flipped(offset: int) -> np.ndarray:
        bad = bytearray(data)
        bad[bad.index(b"\xff\xda") + offset] ^= 0x5A  # inside the scan
        img = Image.open(io.BytesIO(bytes(bad)))
        img.load()
        return np.asarray(img.convert("RGB"))

    wide = jpeg.agreement(flipped(2000), ref)  # everything after the error is garbage
    assert wide.psnr_db < 20 and not wide.ok
    local = jpeg.agreement(flipped(20000), ref)  # a few blocks hit: PSNR alone misses it
    assert local.psnr_db > jpeg.AGREE_PSNR_DB and local.worst_tile_abs_levels > 30
    assert not local.ok
