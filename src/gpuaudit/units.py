"""Byte sizes, kept for older imports: what people type is read in `gpuaudit.parse` (one
grammar, docs/input.md), which also holds `human_bytes`."""

from __future__ import annotations

from gpuaudit.parse import human_bytes, size_bytes


def parse_bytes(text: str) -> int:
    """'64', '8K', '1M', '4G', '2GiB' → bytes; BadInputError otherwise (see parse.size_bytes)."""
    return size_bytes(text, "size")


def parse_percent(text: str) -> float:
    """'5%', '5', '0.5 %' → 5.0, 5.0, 0.5 (a percentage, ≥ 0)."""
    s = text.strip().removesuffix("%").strip()
    try:
        value = float(s)
    except ValueError:
        raise ValueError(text) from None
    if not s or value != value or value in (float("inf"), float("-inf")) or value < 0:
        raise ValueError(text)
    return value


__all__ = ["human_bytes", "parse_bytes", "parse_percent"]
