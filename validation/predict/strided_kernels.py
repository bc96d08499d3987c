"""Elementwise kernels at a decoder's shapes, fp32 against bf16, one operator each: those
whose operands share one dense layout against those with a slice, a broadcast, a repeat or
a transpose made contiguous among them (`workloads.tally.strided`; kept as
tests/fixtures/predict/zoo/strided-kernels-h100.json).

Each case is timed with CUDA events over 50 calls after 5 to warm up, at three shapes
(batch, heads, key/value heads, tokens, head size): a Qwen2-0.5B-like and a Llama-like layer
at 8 × 1,024 tokens, and a wider one at 16 × 2,048.

    python3 validation/predict/strided_kernels.py OUT.json
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script
from validation.predict.cuda_events import mean_ms, probe_main

SHAPES = ((8, 14, 2, 1024, 64), (8, 12, 4, 1024, 64), (16, 16, 4, 2048, 128))
WARM_UP, TIMED = 5, 50
# the cases whose operands share one dense layout; every other one has a strided operand
CONTIGUOUS = ("mul contiguous", "add contiguous", "mul on transposed")


def cases(shape: tuple[int, ...], dtype: Any, device: str = "cuda"
          ) -> dict[str, Callable[[], Any]]:
    """Each case's call at one shape and dtype (on `device`)."""
    import torch

    b, h, kv, t, d = shape

    def randn(*size: int) -> Any:
        return torch.randn(*size, device=device, dtype=dtype)

    q = randn(b, t, h * d).view(b, t, h, d).transpose(1, 2)
    k, x, flat = randn(b, kv, t, d), randn(b, h, t, d), randn(b, t, h * d)
    weight, row, repeated = randn(h * d), randn(b, t, 1), randn(b, kv, h // kv, t, d)
    return {
        "rotate_half cat": lambda: torch.cat((-x[..., d // 2:], x[..., :d // 2]), dim=-1),
        "neg of half": lambda: -x[..., d // 2:],
        "repeat_kv expand+reshape":
            lambda: k[:, :, None].expand(b, kv, h // kv, t, d).reshape(b, h, t, d),
        "transpose contiguous": lambda: q.contiguous(),
        "mul contiguous": lambda: x * x,
        "add contiguous": lambda: flat + flat,
        "mul on transposed": lambda: q * q,
        "mul broadcast weight (D)": lambda: flat * weight,
        "mul broadcast per row (B,T,1)": lambda: flat * row,
        "sum over repeated heads": lambda: repeated.sum(2),
        "mean over last dim": lambda: flat.mean(-1, keepdim=True),
    }


def measure() -> dict[str, Any]:
    import torch

    rows = []
    for shape in SHAPES:
        for dtype in (torch.float32, torch.bfloat16):
            for name, fn in cases(shape, dtype).items():
                rows.append({"shape": list(shape), "dtype": str(dtype), "case": name,
                             "ms": round(mean_ms(fn, TIMED, WARM_UP), 5)})
                print(rows[-1], file=sys.stderr, flush=True)
            torch.cuda.empty_cache()
    return {"gpu": torch.cuda.get_device_name(), "rows": rows}


def bf16_over_fp32(doc: dict[str, Any]) -> dict[tuple[str, tuple[int, ...]], float]:
    """Each case's bf16 time ÷ its fp32 time, per shape."""
    ms = {(r["case"], tuple(r["shape"]), r["dtype"]): r["ms"] for r in doc["rows"]}
    return {(case, shape): t / ms[(case, shape, "torch.float32")]
            for (case, shape, dtype), t in ms.items() if dtype == "torch.bfloat16"}


if __name__ == "__main__":
    raise SystemExit(probe_main(sys.argv[1:], __doc__.strip().splitlines()[-1].strip(),
                                measure))
