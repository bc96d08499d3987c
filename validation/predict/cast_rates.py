"""A cast's rate against the memory copy's, on one GPU: what a precision change takes for the
casts only a 16-bit step runs (`predict.groups.CAST_OF_COPY`; kept as
tests/fixtures/predict/zoo/cast-rates-h100.json).

Each case runs on contiguous tensors of 16 MiB to 1 GiB of fp32 (the 16-bit side half that),
timed with CUDA events: 3 runs to warm up, the median of 30. Bytes are what the kernel must
move (a cast of n elements between fp32 and a 16-bit type: 6n, either way). The small sizes
time the launch more than the traffic; the 1 GiB rows give the rates.

    python3 validation/predict/cast_rates.py OUT.json
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script
from validation.predict.cuda_events import median_ms, probe_main

SIZES_MIB = (16, 64, 256, 1024)
WARM_UP, TIMED = 3, 30


def cases(n: int) -> dict[str, tuple[Callable[[], Any], int]]:
    """Each case's call and the bytes it moves, at `n` fp32 elements."""
    import torch

    x32 = torch.randn(n, device="cuda")
    x16, xh = x32.to(torch.bfloat16), x32.to(torch.float16)
    y32, y16 = torch.empty_like(x32), torch.empty_like(x16)
    return {
        "copy fp32": (lambda: y32.copy_(x32), 8 * n),
        "copy bf16": (lambda: y16.copy_(x16), 4 * n),
        "cast fp32->bf16 (copy_)": (lambda: y16.copy_(x32), 6 * n),
        "cast bf16->fp32 (copy_)": (lambda: y32.copy_(x16), 6 * n),
        "cast fp32->bf16 (.to)": (lambda: x32.to(torch.bfloat16), 6 * n),
        "cast bf16->fp32 (.float)": (lambda: x16.float(), 6 * n),
        "cast fp32->fp16 (.to)": (lambda: x32.to(torch.float16), 6 * n),
        "cast fp16->fp32 (.float)": (lambda: xh.float(), 6 * n),
        "mul fp32": (lambda: x32 * 2.0, 8 * n),
        "mul bf16": (lambda: x16 * 2.0, 4 * n),
    }


def measure() -> dict[str, Any]:
    import torch

    rows = []
    for mib in SIZES_MIB:
        for name, (fn, moved) in cases(mib * 2**20 // 4).items():
            ms = median_ms(fn, TIMED, WARM_UP)
            rows.append({"case": name, "fp32_mb": mib, "ms": round(ms, 5), "bytes": moved,
                         "gbps": round(moved / ms / 1e6, 1)})
            print(f"{mib:5d} MiB {name:26s} {ms:8.4f} ms {moved / ms / 1e6:8.1f} GB/s",
                  file=sys.stderr, flush=True)
        torch.cuda.empty_cache()
    return {"gpu": torch.cuda.get_device_name(), "torch": torch.__version__, "rows": rows}


def of_copy(doc: dict[str, Any], case: str, mib: int = SIZES_MIB[-1]) -> float:
    """A case's rate ÷ the fp32 copy's, at `mib`."""
    rate = {r["case"]: r["gbps"] for r in doc["rows"] if r["fp32_mb"] == mib}
    return rate[case] / rate["copy fp32"]


if __name__ == "__main__":
    raise SystemExit(probe_main(sys.argv[1:], __doc__.strip().splitlines()[-1].strip(),
                                measure))
