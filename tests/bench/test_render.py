"""`bench render`: the theoretical rates from the spec catalog (exact), every figure's check
on a real OpenGL renderer (Mesa's llvmpipe through EGL here; faults planted to show each check
fails), the suite's skipped-with-reason paths, and glmark2 run and read as a user runs it."""

from __future__ import annotations

import os
import shutil
from datetime import datetime, timezone

import pytest

from gpuaudit.bench.context import BenchContext, Profile
from gpuaudit.model import Host, Machine
from gpuaudit.specs import load_catalog
from gpuaudit.specs.graphics import graphics_share, pixel_rate, rt_core_reason, texel_rate

CATALOG = load_catalog()
H200, RTX4090, L40S = CATALOG.get("h200-sxm"), CATALOG.get("rtx-4090"), CATALOG.get("l40s")
CI = os.environ.get("CI") == "true"


# --- the spec catalog's rates ------------------------------------------------------------------


def test_pixel_and_texel_rates_are_units_times_the_boost_clock():
    assert pixel_rate(RTX4090).value == pytest.approx(176 * 2520 / 1e3)
    assert texel_rate(RTX4090).value == pytest.approx(512 * 2520 / 1e3)
    assert texel_rate(RTX4090, trilinear=True).value == pytest.approx(512 * 2520 / 2e3)
    assert "176 ROPs" in pixel_rate(RTX4090).basis and "2520 MHz" in pixel_rate(RTX4090).basis


def test_an_h200_textures_with_the_4_of_132_sms_that_run_graphics():
    share, why = graphics_share(H200)
    assert share == pytest.approx(4 / 132) and "2 TPCs (4 of 132 SMs)" in why
    assert texel_rate(H200).value == pytest.approx(528 * 4 / 132 * 1980 / 1e3)  # 31.68
    assert H200.source_of("graphics_tpcs").id == "nvidia-hopper-whitepaper"


def test_missing_figures_are_reasons_not_numbers():
    assert pixel_rate(H200).value is None
    assert "publishes no ROP count" in pixel_rate(H200).basis
    assert texel_rate(L40S).value is None and "no texture unit count" in texel_rate(L40S).basis
    assert pixel_rate(None).basis == "GPU not in the spec catalog"


def test_rt_cores_from_the_catalog():
    has, why = rt_core_reason(H200, "NVIDIA H200")
    assert not has and "has no RT cores" in why and "Hopper" in why
    assert rt_core_reason(RTX4090, "x") == (True, "128 RT cores (NVIDIA Ada GPU Architecture "
                                                  "whitepaper, Appendix A)")
    assert rt_core_reason(CATALOG.get("t4"), "T4")[0] is False
    assert "unknown" in rt_core_reason(None, "Some GPU")[1]


# --- the checks, on a real renderer ------------------------------------------------------------


@pytest.fixture(scope="module")
def glctx():
    from gpuaudit.bench.render import gl

    try:
        ctx, _ = gl.open_context()
    except gl.NoContext as exc:
        if CI:
            pytest.fail(f"CI has no headless OpenGL: {exc}")
        pytest.skip(str(exc))
    yield ctx
    ctx.release()


FAST = {"samples": 2, "warmup": 1, "target_s": 0.01}


def test_pixel_fill_checks_every_pixel(glctx, monkeypatch):
    from gpuaudit.bench.render import fill

    res = fill.pixel_fill(glctx, (128, 64), 4, **FAST)
    assert res.ok and "0 of 8192 differ" in res.check and all(r > 0 for r in res.rates)
    monkeypatch.setattr(fill, "FLAT_FS", fill.FLAT_FS.replace("layer * 37", "layer * 38"))
    bad = fill.pixel_fill(glctx, (128, 64), 4, **FAST)
    assert not bad.ok and "8192 of 8192 differ" in bad.check


