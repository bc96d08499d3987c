"""The operator classes on layers written the ways users write them
(`examples/predict/styles/`): each family's forward and loss profiled on this CPU, its units
classed from the trace as `bench train --op-profile` classes them, against the classes its
module declared. The held-out families were declared before they were first profiled. The
library models (transformers, timm, torchvision) run where their library is installed."""

from __future__ import annotations

import importlib.util
import json
from pathlib import Path

import pytest

torch = pytest.importorskip("torch")

from gpuaudit.workloads import entry, optrace  # noqa: E402
from gpuaudit.workloads.opclass import canonical  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
STYLES = ROOT / "examples" / "predict"


def _module(module: str):
    spec = importlib.util.spec_from_file_location(f"styles_{module}",
                                                  STYLES / "styles" / f"{module}.py")
    assert spec is not None and spec.loader is not None
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


LIBRARIES = _module("libraries")
EXPECT = {module: _module(module).EXPECT
          for module in ("development", "held_out", "held_out_second", "held_out_third",
                         "held_out_fourth", "held_out_fifth", "training_patterns")}
EXPECT["libraries"] = LIBRARIES.EXPECT


def unit_classes(spec: str, tmp_path: Path) -> dict[str, set[str]]:
    """Each forward unit's canonical name → the classes its calls landed in."""
    from gpuaudit.workloads.trainer import to_device

    w = entry.load(spec)
    inputs, target = to_device(torch, entry.split_batch(w.make_batch(min(w.batch_size, 2)),
                                                        w.model), torch.device("cpu"), False)
    torch.manual_seed(0)
    # a function its module compiled runs eager here: its operators are what is classed, and
    # no inductor compile (C++ and a worker pool) runs in the tests' own process
    with torch._dynamo.config.patch(disable=True), \
            torch.profiler.profile(record_shapes=True) as prof:
        output = entry.call_model(w.model, inputs, entry.takes_keywords(w.model, inputs))
        (w.loss or entry.default_loss)(output, target)
    trace = tmp_path / "trace.json"
    prof.export_chrome_trace(str(trace))
    tree = optrace.build(json.loads(trace.read_text())["traceEvents"])
    out: dict[str, set[str]] = {}
    for step in optrace.forward_units(tree):
        for u in step:
            out.setdefault(canonical(u.name), set()).add(tree.unit_class[id(u)])
    return out


@pytest.fixture(autouse=True)
def styles_on_path(monkeypatch):
    monkeypatch.syspath_prepend(str(STYLES))
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.mark.parametrize(("module", "family"),
                         [(m, f) for m, families in EXPECT.items() for f in families])
def test_each_style_lands_in_the_class_its_family_declared(module, family, tmp_path, request):
    if module == "libraries":
        pytest.importorskip(LIBRARIES.LIBRARY[family])
    if (module, family) in KNOWN_MISSES:
        request.applymarker(pytest.mark.xfail(reason=KNOWN_MISSES[module, family], strict=True))
    expect = dict(EXPECT[module][family])
    banned = expect.pop("!", set())  # classes that must appear nowhere
    got = unit_classes(f"styles.{module}:{family}", tmp_path)
    wrong = {unit: sorted(got.get(unit, {"(absent)"})) for unit, cls in expect.items()
             if got.get(unit) != (cls if isinstance(cls, set) else {cls})}
    if banned & set().union(*got.values()):
        wrong["!"] = sorted(banned & set().union(*got.values()))
    assert not wrong, f"{module}:{family}: {wrong}"


# Held-out misses, shown with their cause (docs/predict.md); strict: one that passes fails.
KNOWN_MISSES = {
    ("libraries", "longformer"): "sliding-window scores copied diagonal by diagonal into "
                                 "windows before the softmax: no shape ties them",
    ("held_out_fifth", "topk_attention"): "the softmax normalizes each query's top-k scores "
                                          "(T × k), which no product's rows (T × T) match",
}


def test_the_gpu_check_reports_what_contradicts_a_declaration():
    """validation/predict/styles_gpu.py's verdict on a family's GPU op profile: a declared unit
    grouped in another class, a class declared absent, kernels contradicting their unit; a
    unit its backward or optimizer also names (two classes) is not judged by name."""
    from validation.predict.styles_gpu import judge

    declared = {"matmul": "gemm", "softmax": "elementwise", "!": {"attention"}}
    ran = {"classes": {"gemm": 1.0, "elementwise": 0.5, "attention": 0.0},
           "units": {"matmul": ["gemm"], "softmax": ["elementwise"], "to": ["elementwise"]},
           "unknown": [{"op": "fft_rfft2", "ms_per_step": 0.2,
                        "why": "an aten operator without a rule"}]}
    assert judge(ran, declared) == []
    ran["units"]["matmul"] = ["attention"]
    ran["classes"]["attention"] = 0.3
    why = "its kernel sm90_xmma_gemm multiplies matrices under a elementwise operator"
    ran["unknown"].append({"op": "gelu", "ms_per_step": 0.1, "why": why})
    assert judge(ran, declared) == ["matmul: attention (declared ['gemm'])",
                                    "class attention present (declared absent)",
                                    f"gelu 0.1 ms: {why}"]
    ran["units"]["matmul"] = ["attention", "gemm"]  # two groups: not judged by name
    assert judge(ran, declared)[0].startswith("class attention")
    assert judge({"family": "x", "error": "RuntimeError: boom"}, declared) == \
        ["did not run: RuntimeError: boom"]
