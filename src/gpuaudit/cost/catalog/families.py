"""What instance names say about their GPUs: counts per family, GCP's machine-type → GPU
table, and the form factor (PCIe or SXM) a name states. Used by the SkyPilot reader (to map
rows) and by validation (to check rows of any source)."""

from __future__ import annotations

import re

# GCP machine type → the accelerator its price must be added to (SkyPilot keeps the same
# fixed table in sky/catalog/gcp_catalog.py). The count comes from the "-Ng" suffix.
GCP_FAMILY_GPU = {"a2-highgpu": "A100", "a2-megagpu": "A100", "a2-ultragpu": "A100-80GB",
                  "a3-highgpu": "H100", "a3-edgegpu": "H100", "a3-megagpu": "H100-MEGA",
                  "a3-ultragpu": "H200", "a4-highgpu": "B200"}
G2_L4_COUNT = {"g2-standard-4": 1, "g2-standard-8": 1, "g2-standard-12": 1,
               "g2-standard-16": 1, "g2-standard-32": 1, "g2-standard-24": 2,
               "g2-standard-48": 4, "g2-standard-96": 8}

# GPUs per instance for families whose names do not say it. Sources: AWS accelerated-computing
# instance pages, GCP GPU machine types, Azure ND/NC series pages (see docs/cost-catalog.md).
_FIXED_COUNTS: dict[tuple[str, str], int] = {
    **{("aws", it): n for it, n in {
        "p3.2xlarge": 1, "p3.8xlarge": 4, "p3.16xlarge": 8, "p3dn.24xlarge": 8,
        "p4d.24xlarge": 8, "p4de.24xlarge": 8, "p5.4xlarge": 1, "p5.48xlarge": 8,
        "p5e.48xlarge": 8, "p5en.48xlarge": 8, "p6-b200.48xlarge": 8,
    }.items()},
    **{("aws", f"{fam}.{size}"): n for fam in ("g5", "g6", "g6e") for size, n in {
        "xlarge": 1, "2xlarge": 1, "4xlarge": 1, "8xlarge": 1, "16xlarge": 1,
        "12xlarge": 4, "24xlarge": 4, "48xlarge": 8}.items()},
    **{("gcp", it): n for it, n in G2_L4_COUNT.items()},
    ("gcp", "a2-megagpu-16g"): 16,
    **{("azure", it.casefold()): n for it, n in {
        "Standard_NC6s_v3": 1, "Standard_NC12s_v3": 2, "Standard_NC24s_v3": 4,
        "Standard_NC24rs_v3": 4, "Standard_ND40rs_v2": 8, "Standard_ND96asr_v4": 8,
        "Standard_ND96amsr_A100_v4": 8, "Standard_NC24ads_A100_v4": 1,
        "Standard_NC48ads_A100_v4": 2, "Standard_NC96ads_A100_v4": 4,
        "Standard_NC40ads_H100_v5": 1, "Standard_NC80adis_H100_v5": 2,
        "Standard_ND96isr_H100_v5": 8, "Standard_ND96isr_H200_v5": 8,
    }.items()},
    # Alibaba Cloud: the counts of the price table cited in docs/cost-catalog.md.
    **{("alibaba", it): n for it, n in {
        "ecs.gn6i-c4g1.xlarge": 1, "ecs.gn6v-c8g1.2xlarge": 1, "ecs.gn6v-c8g1.8xlarge": 4,
        "ecs.gn6v-c8g1.16xlarge": 8, "ecs.gn6e-c12g1.3xlarge": 1, "ecs.gn6e-c12g1.12xlarge": 4,
        "ecs.gn6e-c12g1.24xlarge": 8, "ecs.gn7-c12g1.3xlarge": 1, "ecs.gn7-c13g1.13xlarge": 4,
        "ecs.gn7-c13g1.26xlarge": 8, "ecs.gn7e-c16g1.4xlarge": 1, "ecs.gn7e-c16g1.16xlarge": 4,
        "ecs.gn7e-c16g1.32xlarge": 8, "ecs.gn7i-c8g1.2xlarge": 1, "ecs.gn7i-c16g1.4xlarge": 1,
        "ecs.gn7i-c32g1.16xlarge": 2, "ecs.gn7i-c32g1.32xlarge": 4,
    }.items()},
}
# Names that state their GPU count: GCP a2/a3/a4 "-8g", Lambda "gpu_8x_", RunPod "8x_",
# Nebius "_8gpu-", Vast.ai (SkyPilot's names) "8x-".
_NAME_COUNT = (
    ("gcp", re.compile(r"a\d-[a-z]+gpu-(\d+)g(?:-nolssd)?")),
    ("lambda", re.compile(r"gpu_(\d+)x_.*")),
    ("runpod", re.compile(r"(\d+)x_.*")),
    ("nebius", re.compile(r".*_(\d+)gpu-.*")),
    ("vast", re.compile(r"(\d+)x-.*")),
)