@pytest.mark.parametrize("trilinear", [False, True])
def test_texture_fill_matches_numpy_filtering(glctx, monkeypatch, trilinear):
    from gpuaudit.bench.render import fill

    res = fill.texture_fill(glctx, (256, 256), trilinear=trilinear, **FAST)
    assert res.ok, res.check
    # the wrong filter in the reference (LOD 0.5 vs 0) is far outside the 2-level tolerance
    real = fill.texture_reference
    monkeypatch.setattr(fill, "texture_reference",
                        lambda levels, lod: real(levels, 0.0 if lod else 0.5))
    assert not fill.texture_fill(glctx, (256, 256), trilinear=trilinear, **FAST).ok


def test_triangles_every_one_drawn(glctx, monkeypatch):
    from gpuaudit.bench.render import fill

    res = fill.triangles(glctx, (64, 32), **FAST)
    assert res.ok and "0 of 2048 differ" in res.check
    monkeypatch.setattr(fill, "TRIANGLES_VS",
                        fill.TRIANGLES_VS.replace("+ at;", "+ at + vec2(1.0, 0.0);"))
    assert not fill.triangles(glctx, (64, 32), **FAST).ok


def test_the_scene_matches_its_reference_frame_and_faults_do_not(glctx):
    from gpuaudit.bench.render import scene

    built = scene.build(glctx, (960, 540))
    built.frame()
    ok, db = scene.check_frame(built)
    built.release()
    assert ok and db >= scene.PSNR_MIN_DB
    for fault in ({"shadows": False}, {"lights": False}, {"textures": False}):
        broken = scene.build(glctx, (960, 540), **fault)
        broken.frame()
        ok, db = scene.check_frame(broken)
        broken.release()
        assert not ok and db < scene.PSNR_MIN_DB - 4, fault


def test_the_frame_size_must_be_a_multiple_of_the_thumbnail():
    import numpy as np

    from gpuaudit.bench.render import scene

    with pytest.raises(ValueError, match="not a multiple"):
        scene.thumbnail(np.zeros((100, 100, 4), dtype=np.uint8))


def test_ray_tracing_matches_a_float64_trace(glctx, monkeypatch):
    from gpuaudit.bench.render import raytrace

    res = raytrace.run(glctx, (160, 90), **FAST)
    assert res.ok, res.check
    monkeypatch.setattr(raytrace, "SHADER", raytrace.SHADER.replace("0.2 + 0.8", "0.3 + 0.7"))
    assert not raytrace.run(glctx, (160, 90), **FAST).ok


# --- the suite ------------------------------------------------------------------------------------


def _ctx():
    machine = Machine(captured_at=datetime(2026, 12, 1, tzinfo=timezone.utc),
                      host=Host(hostname="h", python_version="3.11"))
    return BenchContext(machine=machine, devices=(), profile=Profile.QUICK)


def test_without_egl_every_figure_is_skipped_with_the_reason(monkeypatch):
    from gpuaudit.bench.render import gl, suite

    def no_egl(device_index=0):
        raise gl.NoContext("no EGL context: EGL_NOT_INITIALIZED")

    monkeypatch.setattr(gl, "open_context", no_egl)
    ms = list(suite.run(_ctx()))
    assert [m.name for m in ms] == [n for n, _ in suite.FIGURES]
    assert all(m.value is None and m.skipped_reason.startswith("no EGL") for m in ms)


def test_moderngl_missing_is_a_reason(monkeypatch):
    import sys

    from gpuaudit.bench.render import gl

    monkeypatch.setitem(sys.modules, "moderngl", None)
    assert gl.why_no_moderngl() == "moderngl not installed (pip install 'gpuaudit[render]')"
    with pytest.raises(gl.NoContext, match="moderngl not installed"):
        gl.open_context()


def test_software_rendering_is_measured_checked_and_never_judged(glctx):
    from gpuaudit.bench.render import suite

    ms = {m.name: m for m in suite.run(_ctx())}
    assert set(ms) == {n for n, _ in suite.FIGURES}
    for name in ("pixel_fill", "texture_fill_bilinear", "texture_fill_trilinear", "triangles",
                 "scene_1080p", "raytrace_shader"):
        m = ms[name]
        assert m.value > 0 and m.verified is True, (name, m.params.get("check"))
        assert m.spec_value is None and m.gpu_index is None
        assert any("software, on the CPU" in n for n in m.notes)
    assert ms["scene_4k"].skipped_reason.startswith("software renderer")
    assert ms["raytrace_rt_cores"].skipped_reason == ("a software renderer on the CPU: no RT "
                                                      "cores")


