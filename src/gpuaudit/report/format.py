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


def human_bytes(n: int) -> str:
    """Binary units, as nccl-tests and nvbandwidth size their buffers: 8 B, 64 KiB, 2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.3g} {unit}"
        n /= 1024  # type: ignore[assignment]
    raise AssertionError("unreachable")


def parse_bytes(text: str) -> int:
    """'64', '8K', '1M', '4G', '2GiB' → bytes (binary multiples, as nccl-tests' -b/-e)."""
    s = text.strip().upper().removesuffix("IB").removesuffix("B")
    mult = {"K": 1 << 10, "M": 1 << 20, "G": 1 << 30, "T": 1 << 40}.get(s[-1:], 1)
    number = s[:-1] if s[-1:] in "KMGT" else s
    value = float(number)
    if value <= 0 or value * mult != int(value * mult):
        raise ValueError(text)
    return int(value * mult)
