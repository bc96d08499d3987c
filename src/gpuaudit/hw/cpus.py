"""CPU placement facts for host benchmarks: the CPUs of each NUMA node this process may run
on, and the last-level cache size (working sets must dwarf it). `root` is for a fake /sys."""

from __future__ import annotations

import glob
import os
import re
from pathlib import Path


def parse_cpulist(text: str) -> list[int]:
    """'0-3,8,10-11' → [0, 1, 2, 3, 8, 10, 11] (the kernel's cpulist format)."""
    cpus: list[int] = []
    for part in text.strip().split(","):
        if not part:
            continue
        lo, sep, hi = part.partition("-")
        cpus.extend(range(int(lo), int(hi) + 1) if sep else [int(lo)])
    return cpus


def numa_cpus(root: str = "/", allowed: set[int] | None = None) -> dict[int, list[int]]:
    """NUMA node → the CPUs of it this process may use (nodes without one are left out).
    Without NUMA information in sysfs: one node 0 with every allowed CPU."""
    allowed = set(os.sched_getaffinity(0)) if allowed is None else allowed
    nodes: dict[int, list[int]] = {}
    for path in glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*")):
        m = re.search(r"node(\d+)$", path)
        try:
            text = Path(path, "cpulist").read_text()
        except OSError:
            continue
        cpus = [c for c in parse_cpulist(text) if c in allowed]
        if m and cpus:
            nodes[int(m.group(1))] = cpus
    return dict(sorted(nodes.items())) or {0: sorted(allowed)}


def _size(text: str) -> int | None:
    m = re.match(r"^\s*(\d+)\s*([KMG]?)", text)
    if not m:
        return None
    return int(m.group(1)) * {"": 1, "K": 1 << 10, "M": 1 << 20, "G": 1 << 30}[m.group(2)]


def last_level_cache_bytes(root: str = "/") -> int | None:
    """The sum over distinct last-level caches (one per socket or CCX), or None."""
    seen: dict[str, int] = {}
    best_level = 0
    for index in glob.glob(os.path.join(root, "sys/devices/system/cpu/cpu[0-9]*/cache/index*")):
        try:
            level = int(Path(index, "level").read_text())
            kind = Path(index, "type").read_text().strip()
            size = _size(Path(index, "size").read_text())
            shared = Path(index, "shared_cpu_list").read_text().strip()
        except (OSError, ValueError):
            continue
        if kind == "Instruction" or size is None:
            continue
        if level > best_level:
            best_level, seen = level, {}
        if level == best_level:
            seen[shared] = size
    return sum(seen.values()) or None
