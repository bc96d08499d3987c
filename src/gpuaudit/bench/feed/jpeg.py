"""JPEG decode + augment, the CPU work of an image training input pipeline.

Test images are made here (nothing is downloaded): 500×375 photos-like pictures (smooth
gradients, shapes and noise) at quality 90, about the size of an average ImageNet JPEG. Each
one is decoded and augmented as torchvision's ImageNet recipe does: RandomResizedCrop to
224×224 (scale 0.08–1, ratio 3/4–4/3, bilinear), a random horizontal flip, then conversion to
float32 and per-channel normalisation.

Workers are processes (as DataLoader's), one pinned to each CPU, started with `spawn`; each
runs for a fixed time and returns its completion times, so the all-cores figure is all images
over the span from the first start to the last end.
"""

from __future__ import annotations

import functools
import io
import math
import os
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.feed.procs import Workers

WIDTH, HEIGHT, QUALITY = 500, 375, 90
CROP = 224
MEAN = (0.485, 0.456, 0.406)
STD = (0.229, 0.224, 0.225)
LIBRARIES = ("pil", "torchvision")


@functools.lru_cache(maxsize=2)
def _made(count: int) -> tuple[bytes, ...]:
    return tuple(make_jpegs(count))


def test_jpegs(count: int) -> list[bytes]:
    """The suite's `count` test JPEGs, made once per process (`host.prepare` makes them ahead,
    while torch loads)."""
    return list(_made(count))


def make_jpegs(count: int, seed: int = 0, width: int = WIDTH, height: int = HEIGHT,
               quality: int = QUALITY) -> list[bytes]:
    """`count` distinct synthetic photo-like JPEGs."""
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(seed)
    y, x = np.mgrid[0:height, 0:width].astype(np.float32)
    out = []
    for _ in range(count):
        img = np.zeros((height, width, 3), np.float32)
        for ch in range(3):
            fx, fy = rng.uniform(0.002, 0.03, 2).tolist()
            phase = rng.uniform(0, 6.28)
            img[..., ch] = 128 + 90 * np.sin(fx * x + fy * y + phase)
        for _ in range(6):  # a few blobs: edges, like objects in a photo
            cx, cy = rng.uniform(0, width), rng.uniform(0, height)
            r = rng.uniform(15, 90)
            mask = (x - cx) ** 2 + (y - cy) ** 2 < r * r
            img[mask] = rng.uniform(0, 255, 3)
        img += rng.normal(0, 24, img.shape)  # sensor noise: what makes photos weigh
        buf = io.BytesIO()
        Image.fromarray(np.clip(img, 0, 255).astype(np.uint8)).save(buf, "JPEG",
                                                                    quality=quality)
        out.append(buf.getvalue())
    return out


def crop_box(width: int, height: int, rng: random.Random) -> tuple[int, int, int, int]:
    """RandomResizedCrop's box (left, top, w, h): scale 0.08–1 of the area, log-uniform aspect
    ratio 3/4–4/3, ten tries, then the centre crop (torchvision's get_params)."""
    area = width * height
    for _ in range(10):
        target = area * rng.uniform(0.08, 1.0)
        ratio = math.exp(rng.uniform(math.log(3 / 4), math.log(4 / 3)))
        w = round(math.sqrt(target * ratio))
        h = round(math.sqrt(target / ratio))
        if 0 < w <= width and 0 < h <= height:
            return rng.randint(0, width - w), rng.randint(0, height - h), w, h
    side = min(width, height)
    return (width - side) // 2, (height - side) // 2, side, side


def augment_pil(data: bytes, rng: random.Random) -> Any:
    import numpy as np
    from PIL import Image

    img = Image.open(io.BytesIO(data)).convert("RGB")
    left, top, w, h = crop_box(img.width, img.height, rng)
    img = img.resize((CROP, CROP), Image.Resampling.BILINEAR,
                     box=(left, top, left + w, top + h))
    if rng.random() < 0.5:
        img = img.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    arr = np.asarray(img, dtype=np.float32) / 255.0
    return (arr - np.asarray(MEAN, np.float32)) / np.asarray(STD, np.float32)


def augment_torchvision(data: bytes, rng: random.Random) -> Any:
    import torch
    import torchvision.io as tvio

    img = tvio.decode_jpeg(torch.frombuffer(bytearray(data), dtype=torch.uint8))
    _, height, width = img.shape
    left, top, w, h = crop_box(width, height, rng)
    crop = img[:, top:top + h, left:left + w].unsqueeze(0).float()
    out = torch.nn.functional.interpolate(crop, size=(CROP, CROP), mode="bilinear",
                                          align_corners=False)[0]
    if rng.random() < 0.5:
        out = out.flip(-1)
    mean = torch.tensor(MEAN).view(3, 1, 1) * 255
    std = torch.tensor(STD).view(3, 1, 1) * 255
    return (out - mean) / std


def available(library: str) -> str | None:
    """None when `library` can run here, else why not."""
    import importlib.util

    needs = {"pil": ("PIL", "numpy"), "torchvision": ("torch", "torchvision")}[library]
    missing = [m for m in needs if importlib.util.find_spec(m) is None]
    if missing:
        extra = "pip install 'gpuaudit[feed]'" if library == "pil" else "pip install torchvision"
        return f"{', '.join(missing)} not installed ({extra})"
    return None


