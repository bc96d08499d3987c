"""Byte sizes as people write them, shared by every layer (binary multiples, as nccl-tests
and nvbandwidth size their buffers)."""

from __future__ import annotations


def human_bytes(n: int) -> str:
    """8 B, 64 KiB, 2 GiB."""
    for unit in ("B", "KiB", "MiB", "GiB", "TiB"):
        if n < 1024 or unit == "TiB":
            return f"{n:g} {unit}" if unit == "B" else f"{n:.4g} {unit}"
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
