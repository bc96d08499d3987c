"""Byte sizes, kept for older imports: what people type is read in `gpuaudit.parse` (one
grammar, docs/input.md), which also holds `human_bytes`."""

from __future__ import annotations

from gpuaudit.parse import human_bytes, size_bytes


def parse_bytes(text: str) -> int:
    """'64', '8K', '1M', '4G', '2GiB' → bytes; BadInputError otherwise (see parse.size_bytes)."""
    return size_bytes(text, "size")


__all__ = ["human_bytes", "parse_bytes"]
