"""What every suite gets: the machine, the chosen GPUs, the profile, a progress callback."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from enum import Enum
from typing import TypeVar

from gpuaudit.hw.torch_env import CudaDevice
from gpuaudit.model import Gpu, Machine
from gpuaudit.specs import GpuSpec, lookup

T = TypeVar("T")


class Profile(str, Enum):
    QUICK = "quick"  # the whole micro suite on one H200 in ≤ 60 s, start-up included
    STANDARD = "standard"  # ≤ 5 min
    FULL = "full"  # as long as it takes to find the best


def _quiet(_: str) -> None:
    pass


@dataclass(frozen=True)
class BenchContext:
    machine: Machine
    # The CUDA devices to benchmark, each with its NVML index (as `inspect` numbers GPUs).
    devices: tuple[tuple[CudaDevice, int], ...]
    profile: Profile = Profile.QUICK
    step: Callable[[str], None] = _quiet  # says what is being measured now (progress)
    # Collective sizes in bytes, (smallest, largest); None: the profile's default.
    size_range: tuple[int, int] | None = None
    timeout_s: float = 300.0
    options: dict[str, object] = field(default_factory=dict)

    @property
    def on_gpu(self) -> bool:
        return bool(self.devices)

    def gpu(self, nvml_index: int) -> Gpu | None:
        return next((g for g in self.machine.gpus if g.index == nvml_index), None)

    def spec(self, nvml_index: int) -> GpuSpec | None:
        g = self.gpu(nvml_index)
        return lookup(nvml_name=g.name, pci_device_id=g.pci_device_id) if g else None

    def pick(self, quick: T, standard: T, full: T) -> T:
        """The knob for this run's profile."""
        return {Profile.QUICK: quick, Profile.STANDARD: standard, Profile.FULL: full}[self.profile]
