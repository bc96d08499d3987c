"""The `predict-users` entry: `gpuaudit predict` on models written the way their users write
them (examples/predict/user/, none of them a zoo family), each recorded as a user runs it on
one loan (tests/fixtures/predict/user/MODEL-*-GPU.json.gz): its source's `bench train
--op-profile`, each target's own `bench train` and the machine's `bench matmul memory`. Every
case is predicted from its source and set beside the throughput its target's own run
measured; a case that shaped a rule of the method is shown apart, as no test of it.

    python3 validation/predict/users.py      # the tables (markdown) on stdout
"""

from __future__ import annotations

import dataclasses
import functools
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]
USER = ROOT / "tests" / "fixtures" / "predict" / "user"
EXAMPLES = ROOT / "examples" / "predict"  # the size changes' entry points: user.NAME:build_*
sys.path.insert(0, str(ROOT / "src"))
sys.path.insert(0, str(ROOT))

from gpuaudit.predict import Change  # noqa: E402


@dataclass(frozen=True)
class Case:
    label: str
    recorded: str        # the source's fixture: MODEL-RECORDED-GPU.json.gz
    change: Change
    measured_by: str     # the target's own `bench train`
    shaped: str = ""     # the rule this case changed: no test of it


@dataclass(frozen=True)
class UserModel:
    tag: str             # the fixtures' prefix
    title: str
    entry: str           # its module under examples/predict
    rates: str           # the loan's `bench matmul memory` fixture (its full name)
    cases: tuple[Case, ...]
    shaped: str = ""     # the rules the whole model shaped: none of its cases tests them
    # each source beside the same step timed in a process of its own: did its pace hold?
    sources: tuple[tuple[str, str], ...] = (("bf16-run", "bf16"), ("fp32-run", "fp32"))
    gpu: str = "h100"    # the fixtures' suffix: the GPU model its loan had


def _precisions(extra: tuple[Case, ...] = (), batch_up: int = 0,
                batch_down: int = 0) -> tuple[Case, ...]:
    """The recorded precisions' cases: each source to the other two precisions, the bf16
    source to other batches, then `extra`."""
    out = [Case(f"{src} → {p}", f"{src}-run", Change(precision=p), p)
           for src, others in (("bf16", ("fp32", "tf32")), ("fp32", ("bf16", "tf32")))
           for p in others]
    for n in (batch_up, batch_down):
        if n:
            out.append(Case(f"bf16 at batch {n}", "bf16-run", Change(batch=n), f"bf16-b{n}"))
    return (*out, *extra)


def _shaped(cases: tuple[Case, ...], labels: tuple[str, ...], why: str) -> tuple[Case, ...]:
    """`cases` with those named by `labels` marked as having shaped a rule (`why`)."""
    return tuple(dataclasses.replace(c, shaped=why) if c.label in labels else c for c in cases)


