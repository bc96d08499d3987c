"""Graphics rates from the spec catalog, for `bench render` and `recommend render`: pixel fill
= ROPs × boost clock, bilinear texture fill = texture units × boost clock (trilinear: half,
each trilinear sample being two bilinear ones), and whether the GPU has RT cores. Each comes
with its basis, or the reason there is none. Pure functions: tests check them exactly."""

from __future__ import annotations

from dataclasses import dataclass

from gpuaudit.specs.catalog import GpuSpec

SMS_PER_TPC = 2  # every NVIDIA architecture in the catalog, Volta to Blackwell


@dataclass(frozen=True)
class Rate:
    value: float | None  # GPixel/s, GTexel/s; None with `basis` saying why
    basis: str


def _cite(spec: GpuSpec, field: str) -> str:
    src = spec.source_of(field)
    return src.title.split(" (")[0] if src else "no source"


def _clock(spec: GpuSpec) -> tuple[float | None, str]:
    if spec.max_sm_clock_mhz is None:
        return None, f"the spec catalog holds no boost clock for the {spec.name}"
    mhz = spec.max_sm_clock_mhz
    return mhz, f"{mhz:g} MHz ({_cite(spec, 'max_sm_clock_mhz')})"


def graphics_share(spec: GpuSpec) -> tuple[float, str]:
    """The share of the GPU's SMs that run vertex and pixel shaders: 1 on graphics parts;
    4 of 132 on an H100/H200 SXM (two graphics-capable TPCs)."""
    if spec.graphics_tpcs is None:
        return 1.0, ""
    sms = spec.graphics_tpcs * SMS_PER_TPC
    if spec.sm_count is None:
        return 0.0, (f"only {spec.graphics_tpcs} TPCs of the {spec.name} run graphics "
                     f"({_cite(spec, 'graphics_tpcs')}), and its SM count is not in the catalog")
    return sms / spec.sm_count, (f"only {spec.graphics_tpcs} TPCs ({sms} of {spec.sm_count} SMs) "
                                 f"run graphics ({_cite(spec, 'graphics_tpcs')})")


def pixel_rate(spec: GpuSpec | None) -> Rate:
    """ROPs × boost clock, GPixel/s (one 32-bit pixel per ROP per clock)."""
    if spec is None:
        return Rate(None, "GPU not in the spec catalog")
    if spec.rops is None:
        return Rate(None, f"NVIDIA publishes no ROP count for the {spec.name}")
    clock, basis = _clock(spec)
    if clock is None:
        return Rate(None, basis)
    return Rate(spec.rops * clock / 1e3,
                f"{spec.rops} ROPs ({_cite(spec, 'rops')}) × {basis}")


def texel_rate(spec: GpuSpec | None, *, trilinear: bool = False) -> Rate:
    """Texture units that run graphics × boost clock, GTexel/s of bilinear samples; half that
    for trilinear."""
    if spec is None:
        return Rate(None, "GPU not in the spec catalog")
    if spec.texture_units is None:
        return Rate(None, f"NVIDIA publishes no texture unit count for the {spec.name}")
    clock, basis = _clock(spec)
    if clock is None:
        return Rate(None, basis)
    share, why = graphics_share(spec)
    if share == 0.0:
        return Rate(None, why)
    units = spec.texture_units * share
    text = (f"{units:g} texture units" + (f" ({why}; {spec.texture_units} in all)" if why
                                          else f" ({_cite(spec, 'texture_units')})")
            + f" × {basis}")
    value = units * clock / 1e3
    if trilinear:
        return Rate(value / 2, text + "; trilinear at half the bilinear rate")
    return Rate(value, text)


def rt_core_reason(spec: GpuSpec | None, gpu_name: str) -> tuple[bool, str]:
    """(has RT cores, why): the spec catalog's word on hardware ray tracing."""
    if spec is None:
        return False, f"{gpu_name} is not in the spec catalog: whether it has RT cores is unknown"
    if spec.rt_cores is None:
        return False, f"the spec catalog holds no RT core count for the {spec.name}"
    if spec.rt_cores == 0:
        return False, (f"the {spec.name} has no RT cores ({_cite(spec, 'rt_cores')}): a "
                       f"{spec.architecture.capitalize()} datacenter part, ray tracing runs on "
                       "its shader cores only")
    return True, f"{spec.rt_cores} RT cores ({_cite(spec, 'rt_cores')})"
