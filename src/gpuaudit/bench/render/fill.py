"""The raster pipeline's rates, each checked by reading the image back:

- pixel fill: full-screen triangles drawn one over another into an RGBA8 target (no depth,
  no blending), a flat colour per layer; pixels written per second. Check: every pixel holds
  the last layer's colour, exactly.
- texture fill: full-screen passes whose fragment shader takes K samples of a 256×256 RGBA8
  texture at fixed sub-texel offsets (bilinear: no mipmaps; trilinear: textureLod at LOD 0.5
  between levels 0 and 1 that we upload ourselves); samples per second. Check: one 256×256
  period of the output against a numpy reference of the same filtering (within 2 levels).
- triangles: one draw of W×H triangles, each covering exactly one pixel centre, positions
  made from gl_VertexID (no vertex fetch); triangles per second. Check: every pixel holds its
  triangle's id, exactly, so no triangle was lost.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

TEX = 256  # texture side: fits every texture cache, so the filtering units are the limit
SAMPLES_PER_PIXEL = 8
# Sub-texel offsets: weights of 0, 1/4, 1/2, 3/4 are exact in the filtering units' fixed
# point, so any correct GPU lands within rounding of the numpy reference.
OFFSETS = ((0.0, 0.0), (0.25, 0.5), (0.5, 0.25), (0.75, 0.75), (1.25, 0.0), (0.0, 1.5),
           (2.5, 2.25), (3.75, 1.25))
TOLERANCE_LEVELS = 2

FULLSCREEN_VS = """
#version 330
flat out int layer;
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) * 4 - 1), float((gl_VertexID >> 1) * 4 - 1));
    gl_Position = vec4(p, 0.0, 1.0);
    layer = gl_InstanceID;
}
"""

FLAT_FS = """
#version 330
flat in int layer;
out vec4 color;
void main() {
    color = vec4(float((layer * 37) % 256), float((layer * 91 + 7) % 256),
                 float((layer * 13 + 200) % 256), 255.0) / 255.0;
}
"""

TEXTURE_FS = """
#version 330
uniform sampler2D tex;
uniform float lod;
uniform vec2 offsets[%(k)d];
out vec4 color;
void main() {
    vec4 acc = vec4(0.0);
    for (int i = 0; i < %(k)d; i++)
        acc += textureLod(tex, (gl_FragCoord.xy + offsets[i]) / %(tex)d.0, lod);
    color = acc / %(k)d.0;
}
"""

TRIANGLES_VS = """
#version 330
uniform int width;
flat out int tri;
void main() {
    int t = gl_VertexID / 3;
    int corner = gl_VertexID - 3 * t;
    vec2 at = corner == 0 ? vec2(0.2, 0.2) : corner == 1 ? vec2(0.9, 0.3) : vec2(0.3, 0.9);
    vec2 pixel = vec2(float(t %% width), float(t / width)) + at;
    gl_Position = vec4(pixel / vec2(width, %(height)d) * 2.0 - 1.0, 0.0, 1.0);
    tri = t;
}
"""

TRIANGLES_FS = """
#version 330
flat in int tri;
out vec4 color;
void main() {
    color = vec4(float(tri & 255), float((tri >> 8) & 255), float((tri >> 16) & 255),
                 255.0) / 255.0;
}
"""


@dataclass(frozen=True)
class Result:
    rates: list[float]
    ok: bool
    check: str  # what was checked, and how far off the worst pixel was


def layer_color(layer: int) -> tuple[int, int, int, int]:
    return ((layer * 37) % 256, (layer * 91 + 7) % 256, (layer * 13 + 200) % 256, 255)


def pixel_fill(ctx: Any, size: tuple[int, int], layers: int, *, samples: int, warmup: int,
               target_s: float) -> Result:
    import numpy as np

    from gpuaudit.bench.render.gl import read_rgba, wall_rates

    prog = ctx.program(vertex_shader=FULLSCREEN_VS, fragment_shader=FLAT_FS)
    vao = ctx.vertex_array(prog, [])
    fbo = ctx.framebuffer(color_attachments=[ctx.texture(size, 4)])
    fbo.use()
    ctx.disable(ctx.DEPTH_TEST | ctx.BLEND | ctx.CULL_FACE)

    def draw() -> None:
        vao.render(ctx.TRIANGLES, vertices=3, instances=layers)

    rates = wall_rates(ctx, draw, size[0] * size[1] * layers, samples=samples, warmup=warmup,
                       target_s=target_s)
    image = read_rgba(fbo, size)
    want = np.array(layer_color(layers - 1), dtype=np.uint8)
    wrong = int(np.count_nonzero(np.any(image != want, axis=-1)))
    for obj in (vao, prog, fbo):
        obj.release()
    return Result(rates, wrong == 0,
                  f"every pixel holds the last layer's colour: {wrong} of "
                  f"{size[0] * size[1]} differ")


def mip_levels(base: Any) -> list[Any]:
    """Level 0 and level 1 (a 2×2 box filter, rounded), uploaded by us so that every GPU
    filters the same texels."""
    import numpy as np

    b = base.astype(np.uint32)
    half = (b[0::2, 0::2] + b[1::2, 0::2] + b[0::2, 1::2] + b[1::2, 1::2] + 2) // 4
    return [base, half.astype(np.uint8)]


def test_texture() -> Any:
    """A deterministic RGBA8 pattern with detail at every scale (no flat areas that would
    hide a wrong offset)."""
    import numpy as np

    y, x = np.mgrid[0:TEX, 0:TEX].astype(np.uint32)
    r = (x * 7 + y * 3) % 256
    g = ((x ^ y) * 5) % 256
    b = ((x * y) >> 4) % 256
    a = 255 - (x + y) % 64
    return np.stack([r, g, b, a], axis=-1).astype(np.uint8)


def bilinear(level: Any, u: Any, v: Any) -> Any:
    """OpenGL's bilinear filter with GL_REPEAT at texel-space coordinates (u, v) of `level`
    (texel centres at i + 0.5), float64."""
    import numpy as np

    n = level.shape[0]
    fu, fv = u - 0.5, v - 0.5
    i0, j0 = np.floor(fu).astype(np.int64), np.floor(fv).astype(np.int64)
    a, b = (fu - i0)[..., None], (fv - j0)[..., None]
    lv = level.astype(np.float64)

    def at(i: Any, j: Any) -> Any:
        return lv[j % n, i % n]

    return ((1 - a) * (1 - b) * at(i0, j0) + a * (1 - b) * at(i0 + 1, j0)
            + (1 - a) * b * at(i0, j0 + 1) + a * b * at(i0 + 1, j0 + 1))


def texture_reference(levels: list[Any], lod: float) -> Any:
    """The expected 256×256 period of the texture test's output (uint8 levels, float64)."""
    import numpy as np

    y, x = np.mgrid[0:TEX, 0:TEX].astype(np.float64)
    acc = np.zeros((TEX, TEX, 4))
    for du, dv in OFFSETS[:SAMPLES_PER_PIXEL]:
        u, v = x + 0.5 + du, y + 0.5 + dv
        if lod == 0.0:
            acc += bilinear(levels[0], u, v)
        else:  # LOD 0.5: half of each level; level 1 has half the texels per pixel
            acc += 0.5 * bilinear(levels[0], u, v) + 0.5 * bilinear(levels[1], u / 2, v / 2)
    return acc / SAMPLES_PER_PIXEL


