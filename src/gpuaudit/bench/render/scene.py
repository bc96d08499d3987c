"""The reference scene: what a renderer's frame does, at a fixed size of work.

576 textured spheres (1,024 triangles each) on a textured ground, a directional light with a
2048² shadow map (4-tap hardware PCF), 16 coloured point lights. Each frame is three passes:
the shadow map (depth only), a G-buffer (albedo RGBA8, normal RGBA16F, position RGBA32F,
depth) and a full-screen deferred lighting pass into an RGBA8 image. Frames per second at the
asked resolution, timed over whole frames with glFinish.

Verified against a reference frame: the rendered image, box-filtered down to 480×270, must
match `data/scene_reference.png` (made the same way from a 1920×1080 frame on Mesa's
llvmpipe) to within PSNR_MIN_DB. GPUs differ from it in rounding and in the edges of
triangles and shadows, never in what is drawn: a missing texture, pass or light costs far
more than the margin (the tests plant such faults)."""

from __future__ import annotations

import math
from dataclasses import dataclass
from importlib import resources
from typing import Any

GRID = 24  # spheres per side
RINGS, SEGMENTS = 16, 32
LAYERS = 8  # texture array layers (the last one is the ground's)
TEX = 256
SHADOW = 2048
LIGHTS = 16
THUMB = (480, 270)
PSNR_MIN_DB = 28.0
REFERENCE = "scene_reference.png"

GEOMETRY_VS = """
#version 330
uniform mat4 view_proj;
in vec3 in_pos; in vec3 in_normal; in vec2 in_uv;
in vec3 inst_offset; in float inst_scale; in float inst_layer;
out vec3 v_pos; out vec3 v_normal; out vec2 v_uv; flat out float v_layer;
void main() {
    vec3 world = in_pos * inst_scale + inst_offset;
    v_pos = world; v_normal = in_normal; v_uv = in_uv; v_layer = inst_layer;
    gl_Position = view_proj * vec4(world, 1.0);
}
"""

GBUFFER_FS = """
#version 330
uniform sampler2DArray albedo_tex;
in vec3 v_pos; in vec3 v_normal; in vec2 v_uv; flat in float v_layer;
layout(location = 0) out vec4 albedo;
layout(location = 1) out vec4 normal;
layout(location = 2) out vec4 position;
void main() {
    albedo = texture(albedo_tex, vec3(v_uv, v_layer));
    normal = vec4(normalize(v_normal), 0.0);
    position = vec4(v_pos, 1.0);
}
"""

DEPTH_FS = """
#version 330
void main() {}
"""

LIGHTING_VS = """
#version 330
void main() {
    vec2 p = vec2(float((gl_VertexID & 1) * 4 - 1), float((gl_VertexID >> 1) * 4 - 1));
    gl_Position = vec4(p, 0.0, 1.0);
}
"""

LIGHTING_FS = """
#version 330
uniform sampler2D g_albedo; uniform sampler2D g_normal; uniform sampler2D g_position;
uniform sampler2DShadow shadow_map;
uniform mat4 light_view_proj;
uniform vec3 sun_dir; uniform vec3 eye;
uniform vec3 light_pos[%(lights)d]; uniform vec3 light_color[%(lights)d];
uniform float shadow_texel;
out vec4 color;
void main() {
    ivec2 at = ivec2(gl_FragCoord.xy);
    vec4 p = texelFetch(g_position, at, 0);
    if (p.w == 0.0) { color = vec4(0.35, 0.45, 0.6, 1.0); return; }
    vec3 albedo = texelFetch(g_albedo, at, 0).rgb;
    vec3 n = normalize(texelFetch(g_normal, at, 0).xyz);
    vec3 v = normalize(eye - p.xyz);
    vec4 ls = light_view_proj * vec4(p.xyz + n * 0.05, 1.0);
    vec3 s = ls.xyz / ls.w * 0.5 + 0.5;
    float lit = 0.0;
    for (int i = 0; i < 4; i++) {
        vec2 o = vec2(float(i & 1) - 0.5, float(i >> 1) - 0.5) * shadow_texel;
        lit += texture(shadow_map, vec3(s.xy + o, s.z - 0.002));
    }
    lit *= 0.25;
    if (any(lessThan(s.xy, vec2(0.0))) || any(greaterThan(s.xy, vec2(1.0)))) lit = 1.0;
    vec3 l = -sun_dir;
    vec3 h = normalize(l + v);
    vec3 c = albedo * (0.15 + 0.8 * lit * max(dot(n, l), 0.0))
             + 0.25 * lit * pow(max(dot(n, h), 0.0), 32.0);
    for (int i = 0; i < %(lights)d; i++) {
        vec3 d = light_pos[i] - p.xyz;
        float dist2 = dot(d, d);
        vec3 ld = d * inversesqrt(dist2);
        float att = 1.0 / (1.0 + 0.08 * dist2);
        vec3 hp = normalize(ld + v);
        c += light_color[i] * att * (albedo * max(dot(n, ld), 0.0)
                                     + 0.3 * pow(max(dot(n, hp), 0.0), 32.0));
    }
    color = vec4(min(c, vec3(1.0)), 1.0);
}
"""


