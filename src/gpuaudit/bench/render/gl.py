"""Headless OpenGL through EGL (moderngl, backend 'egl'): the context, what renders it, and
timing. No display, no window: every test draws into framebuffers of its own.

moderngl and numpy are imported inside the functions: a machine without them gets a skipped
figure with the reason, not an import error."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# Software rasterisers: a figure they produce describes the CPU, never the GPU.
SOFTWARE = ("llvmpipe", "softpipe", "swiftshader", "lavapipe", "software rasterizer")
GL_VERSION = 430  # compute shaders (the ray-tracing test) need OpenGL 4.3


@dataclass(frozen=True)
class Renderer:
    vendor: str
    renderer: str
    version: str

    @property
    def software(self) -> bool:
        return any(s in self.renderer.lower() for s in SOFTWARE)

    @property
    def nvidia(self) -> bool:
        return "nvidia" in self.vendor.lower()

    def label(self) -> str:
        return f"{self.renderer} ({self.version})"


class NoContext(RuntimeError):
    """No OpenGL context could be made; the message is the one-line reason."""


def why_no_moderngl() -> str | None:
    try:
        import moderngl  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as exc:
        return f"{exc.name} not installed (pip install 'gpuaudit[render]')"
    return None


def open_context(device_index: int = 0) -> tuple[Any, Renderer]:
    """A standalone EGL context (OpenGL 4.3 core or newer) on EGL device `device_index`.
    Raises NoContext with the reason when EGL or a vendor library is missing."""
    why = why_no_moderngl()
    if why:
        raise NoContext(why)
    import moderngl

    try:
        ctx = moderngl.create_context(standalone=True, backend="egl", require=GL_VERSION,
                                      device_index=device_index)
    except Exception as exc:  # glcontext raises bare Exceptions with the EGL error text
        text = " ".join(str(exc).split()) or type(exc).__name__
        hint = ("; headless OpenGL needs libEGL (libegl1) and a vendor library: NVIDIA's "
                "driver (libEGL_nvidia) on a GPU, Mesa (libegl-mesa0) for software")
        raise NoContext(f"no EGL context: {text[:200]}{hint}") from None
    info = ctx.info
    return ctx, Renderer(vendor=str(info.get("GL_VENDOR", "")),
                         renderer=str(info.get("GL_RENDERER", "")),
                         version=str(info.get("GL_VERSION", "")))


def wall_rates(ctx: Any, draw: Callable[[], None], work: float, *, samples: int,
               warmup: int, target_s: float, scale: float = 1e9) -> list[float]:
    """`work` (pixels, texels, triangles, frames) per second of each sample, ÷ `scale`.

    A sample repeats `draw` until it has run about `target_s` (so a fast GPU is not timed on
    a few microseconds of work) and ends with glFinish: the time is the GPU's, start to end,
    as a wall clock sees it. The warm-up runs first and sizes the repeats."""
    ctx.finish()
    t0 = time.perf_counter()
    for _ in range(max(1, warmup)):
        draw()
    ctx.finish()
    one = max((time.perf_counter() - t0) / max(1, warmup), 1e-6)
    reps = max(1, round(target_s / one))
    rates = []
    for _ in range(samples):
        t0 = time.perf_counter()
        for _ in range(reps):
            draw()
        ctx.finish()
        elapsed = time.perf_counter() - t0
        rates.append(work * reps / elapsed / scale)
    return rates


def read_rgba(fbo: Any, size: tuple[int, int]) -> Any:
    """The framebuffer's first colour attachment as a (height, width, 4) uint8 array, row 0 at
    the bottom as OpenGL stores it."""
    import numpy as np

    data = fbo.read(viewport=(0, 0, *size), components=4, alignment=1)
    return np.frombuffer(data, dtype=np.uint8).reshape(size[1], size[0], 4)
