"""`gpuaudit bench render`: what a GPU gives a renderer, headless (OpenGL through EGL).

Pixel fill (GPixel/s), bilinear and trilinear texture fill (GTexel/s), triangles (G/s), the
reference scene's frames per second at 1080p and 4K, and ray tracing on the shader cores
(Mrays/s); hardware ray tracing only where the GPU has RT cores (the spec catalog says), and
skipped with that reason elsewhere. Every figure is checked against a reference image
(fill.py, scene.py, raytrace.py say how) and set beside the theoretical rate where the spec
catalog has one (gpuaudit.specs.graphics). A software renderer (Mesa's llvmpipe) is measured
at small sizes, never judged against a GPU's spec: its figures describe the CPU."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.render import gl
from gpuaudit.bench.stats import measure, reason_of, skipped
from gpuaudit.model import Measurement, Params
from gpuaudit.specs import graphics as rates

SUITE = "render"
FIGURES = (  # name, unit: every figure the suite reports, measured or skipped
    ("pixel_fill", "GPixel/s"),
    ("texture_fill_bilinear", "GTexel/s"),
    ("texture_fill_trilinear", "GTexel/s"),
    ("triangles", "Gtriangles/s"),
    ("scene_1080p", "frames/s"),
    ("scene_4k", "frames/s"),
    ("raytrace_shader", "Mrays/s"),
    ("raytrace_rt_cores", "Mrays/s"),
)
RESOLUTIONS = {"scene_1080p": (1920, 1080), "scene_4k": (3840, 2160)}


@dataclass(frozen=True)
class Sizes:
    pixel: tuple[int, int]
    layers: int
    texture: tuple[int, int]
    triangles: tuple[int, int]
    raytrace: tuple[int, int]
    samples: int
    target_s: float


def sizes(ctx: BenchContext, software: bool) -> Sizes:
    """Work per figure: a GPU gets targets of tens of millions of pixels; a software
    renderer gets small ones (its figures are the CPU's, and checks are what matter)."""
    if software:
        return Sizes((256, 256), 8, (512, 256), (128, 64), (320, 180), 5, 0.05)
    return Sizes((4096, 4096), 16, (4096, 4096), (2048, 1024), (1920, 1080),
                 ctx.pick(5, 10, 20), ctx.pick(0.1, 0.25, 0.5))


def _skip_all(reason: str, gpu_index: int | None = None) -> Iterator[Measurement]:
    for name, unit in FIGURES:
        yield skipped(SUITE, name, unit, reason, gpu_index=gpu_index)


def run(ctx: BenchContext) -> Iterator[Measurement]:
    try:
        glctx, renderer = gl.open_context()
    except gl.NoContext as exc:
        yield from _skip_all(str(exc))
        return
    try:
        yield from _measure(ctx, glctx, renderer)
    finally:
        glctx.release()


def _where(ctx: BenchContext, renderer: gl.Renderer) -> tuple[int | None, Any, list[str]]:
    """(the GPU index the figures belong to, its spec, notes) for this renderer."""
    notes: list[str] = []
    if renderer.software:
        notes.append(f"rendered by {renderer.renderer} (software, on the CPU)"
                     + (": no GPU's EGL driver was found (NVIDIA: libEGL_nvidia)"
                        if ctx.on_gpu else ""))
        return None, None, notes
    if not ctx.devices or len(ctx.machine.gpus) != 1:
        notes.append("EGL device 0 of several GPUs: not matched to a GPU index")
        return None, None, notes
    index = ctx.devices[0][1]
    return index, ctx.spec(index), notes


def _measure(ctx: BenchContext, glctx: Any, renderer: gl.Renderer) -> Iterator[Measurement]:
    from gpuaudit.bench.render import fill, raytrace, scene

    index, spec, notes = _where(ctx, renderer)
    size = sizes(ctx, renderer.software)
    base: Params = {"renderer": renderer.label(), "api": "OpenGL (EGL, headless)"}

    def figure(name: str, unit: str, step: str, fn: Callable[[], Any],
               spec_rate: rates.Rate | None, params: Params) -> Measurement:
        ctx.step(f"render: {step}")
        p = {**base, **params}
        if spec_rate is not None:
            p["spec_basis"] = spec_rate.basis
        try:
            res = fn()
        except Exception as exc:
            return skipped(SUITE, name, unit, reason_of(exc), gpu_index=index, params=p)
        return measure(SUITE, name, unit, res.rates, warmup=1, gpu_index=index,
                       spec_value=spec_rate.value if spec_rate else None,
                       params={**p, "check": res.check}, verified=res.ok, notes=notes)

    common = {"samples": size.samples, "warmup": 1, "target_s": size.target_s}
    px = size.pixel
    yield figure("pixel_fill", "GPixel/s", f"pixel fill, {px[0]}×{px[1]} × {size.layers}",
                 lambda: fill.pixel_fill(glctx, px, size.layers, **common),
                 rates.pixel_rate(spec) if not renderer.software else None,
                 {"target": f"{px[0]}x{px[1]} RGBA8", "layers": size.layers})
    tx = size.texture
    for tri in (False, True):
        kind = "trilinear" if tri else "bilinear"
        yield figure(f"texture_fill_{kind}", "GTexel/s", f"texture fill, {kind}",
                     lambda tri=tri: fill.texture_fill(glctx, tx, trilinear=tri, **common),
                     rates.texel_rate(spec, trilinear=tri) if not renderer.software else None,
                     {"target": f"{tx[0]}x{tx[1]}", "texture": f"{fill.TEX}x{fill.TEX} RGBA8",
                      "samples_per_pixel": fill.SAMPLES_PER_PIXEL, "filter": kind})
    tr = size.triangles
    yield figure("triangles", "Gtriangles/s", f"triangles, {tr[0] * tr[1]:,} per draw",
                 lambda: fill.triangles(glctx, tr, **common),
                 rates.Rate(None, "NVIDIA publishes no triangle rate") if spec else None,
                 {"triangles_per_draw": tr[0] * tr[1], "vertex_fetch": "none (gl_VertexID)"})
    for name, res in RESOLUTIONS.items():
        if renderer.software and name != "scene_1080p":
            yield skipped(SUITE, name, "frames/s", "software renderer: one resolution only "
                          "(a 4K frame takes seconds on the CPU)", params=base)
            continue
        yield figure(name, "frames/s", f"reference scene at {res[0]}×{res[1]}",
                     lambda res=res: _scene(glctx, res, size), None, {
                         "resolution": f"{res[0]}x{res[1]}",
                         "triangles_per_frame": scene.triangles_per_frame,
                         "objects": scene.GRID * scene.GRID, "point_lights": scene.LIGHTS,
                         "shadow_map": f"{scene.SHADOW}x{scene.SHADOW}",
                         "passes": "shadow, G-buffer, deferred lighting"})
    rt = size.raytrace
    yield figure("raytrace_shader", "Mrays/s", f"ray tracing on the shader cores, "
                 f"{rt[0]}×{rt[1]}", lambda: raytrace.run(glctx, rt, **common), None,
                 {"resolution": f"{rt[0]}x{rt[1]}", "spheres": raytrace.SPHERES ** 2,
                  "rays_per_pixel": 2, "units": "compute shader"})
    has_rt, why = (False, "a software renderer on the CPU: no RT cores") if renderer.software \
        else rates.rt_core_reason(spec, renderer.renderer)
    yield skipped(SUITE, "raytrace_rt_cores", "Mrays/s",
                  ("hardware ray tracing (Vulkan ray-tracing pipelines) is not measured by "
                   f"this version; the GPU has {why}") if has_rt else why,
                  gpu_index=index, params=base)


@dataclass(frozen=True)
class _SceneResult:
    rates: list[float]
    ok: bool
    check: str


def _scene(glctx: Any, res: tuple[int, int], size: Sizes) -> _SceneResult:
    from gpuaudit.bench.render import scene
    from gpuaudit.bench.render.gl import wall_rates

    built = scene.build(glctx, res)
    try:
        fps = wall_rates(glctx, built.frame, 1.0, samples=size.samples, warmup=1,
                         target_s=size.target_s, scale=1.0)
        ok, db = scene.check_frame(built)
    finally:
        built.release()
    return _SceneResult(fps, ok, f"the frame, box-filtered to {scene.THUMB[0]}×"
                                 f"{scene.THUMB[1]}, against the reference frame: PSNR "
                                 f"{db:.1f} dB (≥ {scene.PSNR_MIN_DB:g} passes)")