def worker(library: str, jpegs: Sequence[bytes], seconds: float, cpu: int | None, seed: int,
           ready: Callable[[], None]) -> tuple[float, list[float]]:
    """In a worker process: pin to `cpu`, warm up, wait for the go (`ready`), then decode +
    augment for `seconds`. Returns (start, completion times), on CLOCK_MONOTONIC (shared by
    processes)."""
    if cpu is not None and hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {cpu})
    if library == "torchvision":
        import torch

        torch.set_num_threads(1)
        fn = augment_torchvision
    else:
        fn = augment_pil
    rng = random.Random(seed)
    fn(jpegs[0], rng)  # warm-up: imports, first-call allocations
    ready()
    start = time.monotonic()
    end = start + seconds
    done: list[float] = []
    i = seed
    while time.monotonic() < end or not done:
        fn(jpegs[i % len(jpegs)], rng)
        done.append(time.monotonic())
        i += 1
    return start, done


def run_workers(library: str, jpegs: Sequence[bytes], seconds: float, cpus: Sequence[int],
                timeout_s: float) -> tuple[float, list[float]]:
    """One pinned process per CPU, started together. Returns (first start, all completion
    times). A worker's failure, or workers not done within `timeout_s`, is an OSError."""
    args = [(library, list(jpegs), seconds, cpu, k) for k, cpu in enumerate(cpus)]
    with Workers(worker, args, what="JPEG worker") as w:
        found = w.results(timeout_s=timeout_s)
    first = min(start for start, _ in found)
    return first, sorted(t for _, done in found for t in done)


# Two correct decoders of one JPEG differ: IDCT rounding, and above all chroma upsampling
# (libjpeg-turbo's "fancy" triangle filter against nvJPEG's), which on noisy 4:2:0 pictures
# moves pixels by several levels: nvJPEG on the H200 against the CPU, 32.0 dB, 4.7 levels on
# average, 9.7 at the worst 16×16 tile (2026-12-01); nearest against fancy upsampling ~37 dB,
# ~7 at the worst tile. Corrupt data is far off: everywhere after a broken bit in the scan
# (PSNR under 20 dB), or in the blocks it hits (a tile 30+ levels off).
AGREE_PSNR_DB = 25.0
AGREE_TILE_LEVELS = 16.0
TILE = 16  # pixels: one 4:2:0 MCU


@dataclass(frozen=True)
class DecodeAgreement:
    psnr_db: float  # of one decode against the other (8-bit peak), inf when identical
    mean_abs_levels: float
    worst_tile_abs_levels: float  # the largest mean |difference| over a 16×16 tile

    @property
    def ok(self) -> bool:
        return (self.psnr_db >= AGREE_PSNR_DB
                and self.worst_tile_abs_levels <= AGREE_TILE_LEVELS)


def agreement(a: Any, b: Any) -> DecodeAgreement:
    """How closely two decodes of the same image (H×W×C uint8 arrays of one shape) agree."""
    import numpy as np

    diff = np.asarray(a, dtype=np.float64) - np.asarray(b, dtype=np.float64)
    mse = float(np.mean(diff * diff))
    psnr = math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)
    per_pixel = np.abs(diff).mean(axis=2)
    h, w = (n // TILE * TILE for n in per_pixel.shape)
    tiles = per_pixel[:h, :w].reshape(h // TILE, TILE, w // TILE, TILE).mean(axis=(1, 3))
    return DecodeAgreement(psnr_db=psnr, mean_abs_levels=float(np.mean(np.abs(diff))),
                           worst_tile_abs_levels=float(tiles.max()) if tiles.size else 0.0)


def nvjpeg(jpegs: Sequence[bytes], seconds: float, device: int, batch: int = 64
           ) -> tuple[list[float], DecodeAgreement, int]:
    """GPU decode through torchvision.io.decode_jpeg(device='cuda') (nvJPEG), batches of
    `batch`. Returns (images/s per batch, how the GPU's decode of the first image agrees with
    the CPU's, images)."""
    import torch
    import torchvision.io as tvio

    data = [torch.frombuffer(bytearray(j), dtype=torch.uint8) for j in jpegs]
    dev = f"cuda:{device}"
    batches = [[data[(i + k) % len(data)] for k in range(batch)] for i in range(0, len(data),
                                                                               batch)]
    out = tvio.decode_jpeg(batches[0], device=dev)  # warm-up: nvJPEG handles, memory
    torch.cuda.synchronize(device)
    agree = agreement(out[0].cpu().permute(1, 2, 0).numpy(),  # C×H×W → H×W×C
                      tvio.decode_jpeg(batches[0][0]).permute(1, 2, 0).numpy())
    rates: list[float] = []
    end = time.perf_counter() + seconds
    images = 0
    while time.perf_counter() < end or not rates:
        for b in batches:
            t0 = time.perf_counter()
            tvio.decode_jpeg(b, device=dev)
            torch.cuda.synchronize(device)
            rates.append(len(b) / (time.perf_counter() - t0))
            images += len(b)
    return rates, agree, images
