"""A stand-in for nvidia-ml-py with the structs of nvml.h (x86-64 layouts) and a driver whose
misbehaviour a test can choose: how many GPM metric slots it writes, whether it reads or writes
past a field-values array. `LiveNvml` runs on it unchanged (installed as `pynvml`)."""

from __future__ import annotations

import ctypes
import threading
import time
import types
from typing import Any


class NVMLError(Exception):
    def __init__(self, code: int = 3) -> None:
        super().__init__(code)
        self.code = code

    def __str__(self) -> str:
        return {3: "Not Supported", 10: "Timeout"}.get(self.code, f"error {self.code}")


class NVMLError_Timeout(NVMLError):
    def __init__(self, code: int = 10) -> None:
        super().__init__(10)


class _Value(ctypes.Union):
    _fields_ = (("dVal", ctypes.c_double), ("uiVal", ctypes.c_uint), ("ulVal", ctypes.c_ulong),
                ("ullVal", ctypes.c_ulonglong), ("sllVal", ctypes.c_longlong),
                ("siVal", ctypes.c_int), ("usVal", ctypes.c_ushort))


class c_nvmlFieldValue_t(ctypes.Structure):
    _fields_ = (("fieldId", ctypes.c_uint32), ("scopeId", ctypes.c_uint32),
                ("timestamp", ctypes.c_int64), ("latencyUsec", ctypes.c_int64),
                ("valueType", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint), ("value", _Value))


class _MetricInfo(ctypes.Structure):
    _fields_ = (("shortName", ctypes.c_char_p), ("longName", ctypes.c_char_p),
                ("unit", ctypes.c_char_p))


class c_nvmlGpmMetric_t(ctypes.Structure):
    _fields_ = (("metricId", ctypes.c_uint), ("nvmlReturn", ctypes.c_uint),
                ("value", ctypes.c_double), ("metricInfo", _MetricInfo))


class Driver:
    """What the fake driver does; tests set the knobs."""

    def __init__(self) -> None:
        self.gpm_values: dict[int, float] = {2: 40.0}
        self.gpm_slots_written = 11  # how many metric slots nvmlGpmMetricsGet writes
        self.field_write_past = 0  # bytes written past the field-values array
        self.field_read_past: bytes | None = None  # the entry past the array, as NVML saw it
        self.events: list[tuple[int, int]] = []
        self.freed: list[int] = []
        self.shutdowns = 0
        self.busy = threading.Lock()
        self.overlaps = 0
        self.calls = 0


def make(driver: Driver | None = None) -> tuple[types.ModuleType, Driver]:
    drv = driver or Driver()
    samples = iter(range(1, 10**6))
    m = types.ModuleType("pynvml")

    def exclusive(fn):
        """Counts calls that arrive while another is in NVML (two threads at once)."""

        def wrapper(*args: Any) -> Any:
            if not drv.busy.acquire(blocking=False):
                drv.overlaps += 1
                return fn(*args)
            try:
                drv.calls += 1
                time.sleep(0.0005)
                return fn(*args)
            finally:
                drv.busy.release()

        return wrapper

    def gpm_metrics_get(ref: Any) -> int:
        req = ref._obj
        slots = (c_nvmlGpmMetric_t * drv.gpm_slots_written).from_address(
            ctypes.addressof(req.metrics))
        for i, slot in enumerate(slots):
            if i < req.numMetrics and slot.metricId in drv.gpm_values:
                slot.value = drv.gpm_values[slot.metricId] * (req.sample2 - req.sample1)
                slot.nvmlReturn = 0
            elif i < req.numMetrics:
                slot.nvmlReturn = 3
            else:
                slot.nvmlReturn = 3  # the driver fills slots nobody asked for
        return 0

    def field_values(handle: Any, count: Any, arr: Any) -> int:
        n = count.value
        base = ctypes.addressof(arr)
        size = ctypes.sizeof(c_nvmlFieldValue_t)
        # Driver 580 on an H200 touched the entry past the array (issue 19): read it.
        drv.field_read_past = ctypes.string_at(base + n * size, size)
        for v in arr[:n]:
            v.valueType, v.nvmlReturn = 3, 0
            v.value.ullVal = v.fieldId * 1000 + v.scopeId
        if drv.field_write_past:
            ctypes.memset(base + n * size, 0, drv.field_write_past)
        return 0

    def wait(_set: Any, _timeout: int) -> Any:
        if not drv.events:
            raise NVMLError_Timeout()
        gpu, code = drv.events.pop(0)
        return types.SimpleNamespace(device=f"h{gpu}", eventType=8, eventData=code)

    def check(ret: int) -> int:
        if ret != 0:
            raise NVMLError(ret)
        return ret

    pointers = {"nvmlGpmMetricsGet": gpm_metrics_get, "nvmlDeviceGetFieldValues": field_values}

    def shutdown() -> None:
        drv.shutdowns += 1

    m.__dict__.update(
        NVMLError=NVMLError, NVMLError_Timeout=NVMLError_Timeout,
        nvmlEventTypeXidCriticalError=8, NVML_GPM_METRICS_GET_VERSION=1,
        NVML_GPM_METRIC_MAX=210,
        c_nvmlFieldValue_t=c_nvmlFieldValue_t, c_nvmlGpmMetric_t=c_nvmlGpmMetric_t,
        c_nvmlGpmSample_t=ctypes.c_void_p,
        _nvmlGetFunctionPointer=lambda name: exclusive(pointers[name]),
        _nvmlCheckReturn=check,
        nvmlInit=lambda: None, nvmlShutdown=shutdown,
        nvmlDeviceGetCount=exclusive(lambda: 2),
        nvmlDeviceGetHandleByIndex=lambda i: f"h{i}",
        nvmlDeviceGetIndex=lambda h: int(h[1:]),
        nvmlDeviceGetName=exclusive(lambda h: "NVIDIA H200"),
        nvmlEventSetCreate=lambda: "set", nvmlEventSetFree=lambda s: None,
        nvmlDeviceRegisterEvents=lambda h, mask, s: None,
        nvmlEventSetWait_v2=wait,
        nvmlGpmSampleAlloc=lambda: next(samples),
        nvmlGpmSampleGet=lambda h, s: None,
        nvmlGpmSampleFree=drv.freed.append,
    )
    return m, drv