def _np() -> Any:
    import numpy as np

    return np


def sphere_mesh() -> tuple[Any, Any]:
    """Unit sphere: interleaved (pos, normal, uv) float32 vertices and uint32 indices."""
    np = _np()
    rows = []
    for r in range(RINGS + 1):
        theta = math.pi * r / RINGS
        for s in range(SEGMENTS + 1):
            phi = 2 * math.pi * s / SEGMENTS
            p = (math.sin(theta) * math.cos(phi), math.cos(theta), math.sin(theta) * math.sin(phi))
            rows.append((*p, *p, 2.0 * s / SEGMENTS, 1.0 * r / RINGS))
    idx = []
    for r in range(RINGS):
        for s in range(SEGMENTS):
            a = r * (SEGMENTS + 1) + s
            b = a + SEGMENTS + 1
            idx += [a, a + 1, b, a + 1, b + 1, b]  # counter-clockwise from outside
    return np.array(rows, dtype=np.float32), np.array(idx, dtype=np.uint32)


def ground_mesh() -> Any:
    np = _np()
    e, rep = 40.0, 16.0
    corners = [(-e, -e, 0, 0), (e, e, rep, rep), (e, -e, rep, 0), (-e, -e, 0, 0),
               (-e, e, 0, rep), (e, e, rep, rep)]  # counter-clockwise from above
    return np.array([(x, 0.0, z, 0.0, 1.0, 0.0, u, v) for x, z, u, v in corners],
                    dtype=np.float32)


def instances() -> Any:
    """(offset xyz, scale, layer) per sphere, from integer arithmetic only (the same on every
    machine)."""
    np = _np()
    rows = []
    for i in range(GRID):
        for j in range(GRID):
            r = 0.6 + ((i * 7 + j * 13) % 5) / 10
            rows.append(((i - (GRID - 1) / 2) * 2.5, r, (j - (GRID - 1) / 2) * 2.5, r,
                         (i * 3 + j * 5) % (LAYERS - 1)))
    return np.array(rows, dtype=np.float32)