def expected_gpu_count(provider: str, instance_type: str) -> int | None:
    """How many GPUs this instance type has, when known from its family; None otherwise."""
    p = provider.casefold()
    key = (p, instance_type.casefold() if p == "azure" else instance_type)
    if key in _FIXED_COUNTS:
        return _FIXED_COUNTS[key]
    for prov, pattern in _NAME_COUNT:
        m = pattern.fullmatch(instance_type)
        if p == prov and m:
            return int(m.group(1))
    return None


def gcp_gpu(instance: str) -> tuple[str, int] | None:
    """(SkyPilot accelerator name, count) of a GCP machine type priced without its GPUs."""
    if instance in G2_L4_COUNT:
        return "L4", G2_L4_COUNT[instance]
    m = re.fullmatch(r"(a\d-[a-z]+gpu)-(\d+)g(?:-nolssd)?", instance)
    if m and m.group(1) in GCP_FAMILY_GPU:
        return GCP_FAMILY_GPU[m.group(1)], int(m.group(2))
    return None


# Spec ids of the parts sold both ways: the SXM part ↔ the PCIe part of the same GPU.
PCIE_VARIANTS = {"a100-sxm4-40gb": "a100-pcie-40gb", "a100-sxm4-80gb": "a100-pcie-80gb",
                 "h100-sxm": "h100-pcie", "v100-sxm2-16gb": "v100-pcie-16gb",
                 "v100-sxm2-32gb": "v100-pcie-32gb"}
SXM_VARIANTS = {pcie: sxm for sxm, pcie in PCIE_VARIANTS.items()}
# The NVL parts (two PCIe cards bridged, more memory): what a name saying NVL sells.
NVL_VARIANTS = {"h100-sxm": "h100-nvl", "h100-pcie": "h100-nvl", "h200-sxm": "h200-nvl"}


def stated_form_factor(name: str) -> str | None:
    """"pcie", "sxm" or "nvl" when a name says it as a word of its own (Lambda
    gpu_1x_h100_pcie, gpu_8x_h100_sxm5; Vast 1x-A100_PCIE-..., 1x-H100_NVL-...; Nebius
    gpu-h100-sxm_...; RunPod A100 PCIe; Cudo ...-a100-pci_...), else None. SkyPilot's
    accelerator names never do (Lambda's PCIe H100 is just "H100")."""
    words = set(re.split(r"[^a-z0-9]+", name.casefold()))
    stated = {form for form, said in (("pcie", bool(words & {"pcie", "pci"})),
                                      ("sxm", any(re.fullmatch(r"sxm\d?", w) for w in words)),
                                      ("nvl", "nvl" in words)) if said}
    # Neither, or several (nonsense): the name does not tell.
    return stated.pop() if len(stated) == 1 else None


FORM_FACTOR_LABEL = {"pcie": "PCIe", "sxm": "SXM", "nvl": "NVL"}


def with_form_factor(gpu_model: str, form: str | None) -> str:
    """The spec id of `gpu_model`'s part in that form factor (unchanged when it has none)."""
    if form == "pcie":
        return PCIE_VARIANTS.get(gpu_model, gpu_model)
    if form == "sxm":
        return SXM_VARIANTS.get(gpu_model, gpu_model)
    if form == "nvl":
        return NVL_VARIANTS.get(gpu_model, gpu_model)
    return gpu_model
