"""Layer 3: the only code that touches hardware (NVML, the host's files, torch's device)."""

from .gpus import NvmlFacts, read_nvml
from .host import read_host
from .nvml import NvmlSource, NvmlUnavailable, RecordingNvml, ReplayNvml, Unsupported
from .nvml_live import LiveNvml
from .snapshot import snapshot_from, take_snapshot

__all__ = [
    "LiveNvml",
    "NvmlFacts",
    "NvmlSource",
    "NvmlUnavailable",
    "RecordingNvml",
    "ReplayNvml",
    "Unsupported",
    "read_host",
    "read_nvml",
    "snapshot_from",
    "take_snapshot",
]