def texture_fill(ctx: Any, size: tuple[int, int], *, trilinear: bool, samples: int,
                 warmup: int, target_s: float) -> Result:
    import numpy as np

    from gpuaudit.bench.render.gl import read_rgba, wall_rates

    if size[0] % TEX or size[1] % TEX:
        raise ValueError(f"texture fill: target {size} is not a multiple of {TEX}")
    k = SAMPLES_PER_PIXEL
    prog = ctx.program(vertex_shader=FULLSCREEN_VS,
                       fragment_shader=TEXTURE_FS % {"k": k, "tex": TEX})
    levels = mip_levels(test_texture())
    tex = ctx.texture((TEX, TEX), 4, levels[0].tobytes(), alignment=1)
    if trilinear:
        # Levels 0 and 1 only (GL_TEXTURE_MAX_LEVEL 1 keeps the texture complete): the driver
        # allocates level 1, then it gets our box-filtered texels, not the driver's own.
        tex.build_mipmaps(base=0, max_level=1)
        tex.write(levels[1].tobytes(), viewport=(TEX // 2, TEX // 2), level=1, alignment=1)
        tex.filter = (ctx.LINEAR_MIPMAP_LINEAR, ctx.LINEAR)
    else:
        tex.filter = (ctx.LINEAR, ctx.LINEAR)
    tex.repeat_x = tex.repeat_y = True
    tex.use(0)
    prog["tex"] = 0
    prog["lod"] = 0.5 if trilinear else 0.0
    prog["offsets"].write(np.array(OFFSETS[:k], dtype=np.float32).tobytes())
    vao = ctx.vertex_array(prog, [])
    fbo = ctx.framebuffer(color_attachments=[ctx.texture(size, 4)])
    fbo.use()
    ctx.disable(ctx.DEPTH_TEST | ctx.BLEND | ctx.CULL_FACE)

    def draw() -> None:
        vao.render(ctx.TRIANGLES, vertices=3)

    rates = wall_rates(ctx, draw, size[0] * size[1] * k, samples=samples, warmup=warmup,
                       target_s=target_s)
    image = read_rgba(fbo, size).astype(np.float64)
    ref = texture_reference(levels, 0.5 if trilinear else 0.0)
    # The output repeats with the texture's period: compare every tile with the reference.
    tiles = image.reshape(size[1] // TEX, TEX, size[0] // TEX, TEX, 4)
    worst = float(np.max(np.abs(tiles - ref[None, :, None, :, :])))
    for obj in (vao, prog, fbo, tex):
        obj.release()
    return Result(rates, worst <= TOLERANCE_LEVELS,
                  f"{'trilinear' if trilinear else 'bilinear'} output against a numpy "
                  f"reference of the same filtering: worst channel {worst:.2f} levels off "
                  f"(≤ {TOLERANCE_LEVELS} passes)")


def triangles(ctx: Any, size: tuple[int, int], *, samples: int, warmup: int,
              target_s: float) -> Result:
    import numpy as np

    from gpuaudit.bench.render.gl import read_rgba, wall_rates

    width, height = size
    prog = ctx.program(vertex_shader=TRIANGLES_VS % {"height": height},
                       fragment_shader=TRIANGLES_FS)
    prog["width"] = width
    vao = ctx.vertex_array(prog, [])
    fbo = ctx.framebuffer(color_attachments=[ctx.texture(size, 4)])
    fbo.use()
    fbo.clear(0.0, 0.0, 0.0, 0.0)
    ctx.disable(ctx.DEPTH_TEST | ctx.BLEND | ctx.CULL_FACE)
    count = width * height

    def draw() -> None:
        vao.render(ctx.TRIANGLES, vertices=3 * count)

    rates = wall_rates(ctx, draw, count, samples=samples, warmup=warmup, target_s=target_s)
    image = read_rgba(fbo, size).astype(np.int64)
    ids = np.arange(count, dtype=np.int64).reshape(height, width)
    want = np.stack([ids & 255, (ids >> 8) & 255, (ids >> 16) & 255,
                     np.full_like(ids, 255)], axis=-1)
    wrong = int(np.count_nonzero(np.any(image != want, axis=-1)))
    for obj in (vao, prog, fbo):
        obj.release()
    return Result(rates, wrong == 0,
                  f"every pixel holds its own triangle's id: {wrong} of {count} differ")
