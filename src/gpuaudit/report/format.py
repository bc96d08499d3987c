"""Small formatters shared by every terminal view."""

from __future__ import annotations

from collections.abc import Sequence

NA = "n/a"


def gib(n_bytes: int | None) -> str:
    return NA if n_bytes is None else f"{n_bytes / (1 << 30):.1f} GiB"


def num(value: float | int | None, unit: str = "", digits: int = 0) -> str:
    if value is None:
        return NA
    text = f"{value:.{digits}f}" if isinstance(value, float) else str(value)
    return f"{text} {unit}".rstrip()


def ranges(values: Sequence[int]) -> str:
    """(0, 1, 2, 3, 8, 9) → '0-3,8-9', like nvidia-smi topo's CPU affinity column."""
    out: list[str] = []
    start = prev = None
    for v in sorted(values):
        if prev is not None and v == prev + 1:
            prev = v
            continue
        if start is not None:
            out.append(f"{start}-{prev}" if prev != start else f"{start}")
        start = prev = v
    if start is not None:
        out.append(f"{start}-{prev}" if prev != start else f"{start}")
    return ",".join(out)

