"""Each family of a styles module (examples/predict/styles/) through `gpuaudit bench train
--op-profile` on this machine, as a user runs it, each in a process of its own: whether it
ran, its step, its classes' device time, its declared units' classes as the GPU profile
grouped them, and the time the model does not understand with why (an operator without a
rule; kernels that contradict their unit's class). The docs' "no kernel contradicting its
unit's class" on a GPU rests on this.

    PYTHONPATH=src python3 validation/predict/styles_gpu.py MODULE OUT [--precision bf16]
        [--only NAME,NAME] [--batch-size N] [--timeout-s S]

OUT/styles-MODULE-PRECISION.json is written after every family (Ctrl-C keeps what ran);
OUT/styles-MODULE-PRECISION.md is its summary; OUT/runs-MODULE-PRECISION/FAMILY.json each
family's run as `bench train --json` printed it, for `gpuaudit predict` on another machine
(`--rates` a run of this GPU's matmul and memory benches).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
STYLES = ROOT / "examples" / "predict"


def expectations(module: str) -> dict[str, dict[str, Any]]:
    spec = importlib.util.spec_from_file_location(f"styles_{module}",
                                                  STYLES / "styles" / f"{module}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return dict(mod.EXPECT)


def profile_family(module: str, family: str, precision: str, batch: int | None,
                   timeout_s: float, keep: Path | None = None) -> dict[str, Any]:
    """One family's `bench train --op-profile --json` in a process of its own; its run into
    `keep`/FAMILY.json where given."""
    cmd = [sys.executable, "-m", "gpuaudit", "bench", "train", "--model",
           f"styles.{module}:{family}", "--op-profile", "--precision", precision, "--json",
           "--no-save", *(("--batch-size", str(batch)) if batch else ())]
    paths = [str(ROOT / "src"), str(STYLES), *os.environ.get("PYTHONPATH", "").split(os.pathsep)]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)}
    t0 = time.monotonic()
    try:
        done = subprocess.run(cmd, cwd=STYLES, env=env, capture_output=True, text=True,
                              timeout=timeout_s)
    except subprocess.TimeoutExpired:
        return {"family": family, "rc": None, "error": f"timed out after {timeout_s:.0f} s"}
    out: dict[str, Any] = {"family": family, "rc": done.returncode,
                           "seconds": round(time.monotonic() - t0, 1)}
    lines = [ln for ln in done.stderr.splitlines() if ln.startswith("gpuaudit: error")]
    if lines:
        out["error"] = lines[-1]
    try:
        run = json.loads(done.stdout)
        if keep is not None:
            keep.mkdir(parents=True, exist_ok=True)
            (keep / f"{family}.json").write_text(done.stdout)
    except json.JSONDecodeError:
        out.setdefault("error", (done.stderr.strip().splitlines() or ["no output"])[-1])
        return out
    profiles = run.get("op_profiles") or []
    if not profiles:
        skipped = [m.get("skipped_reason") for m in run.get("measurements", [])
                   if m.get("skipped_reason")]
        out.setdefault("error", skipped[0] if skipped else "no op profile")
        return out
    op = profiles[0]
    busy = sum(c["ms_per_step"] for c in op["classes"]) or 1.0
    out.update(
        step_ms=op["step_ms"],
        classes={c["op_class"]: round(c["ms_per_step"], 3) for c in op["classes"]},
        units={g["unit"]: sorted({h["op_class"] for h in op["groups"]
                                  if h["unit"] == g["unit"]}) for g in op["groups"]},
        unknown=op["unknown"],
        unknown_pct=round(100 * sum(u["ms_per_step"] for u in op["unknown"]) / busy, 1),
    )
    return out


def judge(result: dict[str, Any], expect: dict[str, Any]) -> list[str]:
    """What contradicts the declaration on this GPU: a declared unit in another class (its
    backward's nodes and optimizer groups share names, so a unit is checked only where the
    profile grouped it once), a class declared absent, kernels contradicting their unit."""
    if "units" not in result:
        return [f"did not run: {result.get('error')}"]
    wrong = []
    banned = set(expect.get("!", ()))
    for unit, cls in expect.items():
        got = result["units"].get(unit)
        want = cls if isinstance(cls, set) else {cls}
        if unit != "!" and got and len(got) == 1 and set(got) != want:
            wrong.append(f"{unit}: {got[0]} (declared {sorted(want)})")
    present = {c for c, ms in result["classes"].items() if ms > 0}
    wrong += [f"class {c} present (declared absent)" for c in sorted(banned & present)]
    # a kernel that contradicts its unit (`workloads.kernelview`): "its kernel K multiplies
    # matrices under a C operator"
    wrong += [f"{u['op']} {u['ms_per_step']:.3g} ms: {u['why']}" for u in result["unknown"]
              if u["why"].startswith("its kernel")]
    return wrong


def summary(module: str, precision: str, results: list[dict[str, Any]],
            expect: dict[str, dict[str, Any]]) -> str:
    rows = ["| family | ran | step ms | unknown % | contradicts its declaration |",
            "| --- | --- | --- | --- | --- |"]
    for r in results:
        wrong = judge(r, expect[r["family"]])
        rows.append(f"| {r['family']} | {'yes' if 'units' in r else 'no'} | "
                    f"{r.get('step_ms', '—')} | {r.get('unknown_pct', '—')} | "
                    f"{'; '.join(wrong) or 'nothing'} |")
    clean = sum(1 for r in results if not judge(r, expect[r["family"]]))
    return (f"# styles.{module}, {precision}: {clean} of {len(results)} ran with nothing "
            "contradicting their declaration\n\n" + "\n".join(rows) + "\n")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("module")
    ap.add_argument("out")
    ap.add_argument("--precision", default="bf16")
    ap.add_argument("--only", default="")
    ap.add_argument("--batch-size", type=int)
    ap.add_argument("--timeout-s", type=float, default=240.0)
    a = ap.parse_args()
    expect = expectations(a.module)
    names = [n for n in a.only.split(",") if n] or list(expect)
    unknown = [n for n in names if n not in expect]
    if unknown:
        print(f"styles_gpu: {a.module} has no family {', '.join(unknown)}", file=sys.stderr)
        return 2
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    stem = out / f"styles-{a.module}-{a.precision}"
    results: list[dict[str, Any]] = []
    try:
        for i, name in enumerate(names, 1):
            print(f"[{i}/{len(names)}] {name} {a.precision}", flush=True)
            results.append(profile_family(a.module, name, a.precision, a.batch_size,
                                          a.timeout_s, out / f"runs-{a.module}-{a.precision}"))
            stem.with_suffix(".json").write_text(json.dumps(results, indent=1))
    except KeyboardInterrupt:
        print(f"interrupted: {len(results)} of {len(names)} kept", file=sys.stderr)
    text = summary(a.module, a.precision, results, expect)
    stem.with_suffix(".md").write_text(text)
    print(text)
    return 0 if len(results) == len(names) else 130


if __name__ == "__main__":
    sys.exit(main())
