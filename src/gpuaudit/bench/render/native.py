"""`bench render --with-native`: the packaged reference tools run in the same call, their
figures shown beside ours.

- glmark2 (Debian: glmark2-drm, glmark2-x11 and their es2 builds): four scenes off-screen at
  1920×1080 (vertex buffers, bilinear and trilinear texturing, per-pixel Phong shading), its
  frames per second and score, and its own `--validate` pass, which compares each scene's
  frame with the reference images it ships. It needs a window system: a DRM device (the drm
  build), an X server ($DISPLAY), or Xvfb, which we start through xvfb-run. Under Xvfb,
  OpenGL is Mesa's unless the GPU's driver provides GLX there: the renderer glmark2 names is
  recorded, and a software renderer's figures are marked as the CPU's.
- vkmark, where installed (not packaged in Debian 12), with its headless window system.
- Blender's benchmark is not run: its launcher is not packaged in Debian and downloads its
  scenes and Blender builds at run time.

GPUAUDIT_GLMARK2 names a glmark2 binary to use (GPUAUDIT_GLMARK2_DATA its data folder), for
builds unpacked outside the PATH."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from typing import TypeVar

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.render.gl import SOFTWARE
from gpuaudit.bench.stats import reason_of, skipped
from gpuaudit.model import Measurement

SUITE = "render"
T = TypeVar("T")
SIZE = (1920, 1080)
# name → glmark2 benchmark description
GLMARK2_SCENES = {
    "build": "build:use-vbo=true",
    "texture_bilinear": "texture:texture-filter=linear",
    "texture_trilinear": "texture:texture-filter=mipmap",
    "shading_phong": "shading:shading=phong",
}
VKMARK_SCENES = {"vertex": "vertex", "texture": "texture", "shading": "shading"}
LINE = re.compile(r"^\[(?P<scene>[\w-]+)\]\s*(?P<opts>.*?):?\s*FPS:\s*(?P<fps>[\d.]+)"
                  r"(?:\s+FrameTime:\s*(?P<ms>[\d.]+)\s*ms)?", re.MULTILINE)
VALID = re.compile(r"^\[(?P<scene>[\w-]+)\]\s*(?P<opts>.*?):\s*Validation:\s*(?P<verdict>\w+)",
                   re.MULTILINE)
SCORE = re.compile(r"(?:glmark2|vkmark) Score:\s*(?P<score>\d+)")
RENDERER = re.compile(r"(?:GL_RENDERER|Device Name):\s*(?P<name>.+)")


@dataclass(frozen=True)
class Tool:
    argv: tuple[str, ...]  # the command up to its own options (xvfb-run included)
    flavour: str  # drm, x11 (xvfb), x11, headless
    data: str | None = None


@dataclass(frozen=True)
class Parsed:
    fps: dict[str, float]  # "scene opts" → frames/s, in the order run
    score: float | None
    renderer: str


def key(scene: str, opts: str) -> str:
    """'texture', 'duration=2:texture-filter=linear' → 'texture texture-filter=linear': one
    benchmark's name in the timed run, in --validate's report and in our scene table."""
    kept = [p for p in opts.strip().split(":") if p and not p.startswith("duration=")]
    return f"{scene} {':'.join(kept)}".strip()


def lookup(found: dict[str, T], scene: str, opts: str) -> T | None:
    """The result of benchmark `scene:opts`; the tools print the options they defaulted too
    ('[vertex] device-local=true'), so a result whose options include ours also counts."""
    want = key(scene, opts)
    if want in found:
        return found[want]
    mine = set(key("", opts).split(":")) - {""}
    for name, value in found.items():
        got_scene, _, got_opts = name.partition(" ")
        if got_scene == scene and mine <= set(got_opts.split(":")):
            return value
    return None


def parse(text: str) -> Parsed:
    """glmark2's or vkmark's report: each benchmark's frames per second, the score, and the
    renderer it names."""
    fps = {key(m["scene"], m["opts"]): float(m["fps"]) for m in LINE.finditer(text)}
    score = SCORE.search(text)
    renderer = RENDERER.search(text)
    return Parsed(fps, float(score["score"]) if score else None,
                  renderer["name"].strip() if renderer else "")


def parse_validation(text: str) -> dict[str, bool | None]:
    """`--validate`'s verdict per benchmark: Success → True, Failure → False, else None."""
    out: dict[str, bool | None] = {}
    for m in VALID.finditer(text):
        verdict = m["verdict"].lower()
        out[key(m["scene"], m["opts"])] = (True if verdict == "success" else
                                           False if verdict == "failure" else None)
    return out


