"""Plain layers swept alone on a GPU: how batch norm's and a convolution's forward + backward
time follows their channels at a fixed N·H·W (`predict.retarget`'s batch-norm power and
`predict.convfit`'s terms cite these; tests/fixtures/predict/zoo/norm-sweep-h200.json).

Each configuration runs 3 times to warm up, then 20 (norm) or 10 (conv) times between two
CUDA events, the host in the loop: a configuration under about 0.3 ms (norm) or 0.6 ms (conv)
a call measures the host's launches, not the device, on the lent H200's host.

    python3 validation/predict/layer_sweeps.py norm OUT.json
    python3 validation/predict/layer_sweeps.py conv OUT.json [SECONDS]
    python3 validation/predict/layer_sweeps.py conv1d OUT.json [SECONDS]
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[2]))  # run as a script
from validation.predict.cuda_events import mean_ms

CHANNELS = (16, 24, 32, 48, 64, 96, 128, 192, 256, 384, 512, 768, 1024)


def norm(torch: Any) -> list[dict[str, Any]]:
    """BatchNorm2d and GroupNorm(32) forward + backward, bf16 (autocast) and fp32."""
    dev, rows = torch.device("cuda"), []
    for kind in ("bn", "gn"):
        for n, h in ((64, 32), (256, 32), (64, 64)):
            for c in CHANNELS[:-1]:
                if kind == "gn" and c % 32:
                    continue
                for dt in (torch.bfloat16, torch.float32):
                    x = torch.randn(n, c, h, h, device=dev, dtype=dt, requires_grad=True)
                    m = (torch.nn.BatchNorm2d(c) if kind == "bn" else
                         torch.nn.GroupNorm(32, c)).to(dev)
                    g = torch.randn_like(x)

                    def step(x: Any = x, m: Any = m, g: Any = g, dt: Any = dt) -> None:
                        with torch.autocast("cuda", dtype=torch.bfloat16,
                                            enabled=dt == torch.bfloat16):
                            y = m(x)
                        y.backward(g)
                    rows.append({"kind": kind, "n": n, "c": c, "hw": h * h, "dtype": str(dt),
                                 "ms": round(mean_ms(step, 20), 5),
                                 "elems": n * c * h * h})
    return rows


def _bf16_forward_backward(torch: Any, layer: Any, x: Any, g: Any) -> Callable[[], None]:
    """One call of `layer` on `x` under bf16 autocast and its backward from `g`."""
    def step() -> None:
        with torch.autocast("cuda", dtype=torch.bfloat16):
            y = layer(x)
        y.backward(g)
    return step


def conv(torch: Any, seconds: float) -> list[dict[str, Any]]:
    """Conv2d forward + backward (C → C channels, 3×3, 1×1 and 7×7 depthwise), bf16 autocast."""
    dev, rows, t0 = torch.device("cuda"), [], time.time()
    torch.backends.cudnn.benchmark = True
    for n, hw in ((64, 64), (64, 32), (64, 16), (256, 16), (128, 56), (128, 28), (128, 14),
                  (128, 7)):
        for k in (3, 1, 7):
            for c in CHANNELS[:1] + CHANNELS[2:]:  # 24 left out
                depthwise = k == 7
                if time.time() - t0 > seconds or (depthwise and hw < 14):
                    continue
                x = torch.randn(n, c, hw, hw, device=dev, requires_grad=True)
                layer = torch.nn.Conv2d(c, c, k, padding=k // 2,
                                        groups=c if depthwise else 1).to(dev)
                g = torch.randn(n, c, hw, hw, device=dev, dtype=torch.bfloat16)
                step = _bf16_forward_backward(torch, layer, x, g)
                rows.append({"n": n, "hw": hw, "k": k, "c": c, "dw": depthwise,
                             "ms": round(mean_ms(step, 10), 5),
                             "flops": 3 * 2 * n * hw * hw * c * (1 if depthwise else c) * k * k})
    return rows


def conv1d(torch: Any, seconds: float) -> list[dict[str, Any]]:
    """Conv1d forward + backward at N·L = 131,072 as WaveNet's layers run them, bf16 autocast:
    1×1 C → C and C → 4C, and kernel 2 C → 2C dilated (input padded on the left beforehand,
    so the output is as long as the unpadded input)."""
    dev, rows, t0 = torch.device("cuda"), [], time.time()
    torch.backends.cudnn.benchmark = True
    for n, length in ((16, 8192), (64, 2048)):
        for k, mult, dilation in ((1, 1, 1), (1, 4, 1), (2, 2, 1), (2, 2, 64), (2, 2, 512)):
            for c in (16, 32, 64, 96, 128, 192, 256, 384, 512):
                if time.time() - t0 > seconds:
                    continue
                pad = dilation * (k - 1)
                x = torch.randn(n, c, length + pad, device=dev, requires_grad=True)
                layer = torch.nn.Conv1d(c, mult * c, k, dilation=dilation).to(dev)
                g = torch.randn(n, mult * c, length, device=dev, dtype=torch.bfloat16)
                step = _bf16_forward_backward(torch, layer, x, g)
                rows.append({"n": n, "l": length, "k": k, "c": c, "c_out": mult * c,
                             "dilation": dilation, "ms": round(mean_ms(step, 10), 5),
                             "flops": 3 * 2 * n * length * c * mult * c * k})
    return rows


SWEEPS = {"norm": lambda torch, s: norm(torch), "conv": conv, "conv1d": conv1d}


def main(argv: list[str]) -> int:
    if len(argv) not in (2, 3) or argv[0] not in SWEEPS:
        print(f"usage: layer_sweeps.py {{{'|'.join(SWEEPS)}}} OUT.json [SECONDS]",
              file=sys.stderr)
        return 2
    import torch

    what, out = argv[0], Path(argv[1])
    rows = SWEEPS[what](torch, float(argv[2]) if len(argv) > 2 else 240.0)
    out.write_text(json.dumps(rows, indent=0))
    print(f"{what}: {len(rows)} configurations")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