# --- glmark2 --------------------------------------------------------------------------------------

# glmark2 2023.01 (Debian 12's glmark2-x11) under Xvfb on Mesa's llvmpipe, as it printed
GLMARK2_OUTPUT = """\
=======================================================
    glmark2 2023.01
=======================================================
    OpenGL Information
    GL_VENDOR:      Mesa/X.org
    GL_RENDERER:    llvmpipe (LLVM 15.0.6, 256 bits)
    GL_VERSION:     4.5 (Compatibility Profile) Mesa 22.3.6
    Surface Config: buf=32 r=8 g=8 b=8 a=8 depth=32 stencil=0 samples=0
    Surface Size:   320x240 windowed
=======================================================
[texture] duration=1:texture-filter=linear: FPS: 926 FrameTime: 1.081 ms
[build] duration=1:use-vbo=true: FPS: 352 FrameTime: 2.841 ms
=======================================================
                                  glmark2 Score: 638
=======================================================
"""
VALIDATE_OUTPUT = """\
[texture] texture-filter=linear: Validation: Success
[build] use-vbo=true: Validation: Failure
[shading] shading=phong: Validation: Unknown
"""


def test_glmark2_output_is_read():
    from gpuaudit.bench.render import native

    parsed = native.parse(GLMARK2_OUTPUT)
    assert parsed.fps == {"texture texture-filter=linear": 926.0, "build use-vbo=true": 352.0}
    assert parsed.score == 638.0 and parsed.renderer == "llvmpipe (LLVM 15.0.6, 256 bits)"
    assert native.parse_validation(VALIDATE_OUTPUT) == {
        "texture texture-filter=linear": True, "build use-vbo=true": False,
        "shading shading=phong": None}


def test_vkmark_results_match_with_the_options_it_adds():
    from gpuaudit.bench.render import native

    parsed = native.parse("[vertex] device-local=true: FPS: 3417 FrameTime: 0.293 ms\n"
                          "[texture] anisotropy=0: FPS: 2998 FrameTime: 0.334 ms\n"
                          "vkmark Score: 3207\n")
    assert native.lookup(parsed.fps, "vertex", "") == 3417.0
    assert native.lookup(parsed.fps, "texture", "anisotropy=0") == 2998.0
    assert native.lookup(parsed.fps, "texture", "anisotropy=16") is None
    assert parsed.score == 3207.0


def test_glmark2_missing_is_a_reason(monkeypatch):
    from gpuaudit.bench.render import native

    monkeypatch.delenv("GPUAUDIT_GLMARK2", raising=False)
    monkeypatch.setattr(native.shutil, "which", lambda name: None)
    monkeypatch.setattr(native.glob, "glob", lambda pattern: [])
    assert native.find_glmark2().startswith("glmark2 is not installed")
    monkeypatch.setenv("GPUAUDIT_GLMARK2", "/nonexistent/glmark2-drm")
    assert "is not an executable" in native.find_glmark2()


@pytest.mark.skipif(not CI and not (shutil.which("glmark2") and shutil.which("xvfb-run")),
                    reason="glmark2-x11 and xvfb are not installed")
def test_glmark2_runs_beside_ours_and_validates():
    from gpuaudit.bench.render import native

    ms = {m.name: m for m in native.glmark2(_ctx())}
    assert set(ms) == {f"glmark2_{n}" for n in native.GLMARK2_SCENES} | {"glmark2_score"}
    for name in native.GLMARK2_SCENES:
        m = ms[f"glmark2_{name}"]
        assert m.value > 0 and m.verified is True, m
        assert m.params["tool"] == "glmark2" and m.params["window_system"] == "x11 (Xvfb)"
    assert ms["glmark2_score"].value > 0