def albedo_layers() -> Any:
    """LAYERS procedural RGBA8 textures (checkers and stripes of distinct colours)."""
    np = _np()
    y, x = np.mgrid[0:TEX, 0:TEX]
    out = []
    for k in range(LAYERS):
        base = np.array([(k * 97) % 200 + 40, (k * 57 + 80) % 200 + 40, (k * 31 + 150) % 200 + 40])
        check = ((x // (8 + 4 * (k % 4))) + (y // (8 + 4 * (k % 4)))) % 2
        stripe = (x + y * (k % 3)) // 16 % 2
        shade = np.where(check == 1, 1.0, 0.55) * np.where(stripe == 1, 1.0, 0.85)
        rgb = (base[None, None, :] * shade[..., None]).clip(0, 255)
        out.append(np.concatenate([rgb, np.full((TEX, TEX, 1), 255)], axis=-1))
    return np.stack(out).astype(np.uint8)


def look_at(eye: Any, target: Any, up: Any) -> Any:
    np = _np()
    f = target - eye
    f = f / np.linalg.norm(f)
    s = np.cross(f, up)
    s = s / np.linalg.norm(s)
    u = np.cross(s, f)
    m = np.identity(4)
    m[0, :3], m[1, :3], m[2, :3] = s, u, -f
    m[:3, 3] = -m[:3, :3] @ eye
    return m


def perspective(fov_y_deg: float, aspect: float, near: float, far: float) -> Any:
    np = _np()
    f = 1 / math.tan(math.radians(fov_y_deg) / 2)
    m = np.zeros((4, 4))
    m[0, 0], m[1, 1] = f / aspect, f
    m[2, 2], m[2, 3] = (far + near) / (near - far), 2 * far * near / (near - far)
    m[3, 2] = -1
    return m


def ortho(half: float, near: float, far: float) -> Any:
    np = _np()
    m = np.identity(4)
    m[0, 0] = m[1, 1] = 1 / half
    m[2, 2], m[2, 3] = -2 / (far - near), -(far + near) / (far - near)
    return m


def _mat(m: Any) -> bytes:
    return bytes(m.T.astype("f4").tobytes())  # GLSL reads matrices column by column


@dataclass
class Scene:
    """The GL objects of one resolution's scene; `frame()` draws one frame."""

    ctx: Any
    size: tuple[int, int]
    objects: list[Any]
    frame_passes: Any
    out: Any

    def frame(self) -> None:
        self.frame_passes()

    def release(self) -> None:
        for obj in self.objects:
            obj.release()


def build(ctx: Any, size: tuple[int, int], *, shadows: bool = True, lights: bool = True,
          textures: bool = True) -> Scene:
    """The scene at `size`. The keyword switches exist to plant faults in tests."""
    np = _np()
    width, height = size
    eye = np.array([0.0, 22.0, 38.0])
    view_proj = perspective(50.0, width / height, 0.5, 200.0) @ look_at(
        eye, np.array([0.0, 0.0, 2.0]), np.array([0.0, 1.0, 0.0]))
    sun = np.array([-0.45, -0.8, -0.35])
    sun = sun / np.linalg.norm(sun)
    light_vp = ortho(60.0, 1.0, 140.0) @ look_at(-sun * 60.0, np.zeros(3),
                                                np.array([0.0, 1.0, 0.0]))

    geo = ctx.program(vertex_shader=GEOMETRY_VS, fragment_shader=GBUFFER_FS)
    depth_prog = ctx.program(vertex_shader=GEOMETRY_VS, fragment_shader=DEPTH_FS)
    light_prog = ctx.program(vertex_shader=LIGHTING_VS,
                             fragment_shader=LIGHTING_FS % {"lights": LIGHTS})
    verts, idx = sphere_mesh()
    vbo, ibo = ctx.buffer(verts.tobytes()), ctx.buffer(idx.tobytes())
    inst = ctx.buffer(instances().tobytes())
    gvbo = ctx.buffer(ground_mesh().tobytes())
    ginst = ctx.buffer(np.array([[0, 0, 0, 1, LAYERS - 1]], dtype=np.float32).tobytes())
    layout = [(vbo, "3f 3f 2f", "in_pos", "in_normal", "in_uv"),
              (inst, "3f 1f 1f/i", "inst_offset", "inst_scale", "inst_layer")]
    glayout = [(gvbo, "3f 3f 2f", "in_pos", "in_normal", "in_uv"),
               (ginst, "3f 1f 1f/i", "inst_offset", "inst_scale", "inst_layer")]
    vaos = {(prog, name): ctx.vertex_array(prog, lay, index_buffer=ib, skip_errors=True)
            for prog in (geo, depth_prog)
            for name, lay, ib in (("spheres", layout, ibo), ("ground", glayout, None))}
    # skip_errors: the depth pass never reads in_normal or in_uv, and the linker drops them.

    layers = albedo_layers()
    if not textures:
        layers[:] = 128
    albedo = ctx.texture_array((TEX, TEX, LAYERS), 4, layers.tobytes(), alignment=1)
    albedo.build_mipmaps()
    albedo.repeat_x = albedo.repeat_y = True
    shadow_tex = ctx.depth_texture((SHADOW, SHADOW))
    shadow_tex.compare_func = "<="
    shadow_tex.filter = (ctx.LINEAR, ctx.LINEAR)
    shadow_fbo = ctx.framebuffer(depth_attachment=shadow_tex)
    g_tex = [ctx.texture(size, 4), ctx.texture(size, 4, dtype="f2"),
             ctx.texture(size, 4, dtype="f4")]
    for t in g_tex:
        t.filter = (ctx.NEAREST, ctx.NEAREST)
    g_depth = ctx.depth_renderbuffer(size)
    gbuf = ctx.framebuffer(color_attachments=g_tex, depth_attachment=g_depth)
    out_tex = ctx.texture(size, 4)
    out = ctx.framebuffer(color_attachments=[out_tex])
    light_vao = ctx.vertex_array(light_prog, [])

    geo["view_proj"].write(_mat(view_proj))
    geo["albedo_tex"] = 0
    depth_prog["view_proj"].write(_mat(light_vp))
    for i, name in enumerate(("g_albedo", "g_normal", "g_position", "shadow_map"), start=1):
        light_prog[name] = i
    light_prog["light_view_proj"].write(_mat(light_vp))
    light_prog["sun_dir"].write(sun.astype("f4").tobytes())
    light_prog["eye"].write(eye.astype("f4").tobytes())
    light_prog["shadow_texel"] = 1.0 / SHADOW
    pos, col = point_lights()
    if not lights:
        col[:] = 0.0
    light_prog["light_pos"].write(pos.tobytes())
    light_prog["light_color"].write(col.tobytes())
    count = GRID * GRID

    def passes() -> None:
        ctx.enable(ctx.DEPTH_TEST | ctx.CULL_FACE)
        shadow_fbo.use()
        shadow_fbo.clear(depth=1.0)
        if shadows:
            vaos[(depth_prog, "spheres")].render(ctx.TRIANGLES, instances=count)
            vaos[(depth_prog, "ground")].render(ctx.TRIANGLES)
        gbuf.use()
        gbuf.clear(0.0, 0.0, 0.0, 0.0, depth=1.0)
        albedo.use(0)
        vaos[(geo, "spheres")].render(ctx.TRIANGLES, instances=count)
        vaos[(geo, "ground")].render(ctx.TRIANGLES)
        ctx.disable(ctx.DEPTH_TEST | ctx.CULL_FACE)
        out.use()
        for i, t in enumerate(g_tex, start=1):
            t.use(i)
        shadow_tex.use(len(g_tex) + 1)
        light_vao.render(ctx.TRIANGLES, vertices=3)

    objects = [*vaos.values(), light_vao, geo, depth_prog, light_prog, vbo, ibo, inst, gvbo,
               ginst, albedo, shadow_fbo, shadow_tex, gbuf, *g_tex, g_depth, out, out_tex]
    return Scene(ctx, size, objects, passes, out)


def point_lights() -> tuple[Any, Any]:
    np = _np()
    pos, col = [], []
    for i in range(LIGHTS):
        a = 2 * math.pi * i / LIGHTS
        ring = 8 + 6 * (i % 3)
        pos.append((math.cos(a) * ring, 2.5 + (i % 4), math.sin(a) * ring))
        col.append((0.6 + 0.4 * ((i * 5) % 3) / 2, 0.6 + 0.4 * ((i * 7) % 4) / 3,
                    0.6 + 0.4 * ((i * 11) % 5) / 4))
    return np.array(pos, dtype=np.float32), np.array(col, dtype=np.float32)


triangles_per_frame = 2 * (GRID * GRID * 2 * RINGS * SEGMENTS + 2)  # shadow + G-buffer passes


def thumbnail(image: Any) -> Any:
    """Box filter an (h, w, 4) frame down to THUMB (w and h multiples of it), float64 RGB."""
    h, w = image.shape[:2]
    fx, fy = w // THUMB[0], h // THUMB[1]
    if fx * THUMB[0] != w or fy * THUMB[1] != h:
        raise ValueError(f"frame {w}×{h} is not a multiple of {THUMB[0]}×{THUMB[1]}")
    rgb = image[..., :3].astype("f8")
    return rgb.reshape(THUMB[1], fy, THUMB[0], fx, 3).mean(axis=(1, 3))


def psnr_db(a: Any, b: Any) -> float:
    np = _np()
    mse = float(np.mean((a - b) ** 2))
    return math.inf if mse == 0 else 10 * math.log10(255.0 ** 2 / mse)


def reference_thumbnail() -> Any:
    """The stored reference frame, (270, 480, 3) float64, row 0 at the bottom as GL reads."""
    import io

    np = _np()
    from PIL import Image

    data = resources.files("gpuaudit.bench.render").joinpath(f"data/{REFERENCE}").read_bytes()
    img = np.asarray(Image.open(io.BytesIO(data)).convert("RGB"), dtype=np.float64)
    return img[::-1]  # PNG rows run top-down


def check_frame(scene: Scene) -> tuple[bool, float]:
    """(matches the reference, PSNR in dB) of the frame last drawn."""
    from gpuaudit.bench.render.gl import read_rgba

    got = thumbnail(read_rgba(scene.out, scene.size))
    db = psnr_db(got, reference_thumbnail())
    return db >= PSNR_MIN_DB, db
