"""Quantities as types: what a field named for its unit may hold, declared once and checked
by pydantic wherever a record is made or read back (a file, the store, a peer's answer).

Every float of a record is finite (`Record` refuses NaN and ±inf; machine facts keep what
NVML answered, see `base.Facts`). These add the physical bounds: nothing negative that counts
or lasts, nothing beyond what any GPU server can do (10^30 W, a clock of 10^9 MHz, a sample
taken next year). A value outside them in a document is bad input naming the field's path.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import Annotated

from pydantic import AfterValidator, Field

# GPUs of one machine: NVML numbers them from 0; `--gpus` reads up to 1023.
MAX_GPUS = 1024
MAX_U64 = 2**64 - 1
YEAR_S = 365 * 86400.0
# Clocks of different machines disagree; more than this ahead of ours is a damaged time.
FUTURE_SLACK = timedelta(days=1)


def _not_future(when: datetime) -> datetime:
    aware = when if when.tzinfo else when.replace(tzinfo=timezone.utc)
    if aware > datetime.now(timezone.utc) + FUTURE_SLACK:
        raise ValueError(f"{when.isoformat()} is in the future")
    return when


Count = Annotated[int, Field(ge=0, le=MAX_U64)]  # events, errors, items: never negative
Bytes = Annotated[int, Field(ge=0, le=MAX_U64)]
BytesPerS = Annotated[float, Field(ge=0, le=1e16)]  # 10 PB/s: beyond any link or memory
Seconds = Annotated[float, Field(ge=0, le=100 * YEAR_S)]  # a duration
Interval = Annotated[float, Field(gt=0, le=YEAR_S)]  # time between two samples
Watts = Annotated[float, Field(ge=0, le=100_000)]  # one GPU or board: ~1 kW today
Joules = Annotated[float, Field(ge=0, le=1e18)]  # an energy counter since the driver loaded
Mhz = Annotated[int, Field(ge=0, le=100_000)]
PcieGen = Annotated[int, Field(ge=0, le=32)]
PcieWidth = Annotated[int, Field(ge=0, le=64)]  # lanes
Celsius = Annotated[float, Field(ge=-273.15, le=1000)]
Pct = Annotated[float, Field(ge=0, le=100)]  # a share of time or capacity
Fraction = Annotated[float, Field(ge=0, le=1)]
CorePct = Annotated[float, Field(ge=0, le=100 * 65536)]  # % of one CPU core: 100 = one busy
GpuIndex = Annotated[int, Field(ge=0, lt=MAX_GPUS)]
Pid = Annotated[int, Field(ge=0, le=2**31 - 1)]
# A measured figure in its unit (GB/s, TFLOP/s, µs, samples/s): never negative, never beyond
# what any machine reaches in any of them.
Figure = Annotated[float, Field(ge=0, le=1e18)]
Moment = Annotated[datetime, AfterValidator(_not_future)]  # a time something happened
