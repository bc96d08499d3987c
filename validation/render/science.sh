#!/usr/bin/env bash
# The `render-science` entry (`python -m validation run render-science`, docs/bench-render-science.md):
# the facts (GPU, EGL and Vulkan loaders, DRM devices), which renderer EGL gives, both suites
# at the quick profile with --with-native (glmark2 where the machine has a DRM device and
# GPUAUDIT_GLMARK2 names its build), a reference-scene frame saved as PNG, and
# `recommend render|simulate --run` on the stored run. Everything under timeouts (a suite
# stopped by one keeps its figures, marked partial; under 3 minutes when all goes well, 8 at
# the very most); the files go to $VALIDATION_OUT, the evidence table (summary.md) last.
# Loaders the machine lacks are the launcher's business (validation/launch.sh), not this one's.
set -u
o=${VALIDATION_OUT:?run through python -m validation run render-science}
work=${VALIDATION_WORK:-$(mktemp -d)}
db="sqlite:///$work/render_science.db"
cd "$work" || exit 1

{ echo "== $(date -u +%FT%TZ)"; nproc
  nvidia-smi --query-gpu=name,driver_version,clocks.max.sm,memory.total --format=csv 2>&1
  echo "== DRM devices"; ls -la /dev/dri 2>&1
  echo "== loaders"; ldconfig -p | grep -E 'libEGL|libGLX|libvulkan|libgbm|libOpenGL' 2>&1
  echo "== EGL vendors"; ls /usr/share/glvnd/egl_vendor.d /usr/local/nvidia/share/glvnd/egl_vendor.d \
    /etc/glvnd/egl_vendor.d 2>&1
  echo "== NVIDIA libraries"; ls /usr/local/nvidia/lib64 2>/dev/null | grep -E 'EGL|GLX|gbm|vulkan' | head -20
  python3 -c 'import moderngl, glcontext, numpy, torch; print("moderngl", moderngl.__version__, "torch", torch.__version__, "numpy", numpy.__version__)' 2>&1
  python3 -c 'import cupy; print("cupy", cupy.__version__)' 2>&1 | tail -1
} > "$o/facts.txt" 2>&1

probe() {
  timeout 30 python3 -c 'from gpuaudit.bench.render import gl
ctx, r = gl.open_context()
print(r.vendor, "|", r.renderer, "|", r.version, "| software" if r.software else "| GPU")' 2>&1 | tail -1
}
egl=$(probe)
echo "EGL (default vendors): $egl" >> "$o/facts.txt"
# where the NVIDIA container toolkit puts the driver's EGL vendor file and Vulkan ICD
nvjson=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
if ! echo "$egl" | grep -q '| GPU' && [ -f "$nvjson" ]; then
  export __EGL_VENDOR_LIBRARY_FILENAMES=$nvjson
  export VK_DRIVER_FILES=/usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json
  egl=$(probe)
  echo "EGL (__EGL_VENDOR_LIBRARY_FILENAMES=$nvjson): $egl" >> "$o/facts.txt"
fi

if [ -n "${GPUAUDIT_GLMARK2:-}" ]; then
  { echo "== glmark2 ($GPUAUDIT_GLMARK2): missing libraries"
    ldd "$GPUAUDIT_GLMARK2" 2>&1 | grep -E 'not found'; } >> "$o/facts.txt"
fi

t0=$(date +%s)
timeout -s INT -k 20 150 python3 -m gpuaudit bench render --with-native --timeout 60 --json --db "$db" \
  > "$o/render.json" 2> "$o/render.err"
rc_render=$?
echo "bench render --with-native: rc=$rc_render wall_s=$(( $(date +%s) - t0 ))" > "$o/summary.txt"
t0=$(date +%s)
timeout -s INT -k 20 180 python3 -m gpuaudit bench science --json --db "$db" \
  > "$o/science.json" 2> "$o/science.err"
