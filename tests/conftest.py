from __future__ import annotations

import functools
import json
from pathlib import Path

import pytest

FIXTURES = Path(__file__).parent / "fixtures"


@functools.cache
def gpu_count() -> int:
    from gpuaudit.hw import LiveNvml, NvmlUnavailable

    try:
        nvml = LiveNvml()
    except NvmlUnavailable:
        return 0
    try:
        return nvml.query("nvmlDeviceGetCount")
    finally:
        nvml.close()


def pytest_collection_modifyitems(config, items):
    if gpu_count() > 0:
        return
    skip = pytest.mark.skip(reason="needs an NVIDIA GPU and driver")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


def load_fixture(name: str, file: str = "inspect.json") -> dict:
    return json.loads((FIXTURES / name / file).read_text())
