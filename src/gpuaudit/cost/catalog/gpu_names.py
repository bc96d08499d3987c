"""What a SkyPilot row says about its GPU: the specs id, the memory per GPU, and why.

The clouds do not write their GPUs the same way. SkyPilot's own names (`H100`, `A100-80GB`)
never say PCIe or SXM; marketplaces write the form factor and memory into the name
(Hyperstack `A100-80G-PCIe`, Spheron `H100_PCIE_BAREMETAL`, Cudo `H100-SXM`); `GpuInfo` is a
Python dict literal (most), JSON (PrimeIntellect, Spheron), a dict with JSON's `null`
(Hyperstack), lower-case keys (DigitalOcean) or a bare name (Azure, Paperspace); its
`SizeInMiB` is MiB per GPU (most), GiB per GPU (RunPod, Shadeform: 80 for an 80 GB A100) or
the whole machine's (Vast, PrimeIntellect: 8 x A100 80 GB = 655360). Each of these is read
as the cloud writes it, so that the offer names the part it sells.
"""

from __future__ import annotations

import ast
import re
from typing import Any

from .families import FORM_FACTOR_LABEL, stated_form_factor, with_form_factor

# SkyPilot accelerator names → specs ids. Names not here keep their lower-cased form and
# validation reports them as unknown GPUs.
SKYPILOT_GPUS: dict[str, str] = {
    "V100": "v100-sxm2-16gb", "V100-32GB": "v100-sxm2-32gb", "T4": "t4", "A10": "a10",
    "A10G": "a10g", "A40": "a40", "A100": "a100-sxm4-40gb", "A100-80GB": "a100-sxm4-80gb",
    "L4": "l4", "L40": "l40", "L40S": "l40s", "H100": "h100-sxm", "H100-MEGA": "h100-sxm",
    "H100-NVL": "h100-nvl", "H200": "h200-sxm", "B200": "b200", "RTX4090": "rtx-4090",
    "RTX3090": "rtx-3090",
}

# Clouds whose GpuInfo SizeInMiB is the whole machine's GPU memory, not one GPU's.
MEMORY_PER_MACHINE = frozenset({"vast", "primeintellect"})

# The part with the other memory size, chosen by the memory GpuInfo states (GiB): an A100
# with 80 GiB is the 80 GB part whatever the accelerator name says.
_BY_MEMORY: dict[str, tuple[float, str]] = {
    "a100-sxm4-40gb": (60.0, "a100-sxm4-80gb"), "a100-pcie-40gb": (60.0, "a100-pcie-80gb"),
    "v100-sxm2-16gb": (24.0, "v100-sxm2-32gb"), "v100-pcie-16gb": (24.0, "v100-pcie-32gb"),
}
_SMALLER = {big: (limit, small) for small, (limit, big) in _BY_MEMORY.items()}

# Words of an accelerator name that say nothing about which GPU it is.
_NOISE = {"NVIDIA", "TESLA", "GEFORCE", "BAREMETAL", "NVLINK", "HBM3", "HBM3E", "SECURE"}
_FORM_WORDS = {"PCIE": "pcie", "PCI": "pcie", "SXM": "sxm", "SXM2": "sxm", "SXM4": "sxm",
               "SXM5": "sxm", "NVL": "nvl"}
_MEMORY_WORD = re.compile(r"(\d+)GB?")


def parse_name(acc: str) -> tuple[str, str | None, float | None]:
    """(specs id, form factor the name states, memory GB the name states) of an accelerator
    name as a cloud writes it."""
    if acc in SKYPILOT_GPUS:
        return SKYPILOT_GPUS[acc], None, None
    form: str | None = None
    memory: float | None = None
    words = []
    for word in re.split(r"[-_\s]+", acc.strip().upper()):
        if not word or word in _NOISE:
            continue
        if word in _FORM_WORDS:
            form = _FORM_WORDS[word]
        elif (m := _MEMORY_WORD.fullmatch(word)) and words:
            memory = float(m.group(1))
        else:
            words.append(word)
    base = "-".join(words)
    for name in ((f"{base}-{memory:g}GB" if memory else None), base):
        if name and name in SKYPILOT_GPUS:
            return SKYPILOT_GPUS[name], form, memory
    return (base or acc.strip().upper()).lower(), form, memory