def find_glmark2() -> Tool | str:
    """The glmark2 build that can run here, or why none can."""
    data = os.environ.get("GPUAUDIT_GLMARK2_DATA")
    given = os.environ.get("GPUAUDIT_GLMARK2")
    drm = bool(glob.glob("/dev/dri/card*"))
    if given:
        if not os.access(given, os.X_OK):
            return f"GPUAUDIT_GLMARK2={given} is not an executable"
        if "drm" in os.path.basename(given):
            return Tool((given,), "drm", data) if drm else (
                f"{os.path.basename(given)} (GPUAUDIT_GLMARK2) is glmark2's DRM build and "
                "this machine has no DRM device (/dev/dri/card*)")
        return _x11((given,), data)
    if drm:
        for name in ("glmark2-drm", "glmark2-es2-drm"):
            path = shutil.which(name)
            if path:
                return Tool((path,), "drm", data)
    for name in ("glmark2", "glmark2-es2"):
        path = shutil.which(name)
        if path:
            return _x11((path,), data)
    return ("glmark2 is not installed (Debian: glmark2-x11 with xvfb, or glmark2-drm where "
            "the machine has a DRM device)")


def _x11(argv: tuple[str, ...], data: str | None) -> Tool | str:
    if os.environ.get("DISPLAY"):
        return Tool(argv, "x11", data)
    wrapper = shutil.which("xvfb-run")
    if wrapper:
        return Tool((wrapper, "-a", "-s", f"-screen 0 {SIZE[0]}x{SIZE[1] + 8}x24", *argv),
                    "x11 (Xvfb)", data)
    return "glmark2's X11 build needs an X server: no $DISPLAY and no xvfb-run (Debian: xvfb)"


def _run(argv: Sequence[str], timeout_s: float) -> str:
    proc = subprocess.run(list(argv), capture_output=True, text=True, timeout=timeout_s,
                          check=False)
    text = proc.stdout + proc.stderr
    if proc.returncode != 0 and not LINE.search(text) and not VALID.search(text):
        last = [ln for ln in text.strip().splitlines() if ln.strip()][-1:] or ["no output"]
        raise RuntimeError(f"exit {proc.returncode}: {last[0][:200]}")
    return text


def run_native(ctx: BenchContext) -> Iterator[Measurement]:
    yield from glmark2(ctx)
    yield from vkmark(ctx)
    yield skipped(SUITE, "blender_benchmark", "samples/min",
                  "not run: Blender's benchmark launcher is not packaged in Debian and "
                  "downloads its scenes and Blender builds at run time",
                  params={"tool": "blender"})


def _gpu_index(ctx: BenchContext, software: bool) -> int | None:
    if software or len(ctx.machine.gpus) != 1 or not ctx.devices:
        return None
    return ctx.devices[0][1]