MODELS = (
    UserModel("neox", "GPT-NeoX as Hugging Face transformers writes it", "user.neox",
              "users-rates", _precisions(
                  (Case("fp32 → bf16 at batch 16", "fp32-run", Change(precision="bf16", batch=16),
                        "bf16-b16"),), batch_up=16)),
    UserModel("qwen", "Qwen2 as Hugging Face transformers writes it (its second recording)",
              "user.qwen", "users-rates", _precisions(
                  (Case("fp32 → bf16 at batch 16", "fp32-run", Change(precision="bf16", batch=16),
                        "bf16-b16"),), batch_up=16),
              "its first recording's fp32 → bf16 (+7.1 %) and bf16 → fp32 (−6.0 %), both out "
              "of band, shaped the cast and strided-traffic rules"),
    UserModel("qwen2", "Qwen2 as Hugging Face transformers writes it (its third recording, "
              "its size: its logits' cast to fp32 is the one cast its bf16 step runs)",
              "user.qwen", "qwen2-rates",
              (Case("hidden 896 → 1,536 (Qwen2-1.5B's widths, 12 layers)", "bf16-run",
                    Change(model="user.qwen:build_large"), "size"),), sources=()),
    UserModel("swin", "Swin-T as its reference implementation writes it", "user.swin",
              "swin-rates", _precisions(
                  (Case("fp32 → bf16 at batch 128", "fp32-run",
                        Change(precision="bf16", batch=128), "bf16-b128"),),
                  batch_up=128, batch_down=32)),
    UserModel("effnet", "EfficientNet as torchvision writes it", "user.efficientnet",
              "effnet-rates", _precisions(
                  (Case("fp32 → bf16 at batch 256", "fp32-run",
                        Change(precision="bf16", batch=256), "bf16-b256"),
                   Case("B0 → B1 (deeper, 240 px)", "bf16-run",
                        Change(model="user.efficientnet:build_b1"), "b1",
                        "it came out +18.6 %, out of band, and set batch norm far below its "
                        "roofline to move by its calls' traffic weighed by their channels"),
                   Case("B0 → B2 (wider, deeper, 260 px)", "bf16-run",
                        Change(model="user.efficientnet:build_b2"), "b2")),
                  batch_up=256, batch_down=64)),
    UserModel("conformer", "Conformer-S speech recognizer with CTC loss, as torchaudio writes "
              "its Conformer", "user.conformer", "conformer-rates", _precisions(
                  (Case("fp32 → bf16 at batch 128", "fp32-run",
                        Change(precision="bf16", batch=128), "bf16-b128"),
                   Case("S → M (d 144 → 256)", "bf16-run",
                        Change(model="user.conformer:build_medium"), "size")),
                  batch_up=128, batch_down=32)),
    UserModel("gin", "GIN for molecules (ogbg-molpcba), as PyTorch Geometric and the OGB "
              "examples write it", "user.gin", "gin-rates", _shaped(_precisions(
                  (Case("fp32 → bf16 at batch 1024", "fp32-run",
                        Change(precision="bf16", batch=1024), "bf16-b1024"),
                   Case("emb 300 → 600", "bf16-run", Change(model="user.gin:build_wide"),
                        "size")),
                  batch_up=1024, batch_down=256), ("fp32 → bf16", "fp32 → tf32"),
                  "out of band (+13.9 %, +5.8 %), they set the band to reach the host's "
                  "reading of a gap the recording cannot place")),
    UserModel("clip", "CLIP ViT-B/32 with its text tower and contrastive loss, as open_clip "
              "writes it", "user.clip", "clip-rates", _precisions(
                  (Case("fp32 → bf16 at batch 512", "fp32-run",
                        Change(precision="bf16", batch=512), "bf16-b512"),
                   Case("patches 32 → 16", "bf16-run", Change(model="user.clip:build_b16"),
                        "size",
                        "moved by its attention's FLOPs it came out −11.4 %, out of band, "
                        "and set a fused attention whose tokens change to move by its ideal "
                        "time")),
                  batch_up=512, batch_down=128)),
    UserModel("deit", "DeiT-S as timm writes its vision transformer", "user.deit",
              "deit-rates", _shaped(_precisions(
                  (Case("224 → 384 px (197 → 577 tokens)", "bf16-run",
                        Change(model="user.deit:build_384"), "size"),),
                  batch_up=256, batch_down=64), ("bf16 at batch 64",),
                  "its source's step read as a host slower by its outlying rounds, it came "
                  "out −20.3 % (in band), and set that reading to be taken only where the "
                  "host's pace in most rounds fills the step")),
    UserModel("t5", "T5 v1.1 as Hugging Face transformers writes it", "user.t5", "t5-rates",
              _shaped(_precisions((Case("small → base (d 512 → 768, 8 → 12 layers)",
                                        "bf16-run", Change(model="user.t5:build_base"),
                                        "size",
                                        "it came out +17.3 %, out of band; its base size "
                                        "profiled on an H100 showed its casts held ×1, and "
                                        "set a 16-bit step's casts to move by their class's "
                                        "traffic"),), batch_up=64, batch_down=16),
                      ("bf16 at batch 16",),
                      "replayed longer than its source at twice the batch, it came out "
                      "−34.6 % (out of band), and set a replayed step to be no shorter than "
                      "its host's own time per step"), gpu="h200"),
    UserModel("t5b", "T5 v1.1 as Hugging Face transformers writes it (its second recording, "
              "on an H100)", "user.t5", "t5b-rates",
              _precisions((Case("small → base (d 512 → 768, 8 → 12 layers)", "bf16-run",
                                Change(model="user.t5:build_base"), "size"),),
                          batch_up=64, batch_down=16),
              "its first recording shaped the rules of the casts, of linear layers that "
              "grow and of the device's gap in a host-bound replay"),
    UserModel("t5c", "T5 v1.1 as Hugging Face transformers writes it (its third recording, "
              "on an H100, its forward cut for the held timing of its host)", "user.t5",
              "t5c-rates",
              _precisions((Case("small → base (d 512 → 768, 8 → 12 layers)", "bf16-run",
                                Change(model="user.t5:build_base"), "size"),),
                          batch_up=64, batch_down=16),
              "its first recording shaped the rules of the casts, of linear layers that "
              "grow and of the device's gap in a host-bound replay; its second, the "
              "forward's cuts for the held timing"),
    UserModel("wav2vec2", "wav2vec 2.0 Base with CTC, as fairseq and Hugging Face write it",
              "user.wav2vec2", "wav2vec2-rates", _precisions(
                  (Case("fp32 → bf16 at batch 64", "fp32-run",
                        Change(precision="bf16", batch=64), "bf16-b64"),
                   Case("Base → small (d 768 → 512, 12 → 8 layers)", "bf16-run",
                        Change(model="user.wav2vec2:build_small"), "size")),
                  batch_up=64, batch_down=16)),
    UserModel("vgg", "VGG-11 with batch norm at 64 px", "user.vgg", "rates",
              (Case("bf16, ×1.5 width", "run", Change(model="user.vgg:build_wide"), "wide"),),
              sources=(("run", "again"),)),
    UserModel("c3d", "C3D-style video classifier, 16 × 112²", "user.c3d", "rates",
              (Case("bf16, ×2 width", "run", Change(model="user.c3d:build_wide"), "wide"),),
              sources=(("run", "again"),)),
)