rc_science=$?
echo "bench science: rc=$rc_science wall_s=$(( $(date +%s) - t0 ))" >> "$o/summary.txt"

# one reference-scene frame at 1080p, as the GPU drew it (for the eye, beside the reference)
timeout 45 python3 - "$o/scene_1080p.png" > "$o/frame.txt" 2>&1 <<'PY'
import sys
from PIL import Image
from gpuaudit.bench.render import gl, scene
ctx, r = gl.open_context()
s = scene.build(ctx, (1920, 1080))
s.frame()
print(r.label(), "PSNR against the reference: %.2f dB" % scene.check_frame(s)[1])
Image.fromarray(gl.read_rgba(s.out, (1920, 1080))[::-1, :, :3]).save(sys.argv[1])
PY

# recommend from the stored runs (measured here), render and simulate
for f in render science; do
  id=$(python3 -c "import json,sys; print(json.load(open(sys.argv[1]))['id'])" "$o/$f.json" 2>/dev/null)
  echo "$f run: ${id:-none}" >> "$o/runs.txt"
  [ -n "$id" ] || continue
  if [ "$f" = render ]; then
    timeout 30 python3 -m gpuaudit recommend render --frames 1e5 --scene raster --resolution 4k \
      --run "$id" --db "$db" --top 8 > "$o/recommend_render.txt" 2>&1
  else
    timeout 30 python3 -m gpuaudit recommend simulate --kernel nbody --precision fp64 \
      --steps 1e5 --run "$id" --db "$db" --top 8 > "$o/recommend_simulate.txt" 2>&1
  fi
done

# the evidence table: every figure with its spec and its check, then what was skipped and why
python3 - "$o" > "$o/summary.md" 2>> "$o/summary.txt" <<'PY'
import json, sys
from pathlib import Path
o = Path(sys.argv[1])
egl = [l for l in (o / "facts.txt").read_text(errors="replace").splitlines() if l.startswith("EGL")]
frame = (o / "frame.txt").read_text(errors="replace").strip().splitlines() if (o / "frame.txt").exists() else []
print("; ".join(egl[-1:] + [f"1080p frame: {frame[-1]}" if frame else "no frame saved"]) + ".\n")
rows, skipped = [], []
for f in ("render", "science"):
    try:
        run = json.loads((o / f"{f}.json").read_text())
    except Exception as exc:
        skipped.append(f"- {f}: no run ({str(exc)[:100]})"); continue
    for m in run["measurements"]:
        if m["value"] is None:
            skipped.append(f"- `{m['name']}`: {(m['skipped_reason'] or '')[:140]}"); continue
        spec = f"{m['spec_value']:.4g} ({m['pct_of_spec']:.1f} %)" if m.get("spec_value") else ""
        p = m.get("params") or {}
        check = str(p.get("check", "")).replace("|", "/")[:140]
        # which implementation ran (the stencil's and n-body's Triton kernel, or torch and why)
        how = "; ".join(str(p[k]) for k in ("implementation", "fallback") if p.get(k))
        check += f" — {how.replace('|', '/')[:200]}" if how else ""
        ok = {True: "passed", False: "FAILED", None: ""}[m["verified"]]
        rows.append(f"| `{m['name']}` | {m['value']:.4g} {m['unit']} | {spec} | {ok} {check} |")
    for x in run.get("findings", []):
        skipped.append(f"- finding {x['severity']} {x['code']}: {x['message'][:140]}")
print("| figure | value | spec (%) | check |\n| --- | --- | --- | --- |")
print("\n".join(rows))
if skipped:
    print("\nNot measured:\n\n" + "\n".join(skipped))
PY
tail -n 2 "$o/render.err" "$o/science.err" >> "$o/summary.txt" 2>/dev/null
# the entry fails when a suite did (a finding's exit 1 included: the summary says which)
[ "$rc_render" -eq 0 ] && [ "$rc_science" -eq 0 ]