def glmark2(ctx: BenchContext) -> Iterator[Measurement]:
    tool = find_glmark2()
    names = [f"glmark2_{n}" for n in GLMARK2_SCENES]
    if isinstance(tool, str):
        for name in [*names, "glmark2_score"]:
            yield skipped(SUITE, name, "frames/s" if name != "glmark2_score" else "score",
                          tool, params={"tool": "glmark2"})
        return
    data = ("--data-path", tool.data) if tool.data else ()
    benches = [a for d in GLMARK2_SCENES.values() for a in ("-b", f"{d}:duration="
                                                            f"{ctx.pick(2, 5, 10)}")]
    ctx.step(f"render: glmark2 ({tool.flavour}), {len(GLMARK2_SCENES)} scenes at "
             f"{SIZE[0]}×{SIZE[1]}")
    try:
        text = _run([*tool.argv, *data, "--off-screen", "-s", f"{SIZE[0]}x{SIZE[1]}",
                     *benches], ctx.timeout_s)
        ctx.step("render: glmark2 --validate")
        valid = parse_validation(_run([*tool.argv, *data, "--validate",
                                       *[a for d in GLMARK2_SCENES.values()
                                         for a in ("-b", d)]], ctx.timeout_s))
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        for name in [*names, "glmark2_score"]:
            yield skipped(SUITE, name, "frames/s" if name != "glmark2_score" else "score",
                          f"glmark2 ({tool.flavour}) failed: {reason_of(exc)}",
                          params={"tool": "glmark2"})
        return
    yield from _figures(ctx, "glmark2", tool, parse(text), GLMARK2_SCENES, valid)


def _figures(ctx: BenchContext, prefix: str, tool: Tool, parsed: Parsed,
             scenes: dict[str, str], valid: dict[str, bool | None]) -> Iterator[Measurement]:
    software = any(s in parsed.renderer.lower() for s in SOFTWARE)
    index = _gpu_index(ctx, software)
    notes = ((f"rendered by {parsed.renderer} (software, on the CPU), not the GPU",)
             if software else ())
    base = {"tool": prefix, "window_system": tool.flavour, "renderer": parsed.renderer,
            "size": f"{SIZE[0]}x{SIZE[1]}"}
    for name, desc in scenes.items():
        scene, _, opts = desc.partition(":")
        fps = lookup(parsed.fps, scene, opts)
        if fps is None:
            yield skipped(SUITE, f"{prefix}_{name}", "frames/s",
                          f"{prefix} printed no result for {desc}", params=base)
            continue
        yield Measurement(suite=SUITE, name=f"{prefix}_{name}", unit="frames/s", value=fps,
                          statistic=f"{prefix}'s mean over the scene", samples=(fps,),
                          gpu_index=index, verified=lookup(valid, scene, opts), notes=notes,
                          params={**base, "benchmark": desc})
    if parsed.score is not None:
        yield Measurement(suite=SUITE, name=f"{prefix}_score", unit="score",
                          value=parsed.score, statistic=f"{prefix}'s score",
                          samples=(parsed.score,), gpu_index=index, notes=notes, params=base)


def vkmark(ctx: BenchContext) -> Iterator[Measurement]:
    path = shutil.which("vkmark")
    names = [f"vkmark_{n}" for n in VKMARK_SCENES]
    if path is None:
        for name in names:
            yield skipped(SUITE, name, "frames/s", "vkmark is not installed (not packaged in "
                          "Debian 12)", params={"tool": "vkmark"})
        return
    tool = Tool((path,), "headless")
    ctx.step("render: vkmark (headless)")
    benches = [a for d in VKMARK_SCENES.values() for a in ("-b", f"{d}:duration="
                                                           f"{ctx.pick(2, 5, 10)}")]
    try:
        text = _run([path, "--winsys", "headless", "-s", f"{SIZE[0]}x{SIZE[1]}", *benches],
                    ctx.timeout_s)
    except (OSError, subprocess.SubprocessError, RuntimeError) as exc:
        for name in names:
            yield skipped(SUITE, name, "frames/s", f"vkmark failed: {reason_of(exc)}",
                          params={"tool": "vkmark"})
        return
    yield from _figures(ctx, "vkmark", tool, parse(text), VKMARK_SCENES, {})