@functools.cache
def fixture(name: str, gpu: str = "h100") -> Any:
    """A recorded run (`tests/fixtures/predict/user/NAME-GPU.json.gz`), read once: the table
    and its tests read each source and target again for every case."""
    from gpuaudit.model.schema import read_run

    return read_run(USER / f"{name}-{gpu}.json.gz")


def samples_per_s(run: Any) -> float:
    """A `bench train` run's measured throughput."""
    return float(next(m.value for m in run.measurements if m.suite == "train"
                      and m.name.endswith("/throughput")))


def predict_run(run: Any, rates: str, change: Change, gpu: str = "h100") -> Any:
    """`change` predicted from a recorded run's op profile on the rates of its loan (`rates`,
    that loan's `bench matmul memory` fixture)."""
    from gpuaudit.predict import load_profile, machine_rates, predict
    from gpuaudit.specs.catalog import load_catalog

    specs = load_catalog()
    return predict(load_profile(run, run.op_profiles[0].workload),
                   machine_rates(fixture(rates, gpu), specs), change, specs)


def predict_case(model: UserModel, case: Case) -> tuple[Any, float]:
    """The case's prediction from its source on its loan's rates, and its target's measured
    samples/s."""
    p = predict_run(fixture(f"{model.tag}-{case.recorded}", model.gpu), model.rates,
                    case.change, model.gpu)
    return p, samples_per_s(fixture(f"{model.tag}-{case.measured_by}", model.gpu))


def _num(v: float) -> str:
    return f"{v:,.0f}" if v >= 999.5 else f"{v:.4g}"


def row(model: UserModel, case: Case) -> dict[str, Any]:
    p, measured = predict_case(model, case)
    error = p.samples_per_s / measured - 1
    return {"model": model.tag, "case": case.label, "predicted": p.samples_per_s,
            "low": p.samples_per_s_low, "high": p.samples_per_s_high, "measured": measured,
            "error": error, "in_band": p.samples_per_s_low <= measured <= p.samples_per_s_high,
            "shaped": case.shaped or model.shaped}


def _pct(fraction: float) -> str:
    pct = round(fraction * 100, 1)
    return (f"{pct:+.1f} %" if pct else "0.0 %").replace("-", "−")


