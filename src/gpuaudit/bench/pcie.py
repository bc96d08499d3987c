"""PCIe link rate math: what a link of a given generation and width can carry per direction.

Pure functions (no GPU): the reference that host↔device and PCIe peer copies are judged against.
"""

from __future__ import annotations

from gpuaudit.model import PcieLink

# Generation → (transfer rate per lane in GT/s, line-encoding efficiency).
# Gen1/2 use 8b/10b, Gen3-5 128b/130b; Gen6/7 are PAM4 with 256-byte FLITs of which 242 bytes
# carry data (the rest is CRC and FEC), the efficiency the PCI-SIG quotes.
_LANE: dict[int, tuple[float, float]] = {
    1: (2.5, 8 / 10),
    2: (5.0, 8 / 10),
    3: (8.0, 128 / 130),
    4: (16.0, 128 / 130),
    5: (32.0, 128 / 130),
    6: (64.0, 242 / 256),
    7: (128.0, 242 / 256),
}


def link_rate_gbps(gen: int | None, width: int | None) -> float | None:
    """Per-direction data rate in GB/s (10^9 B/s) after line encoding; None when unknown.

    Gen5 x16 = 32 GT/s × 128/130 × 16 lanes / 8 bits = 63.015 GB/s. Transaction-layer
    overhead (headers, flow control) is not subtracted: copies reach about 85-90 % of it.
    """
    if gen is None or width is None or width <= 0 or gen not in _LANE:
        return None
    gts, efficiency = _LANE[gen]
    return gts * efficiency * width / 8


def max_rate_gbps(pcie: PcieLink) -> float | None:
    """The rate the link should reach: its maximum generation and width."""
    return link_rate_gbps(pcie.gen_max, pcie.width_max)


def below_max_note(pcie: PcieLink) -> str | None:
    """A note when the link was seen below its maximum, None when at max or unknown."""
    gen, width = pcie.gen_current, pcie.width_current
    if gen is None or width is None or pcie.gen_max is None or pcie.width_max is None:
        return None
    if gen >= pcie.gen_max and width >= pcie.width_max:
        return None
    # GPUs drop the link generation when idle to save power, so a low generation at
    # inspection time is only a fault if it stays low under load; a narrow width is not idle.
    return (f"PCIe link was Gen{gen} x{width} at inspection, below its max Gen{pcie.gen_max} "
            f"x{pcie.width_max} (an idle GPU lowers the generation; a narrower width or a "
            "generation that stays low under load points at the slot, riser or BIOS)")
