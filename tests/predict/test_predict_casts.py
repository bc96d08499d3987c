"""A 16-bit target's casts (`predict.groups`: traffic past what a width change explains, at
`CAST_OF_COPY` × the memory copy rate): found in the Llama's fp32 recording (the H100's 16th,
kept), checked against the casts its own bf16 step ran, against casts timed alone, and
against the cast groups of other families' 16-bit steps, recorded before the rule."""

import json
import tarfile

import pytest

from gpuaudit.model import load_run
from gpuaudit.predict import Change, load_profile, machine_rates, predict
from gpuaudit.predict import groups as grp
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import h100_rates, zoo_run
from validation.predict.cast_rates import of_copy

SPECS = load_catalog()
KEPT = FIXTURES / "predict" / "recordings" / "zoo-results-h100" / "sixteenth.tar.gz"


@pytest.fixture(scope="module")
def llama():
    with tarfile.open(KEPT) as tar:
        def read(name):
            return tar.extractfile(f"sixteenth/zoo/{name}").read().decode()
        run, rates = load_run(read("runs/llama.json")), load_run(read("rates.json"))
    return run, machine_rates(rates, SPECS)


def _profile(run, precision):
    return next(p for p in run.op_profiles if p.precision == precision)


def _casts(p):
    elementwise = next(c for c in p.classes if c.op_class == "elementwise")
    return [b for b in elementwise.basis.split("; ") if "past what a width change explains" in b]


def test_the_casts_found_in_an_fp32_step_are_the_ones_its_bf16_step_ran(llama):
    """The fp32 step's groups name 5.56 GB of bf16 traffic no width change explains: its
    RMSNorm's `x.float()` (no kernel in fp32) and `type_as` (no operator in fp32). The bf16
    step recorded beside it ran exactly those as its `to` and `type_as` groups, in 2.44 ms;
    taken at a cast's rate, 2.35 ms (−4 %, inside ±25 %)."""
    run, rates = llama
    p = predict(load_profile(run, "llama-style/fp32"), rates, Change(precision="bf16"), SPECS)
    [line] = _casts(p)
    bf16 = {g.unit: g for g in _profile(run, "bf16").groups if g.op_class == "elementwise"}
    ran = bf16["to"].bytes + bf16["type_as"].bytes
    assert f"{ran / 1e9:.3g} GB" in line
    ms = ran / (rates.roofs.memory_gbps * 1e9 * grp.CAST_OF_COPY) * 1e3
    assert f"+{ms:.3g} ms" in line
    took = (bf16["to"].kernel_us + bf16["type_as"].kernel_us) / 1e3
    assert ms / took - 1 == pytest.approx(-0.04, abs=0.01)
    assert abs(ms / took - 1) < grp.U_CAST


def test_without_the_casts_the_bf16_step_is_predicted_faster_by_their_time(llama):
    """A copy of the recording with the bf16-only traffic taken out (the `to` group's, and
    the class's uncounted `type_as`) carries no casts: its step comes out 31.0 ms (+15.6 % in
    throughput against the 35.9 ms measured) where the recording's comes out 33.4 ms (+7.5 %)."""
    run, rates = llama
    fp32 = _profile(run, "fp32")
    to = next(g for g in fp32.groups if g.unit == "to" and g.op_class == "elementwise")
    held = sum(g.alt_bytes or 0.0 for g in fp32.groups if g.op_class == "elementwise")
    groups = tuple(g.model_copy(update={"alt_bytes": g.bytes}) if g is to else g
                   for g in fp32.groups)
    classes = tuple(c.model_copy(update={"alt_bytes": held - (to.alt_bytes or 0.0)})
                    if c.op_class == "elementwise" else c for c in fp32.classes)
    planted = fp32.model_copy(update={"groups": groups, "classes": classes})
    damaged = run.model_copy(update={"op_profiles": tuple(
        planted if p is fp32 else p for p in run.op_profiles)})
    with_casts = predict(load_profile(run, "llama-style/fp32"), rates,
                         Change(precision="bf16"), SPECS)
    without = predict(load_profile(damaged, "llama-style/fp32"), rates,
                      Change(precision="bf16"), SPECS)
    assert not _casts(without)
    assert without.step_ms == pytest.approx(31.02, abs=0.01)
    assert with_casts.step_ms == pytest.approx(33.38, abs=0.01)
    measured = _profile(run, "bf16").step_ms
    assert with_casts.step_ms / measured - 1 == pytest.approx(-0.070, abs=0.002)


@pytest.mark.parametrize("target", ["fp32", "tf32"])
def test_an_fp32_target_has_no_casts_to_add(llama, target):
    """From the bf16 step the casts go: its `to` group moves by its traffic under fp32 (none)
    past the kernels' fixed latency, and nothing is added."""
    run, rates = llama
    p = predict(load_profile(run, "llama-style/bf16"), rates, Change(precision=target), SPECS)
    assert not _casts(p)


def test_the_cast_rate_is_the_one_casts_ran_at_alone():
    """Timed alone on an H100 at 1 GiB (validation/predict/cast_rates.py): fp32 → bf16 at the
    copy rate, bf16 → fp32 at 0.65 of it; half the traffic each way gives 0.79."""
    doc = json.loads((FIXTURES / "predict" / "zoo" / "cast-rates-h100.json").read_text())
    assert "H100" in doc["gpu"]
    assert of_copy(doc, "cast fp32->bf16 (.to)") == pytest.approx(grp.CAST_DOWN_OF_COPY,
                                                                    abs=0.01)
    assert of_copy(doc, "cast bf16->fp32 (.float)") == pytest.approx(grp.CAST_UP_OF_COPY,
                                                                       abs=0.01)
    assert of_copy(doc, "cast fp16->fp32 (.float)") == pytest.approx(grp.CAST_UP_OF_COPY,
                                                                       abs=0.01)
    assert abs(grp.CAST_OF_COPY - 0.788) < 0.001


@pytest.mark.parametrize("name", ["bert-held-h100-run", "moe-held-h100-run",
                                  "wavenet-h100-run"])
def test_other_families_bf16_casts_ran_at_the_cast_rate(name):
    """Three families' bf16 steps, recorded on the H100 before the rule, each ran a `to`
    group (their logits cast to fp32 for the loss and its gradient back): at 0.79 × the H100's
    copy rate, as the rule takes it."""
    run = zoo_run(name)
    bf16 = next(p for p in run.op_profiles if p.precision == "bf16")
    to = next(g for g in bf16.groups if g.unit == "to" and g.op_class == "elementwise")
    rate = to.bytes / (to.kernel_us * 1e-6) / 1e9
    assert rate / h100_rates(SPECS).roofs.memory_gbps == pytest.approx(grp.CAST_OF_COPY,
                                                                        abs=0.02)
