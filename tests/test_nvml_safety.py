"""LiveNvml is safe by construction (issue 19), checked against a stand-in for nvidia-ml-py
whose driver misbehaves the way a test chooses (tests/fake_pynvml.py)."""

from __future__ import annotations

import ctypes
import logging
import sys
import threading

import pytest

from gpuaudit.hw.nvml import FIELD_VALUES, GPM_METRICS, XID_EVENTS, Dev, Unsupported
from gpuaudit.hw.nvml_live import (
    GPM_METRIC_SLOTS,
    GUARD_BYTES,
    GUARD_PATTERN,
    Guarded,
    LiveNvml,
    layout_problems,
)

from . import fake_pynvml

SPEC = "82:0,139:0,138:0"


@pytest.fixture
def nvml(monkeypatch):
    module, driver = fake_pynvml.make()
    monkeypatch.setitem(sys.modules, "pynvml", module)
    live = LiveNvml()
    yield live, driver
    live.close()


def test_field_values_leave_room_for_nvml_reading_the_entry_past_the_request(nvml):
    """The crash of issue 19: driver 580 touches the entry after the caller's array (an
    electric fence 8 bytes past it crashed, 40 bytes past did not). What it finds there must
    be our guard, not whatever the heap holds next."""
    live, driver = nvml
    got = live.query(FIELD_VALUES, Dev(0), SPEC)
    assert driver.field_read_past == bytes([GUARD_PATTERN]) * 40
    assert [e["value"] for e in got] == [82000, 139000, 138000]
    assert live.overruns == {}


def test_guard_behind_field_values_holds_a_whole_request_again():
    for count in (1, 37, 500):
        g = Guarded(fake_pynvml.c_nvmlFieldValue_t, count,
                    max(GUARD_BYTES, 40 * count))
        assert g.guard_bytes >= g.size and g.guard_bytes >= GUARD_BYTES
        assert g.overrun() == 0


def test_a_write_past_the_request_is_absorbed_counted_and_logged_once(nvml, caplog):
    live, driver = nvml
    driver.field_write_past = 40
    with caplog.at_level(logging.WARNING, "gpuaudit.nvml"):
        first = live.query(FIELD_VALUES, Dev(0), SPEC)
        live.query(FIELD_VALUES, Dev(1), SPEC)
    assert first[0]["value"] == 82000
    assert live.overruns == {FIELD_VALUES: 2}
    assert [r.getMessage() for r in caplog.records] == [
        f"NVML wrote 40 bytes past the 120 it was given in {FIELD_VALUES} (absorbed by a "
        "guard area)"]


def test_a_write_through_the_whole_guard_refuses_the_query_from_then_on(nvml):
    live, driver = nvml
    driver.field_write_past = GUARD_BYTES
    with pytest.raises(Unsupported, match="refused: NVML wrote past the guard area"):
        live.query(FIELD_VALUES, Dev(0), SPEC)
    driver.field_write_past = 0
    calls = driver.calls
    with pytest.raises(Unsupported, match="refused"):
        live.query(FIELD_VALUES, Dev(0), SPEC)
    assert driver.calls == calls  # not asked again


def test_gpm_request_has_room_for_more_metrics_than_the_binding_declares(nvml):
    """nvidia-ml-py 13.580 declares 210 metric slots, CUDA 13.0's nvml.h 333, and the version
    word does not tell them apart: a driver writing all its slots stays inside our request."""
    live, driver = nvml
    driver.gpm_slots_written = 333
    assert GPM_METRIC_SLOTS >= 333 > sys.modules["pynvml"].NVML_GPM_METRIC_MAX
    with pytest.raises(Unsupported, match="first GPM sample"):
        live.query(GPM_METRICS, Dev(0), "2,5")
    assert live.query(GPM_METRICS, Dev(0), "2,5") == {"2": 40.0, "5": "Not Supported"}
    assert live.overruns == {}


def test_gpm_samples_are_freed_exactly_once(nvml):
    live, driver = nvml
    with pytest.raises(Unsupported):
        live.query(GPM_METRICS, Dev(0), "2")
    live.query(GPM_METRICS, Dev(0), "2")
    live.query(GPM_METRICS, Dev(0), "2")
    with pytest.raises(Unsupported):
        live.query(GPM_METRICS, Dev(1), "2")
    assert driver.freed == [1, 2]  # each older sample once its interval was read
    live.close()
    live.close()
    assert sorted(driver.freed) == [1, 2, 3, 4]
    assert driver.shutdowns == 1


def test_a_failed_gpm_sample_is_freed_and_the_last_good_one_kept(monkeypatch):
    module, driver = fake_pynvml.make()

    def broken(handle, sample):
        raise module.NVMLError(999)

    monkeypatch.setitem(sys.modules, "pynvml", module)
    live = LiveNvml()
    with pytest.raises(Unsupported):
        live.query(GPM_METRICS, Dev(0), "2")  # sample 1 kept
    module.nvmlGpmSampleGet = broken
    with pytest.raises(Unsupported, match="error 999"):
        live.query(GPM_METRICS, Dev(0), "2")
    assert driver.freed == [2]
    live.close()
    assert driver.freed == [2, 1]


def test_nvml_is_reached_by_one_thread_at_a_time(nvml):
    live, driver = nvml
    errors = []

    def worker(gpu: int) -> None:
        try:
            for _ in range(30):
                live.query(FIELD_VALUES, Dev(gpu), SPEC)
                live.query("nvmlDeviceGetName", Dev(gpu))
        except Exception as exc:  # pragma: no cover - the assertion below says it
            errors.append(exc)

    threads = [threading.Thread(target=worker, args=(i % 2,)) for i in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert driver.calls == 4 * 30 * 2
    assert driver.overlaps == 0


def test_no_query_reaches_nvml_after_close(nvml):
    live, driver = nvml
    live.close()
    calls = driver.calls
    with pytest.raises(Unsupported, match="NVML is shut down"):
        live.query("nvmlDeviceGetName", Dev(0))
    with pytest.raises(Unsupported, match="NVML is shut down"):
        live.query(XID_EVENTS)
    assert driver.calls == calls


def test_xid_events_drain_the_event_set_without_blocking(nvml):
    live, driver = nvml
    driver.events = [(1, 79), (0, 48)]
    assert live.query(XID_EVENTS) == [{"gpu": 1, "code": 79}, {"gpu": 0, "code": 48}]
    assert live.query(XID_EVENTS) == []


def test_a_binding_struct_of_another_size_than_nvml_h_is_never_handed_to_nvml(monkeypatch):
    module, driver = fake_pynvml.make()

    class Short(ctypes.Structure):  # a binding that lost the value union
        _fields_ = (("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                    ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                    ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint))

    module.c_nvmlFieldValue_t = Short
    assert layout_problems(module) == {FIELD_VALUES: (
        "refused: nvidia-ml-py's c_nvmlFieldValue_t is 32 bytes, nvml.h's is 40 "
        "(NVML would write past it)")}
    monkeypatch.setitem(sys.modules, "pynvml", module)
    live = LiveNvml()
    with pytest.raises(Unsupported, match=r"32 bytes, nvml\.h's is 40"):
        live.query(FIELD_VALUES, Dev(0), SPEC)
    assert driver.calls == 0
    live.close()