def _cell(r: dict[str, Any]) -> str:
    text = _pct(r["error"])
    if abs(r["error"]) > 0.10 or not r["in_band"]:
        return f"**{text}** ({'in' if r['in_band'] else 'out of'} band)"
    return text


def line(case: Case, r: dict[str, Any], off_pace: bool = False) -> str:
    """The case's row of its model's table."""
    note = f" (shaped a rule: {case.shaped})" if case.shaped else ""
    off = "; its source off its pace" if off_pace else ""
    return (f"| {case.label}{note} | {_num(r['predicted'])} ({_num(r['low'])}–{_num(r['high'])})"
            f" | {_num(r['measured'])} | {_cell(r)}{off} |")


def _recorded(model: UserModel) -> str:
    """When and where the model's fixtures were recorded, from the runs themselves."""
    tail = f"-{model.gpu}.json.gz"
    runs = [fixture(p.name.removesuffix(tail), model.gpu)
            for p in sorted(USER.glob(f"{model.tag}-*{tail}"))]
    starts = sorted(r.started_at for r in runs)
    machine = runs[0].machine
    return (f"recorded {starts[0]:%Y-%m-%d %H:%M}–{starts[-1]:%H:%M} UTC on 1× "
            f"{machine.gpus[0].name} (driver {machine.driver_version}), {len(runs)} runs")


# a source whose step, timed again in a process of its own, moved more than this: its cases
# are measured on a host whose pace the recording did not see
PACE_MOVED = 0.10


def paces(model: UserModel) -> dict[str, float]:
    """Each source's step timed again in a process of its own ÷ its profiled run's, in
    throughput."""
    return {src: samples_per_s(fixture(f"{model.tag}-{again}", model.gpu))
            / samples_per_s(fixture(f"{model.tag}-{src}", model.gpu))
            for src, again in model.sources}


def _pace_text(moved: dict[str, float]) -> str:
    if not moved:
        return ""
    return "; its sources' steps timed again in a process of their own: " + ", ".join(
        f"{src.removesuffix('-run')} {_pct(r - 1)}" for src, r in moved.items())


def table(rows_by_model: list[tuple[UserModel, list[dict[str, Any]]]]) -> str:
    tests = [r for _, rows in rows_by_model for r in rows if not r["shaped"]]
    within = sum(abs(r["error"]) <= 0.10 for r in tests)
    band = sum(r["in_band"] for r in tests)
    shaped = [r for _, rows in rows_by_model for r in rows if r["shaped"]]
    models = len({m.entry for m, _ in rows_by_model})  # a model recorded twice counts once
    out = [f"gpuaudit predict on {models} models written the way their users write "
           "them (examples/predict/user), each recorded as a user runs it: `gpuaudit bench "
           "train --model user.NAME:build --precision P --op-profile` for its source, each "
           "target's own `bench train` and `gpuaudit bench matmul memory` in the same loan "
           "(`validation/predict/users.py`). Cases that no rule was shaped on: "
           f"**{within} of {len(tests)} within 10 %, {band} inside their band**; apart, "
           f"the {len(shaped)} that shaped a rule: "
           f"{sum(abs(r['error']) <= 0.10 for r in shaped)} within 10 %, "
           f"{sum(r['in_band'] for r in shaped)} inside their band.", ""]
    for model, rows in rows_by_model:
        shaped_here = f"; {model.shaped}: no test of them" if model.shaped else ""
        moved = paces(model)
        out += [f"**{model.title}** (`{model.entry}`): {_recorded(model)}"
                f"{_pace_text(moved)}{shaped_here}", "",
                "| recorded → target | predicted (band), samples/s | measured | error |",
                "| --- | --- | --- | --- |"]
        for r in rows:
            case = next(c for c in model.cases if c.label == r["case"])
            out.append(line(case, r, abs(moved.get(case.recorded, 1.0) - 1) > PACE_MOVED))
        out.append("")
    return "\n".join(out).rstrip("\n") + "\n"


def main() -> int:
    sys.path.insert(0, str(EXAMPLES))
    found = [(m, [row(m, c) for c in m.cases]) for m in MODELS]
    sys.stdout.write(table(found))
    return 0


if __name__ == "__main__":
    sys.exit(main())