def _literal(text: str) -> Any:
    """A GpuInfo cell: a Python literal, or JSON (whose null/true/false Python lacks)."""
    try:
        return ast.literal_eval(text)  # a literal, never code
    except (ValueError, SyntaxError):
        fixed = re.sub(r"\b(null|true|false)\b",
                       lambda m: {"null": "None", "true": "True", "false": "False"}[m[1]],
                       text)
        return ast.literal_eval(fixed)


def _get(d: Any, key: str) -> Any:
    """d[key], the key matched without regard to case (DigitalOcean writes 'gpus')."""
    if not isinstance(d, dict):
        raise KeyError(key)
    for k, v in d.items():
        if isinstance(k, str) and k.casefold() == key.casefold():
            return v
    raise KeyError(key)


def gpu_info(text: str) -> tuple[str, float | None] | None:
    """(GPU name, SizeInMiB as written) of a GpuInfo cell; None when it is a bare name or
    unreadable (its name is then the cell itself)."""
    try:
        info = _literal(text)
        gpu = _get(info, "Gpus")[0]
        size = _get(_get(gpu, "MemoryInfo"), "SizeInMiB")
        name = str(_get(gpu, "Name")) if any(
            isinstance(k, str) and k.casefold() == "name" for k in gpu) else ""
    except (ValueError, SyntaxError, KeyError, IndexError, TypeError):
        return None
    try:
        return name, float(size)
    except (TypeError, ValueError):
        return name, None


def identify(acc: str, instance: str, gpu_info_text: str, count: int, provider: str,
             notes: list[str]) -> tuple[str, float | None]:
    """The specs id and memory per GPU (GiB) of a row's GPUs; what was read unusually is
    appended to `notes`."""
    model, name_form, name_memory = parse_name(acc)
    memory: float | None = None
    info_name = ""
    if gpu_info_text:
        info = gpu_info(gpu_info_text)
        if info is None:
            if not re.fullmatch(r"[\w .+-]+", gpu_info_text):
                notes.append("GpuInfo unreadable")
            info_name = gpu_info_text  # a bare name (Azure, Paperspace)
        else:
            info_name, size = info
            memory = _memory_gib(size, count, provider, notes)
    if memory is None and name_memory is not None:
        memory = name_memory * 1e9 / 2**30  # the name says GB: decimal, as datasheets
        memory = round(memory, 1)
    by_instance = stated_form_factor(instance)
    form = by_instance or name_form or stated_form_factor(info_name)
    base = model
    model = with_form_factor(model, form)
    if by_instance and model != base:
        notes.append(f"GPU {model}: the instance name says {FORM_FACTOR_LABEL[by_instance]},"
                     f" SkyPilot's accelerator name {acc!r} does not")
    if memory is not None:
        if model in _BY_MEMORY and memory >= _BY_MEMORY[model][0]:
            model = _BY_MEMORY[model][1]
            notes.append(f"GPU {model}: GpuInfo says {memory:g} GiB per GPU")
        elif model in _SMALLER and memory < _SMALLER[model][0]:
            model = _SMALLER[model][1]
            notes.append(f"GPU {model}: GpuInfo says {memory:g} GiB per GPU")
    return model, memory


def _memory_gib(size: float | None, count: int, provider: str, notes: list[str]
                ) -> float | None:
    if size is None or size <= 0:
        notes.append("GpuInfo gives no GPU memory")
        return None
    if provider in MEMORY_PER_MACHINE and count > 1:
        size /= count
        notes.append(f"GpuInfo memory is the machine's ({count} GPUs): divided by {count}")
    if size < 1024:
        # No GPU has under a GiB: this cloud writes GiB under SizeInMiB (RunPod: 80).
        notes.append(f"GpuInfo memory {size:g} read as GiB (written as MiB)")
        return round(size, 1)
    return round(size / 1024, 1)
