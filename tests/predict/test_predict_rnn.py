"""cuDNN's RNNs under a precision change: their kernels overlap on streams of their own, and
from a 16-bit step the group takes its units' time alone in the other precision for the
union of its kernels (`predict.groups`), checked on an LSTM recorded on an H200."""


import pytest

from gpuaudit.predict import Change, load_profile, predict
from gpuaudit.predict import timeline as tlm
from gpuaudit.predict.groups import union_ms
from gpuaudit.specs.catalog import load_catalog
from tests.conftest import FIXTURES
from tests.support.predict import h200_rates, zoo_run

ZOO = FIXTURES / "predict" / "zoo"
SPECS = load_catalog()
RATES = h200_rates(SPECS)


def test_an_rnns_overlapping_kernels_take_its_time_alone_in_the_other_precision():
    """The bidirectional LSTM recorded in bf16 on an H200: its two directions' kernels
    overlap (their union is well under their sum), and its call timed alone took more than
    that union. To fp32 its group takes the fp32 call's time alone for that union, and the
    step comes out near the fp32 step the same recording profiled (the ratio of the two
    timings alone made it 16.7 % fast on a steady host); from fp32 the ratio stays."""
    run = zoo_run("lstm-h200-run")
    prof = load_profile(run, "lstm-tagger/bf16")
    record = prof.record
    i, group = next((i, g) for i, g in enumerate(record.groups) if g.op_class == "rnn")
    covered = union_ms(record, i)
    assert covered is not None and covered < 0.9 * group.kernel_us / 1e3
    (unit,) = [u for u in record.timed if u.op_class == "rnn"]
    alone = {t.precision: t.ms for t in unit.times if t.batch_scale == 1.0}
    assert alone["bf16"] > covered  # alone, slower than its union in the step
    p = predict(prof, RATES, Change(precision="fp32"), SPECS)
    rnn = next(c for c in p.classes if c.op_class == "rnn")
    # the union of its kernels taken for the fp32 call's time alone (its kernels each their
    # share of that union), once a step; timed back to back (this recording kept no kernels'
    # own time), less the device's gap the replay puts before each of its kernels
    gap_ms = tlm.queued_gap_us(record.timeline) / 1e3
    assert unit.count == 1 and rnn.predicted_ms == pytest.approx(
        alone["fp32"] - group.kernels * gap_ms, rel=1e-3)
    fp32 = next(o for o in run.op_profiles if o.precision == "fp32")
    assert p.step_ms == pytest.approx(fp32.step_ms, rel=0.05)
    back = predict(load_profile(run, "lstm-tagger/fp32"), RATES, Change(precision="bf16"),
                   SPECS)
    assert "its units timed alone ×" in next(c for c in back.classes
                                             if c.op_class == "rnn").basis
