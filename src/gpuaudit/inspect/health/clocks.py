"""Clocks and heat: what holds the clocks down now, and how close the GPU runs to its limits."""

from __future__ import annotations

from collections.abc import Iterator

from gpuaudit.model import Finding, Severity

from .base import GpuCtx, is_busy, is_idle, ok, problem

# Clock-event reasons that mean the hardware itself is holding clocks down.
HW_SLOWDOWNS = {
    "hw_slowdown": ("clocks.hw-slowdown", "HW slowdown is active (thermal, power brake or "
                    "power-supply event)"),
    "hw_thermal_slowdown": ("clocks.hw-thermal-slowdown", "HW thermal slowdown is active: "
                            "the GPU is too hot"),
    "hw_power_brake_slowdown": ("clocks.hw-power-brake", "HW power-brake slowdown is active: "
                                "an external power-brake signal (power supply or chassis)"),
}
# Reasons that explain clocks below max with nothing wrong in the settings.
EXPLAINED = {"gpu_idle", "sw_power_cap", "sw_thermal_slowdown", *HW_SLOWDOWNS}
# Under load, an SM clock below this share of its max needs a reason.
HELD_SHARE = 0.90
TEMP_MARGIN_C = 5
RESET_CLOCKS = ("sudo nvidia-smi -rgc (locked GPU clocks), sudo nvidia-smi -rmc (locked "
                "memory clocks), sudo nvidia-smi -rac (application clocks)")


def check_clocks(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    clk = g.clocks
    reasons = clk.event_reasons
    if reasons is None:
        return
    evidence = {"event_reasons": ",".join(reasons) or "none", "sm_mhz": clk.sm_mhz,
                "sm_max_mhz": clk.sm_max_mhz}
    problems = [
        problem(code, Severity.FAIL, g, message,
                "Check cooling, fans and the power supply; the GPU runs below its clocks "
                "until the cause is gone. On a rented node, report it and move.", **evidence)
        for code, message in (HW_SLOWDOWNS[r] for r in reasons if r in HW_SLOWDOWNS)
    ]
    if "sw_thermal_slowdown" in reasons:
        problems.append(problem(
            "clocks.sw-thermal-slowdown", Severity.WARN, g,
            "the driver is slowing clocks to keep the GPU under its temperature target",
            "Improve airflow or lower the load; check the fans.", **evidence))
    if "sw_power_cap" in reasons and is_idle(g):
        problems.append(problem(
            "clocks.power-cap-while-idle", Severity.WARN, g,
            "the software power cap is holding clocks down while the GPU is idle",
            "An idle GPU should not reach its power cap: check the power limit "
            "(nvidia-smi -q -d POWER) and whether another tenant is using the GPU.",
            power_draw_w=g.power.draw_w, power_limit_w=g.power.limit_w, **evidence))
    if is_busy(g) and clk.sm_mhz is not None and clk.sm_max_mhz and \
            clk.sm_mhz < HELD_SHARE * clk.sm_max_mhz and not EXPLAINED & set(reasons):
        why = "application clocks are set below max" if "applications_clocks_setting" in \
            reasons else "no thermal or power reason is active: the clocks are locked or capped"
        problems.append(problem(
            "clocks.held-below-max", Severity.WARN, g,
            f"under load the SM clock is {clk.sm_mhz} MHz of {clk.sm_max_mhz} MHz and {why}",
            f"Reset them: {RESET_CLOCKS}; without root, ask the provider. Every kernel runs "
            f"at {clk.sm_mhz / clk.sm_max_mhz:.0%} of its clock until then.", **evidence))
    problems.extend(_application_clocks(c))
    yield from problems or [
        ok("clocks", g, f"no slowdown active (reasons: {evidence['event_reasons']})",
           **evidence)]


def _application_clocks(c: GpuCtx) -> Iterator[Finding]:
    """Application clocks lowered below their default: every kernel runs slower (Azure NHC
    resets them to max before it passes a node)."""
    g = c.gpu
    clk = g.clocks
    lowered = [(kind, now, default) for kind, now, default in (
        ("graphics", clk.applications_graphics_mhz, clk.default_applications_graphics_mhz),
        ("memory", clk.applications_memory_mhz, clk.default_applications_memory_mhz))
        if now is not None and default is not None and now < default]
    if lowered:
        listing = ", ".join(f"{kind} {now} MHz (default {default} MHz)"
                            for kind, now, default in lowered)
        yield problem("clocks.applications-lowered", Severity.WARN, g,
                      f"application clocks are set below their defaults: {listing}",
                      "Reset them: sudo nvidia-smi -rac (or -ac to the defaults); without "
                      "root, ask the provider.",
                      applications=listing)


def check_temperature(c: GpuCtx) -> Iterator[Finding]:
    g = c.gpu
    t = g.thermal
    if t.gpu_c is None or t.slowdown_c is None:
        return
    evidence = {"gpu_c": t.gpu_c, "slowdown_c": t.slowdown_c}
    if t.gpu_c >= t.slowdown_c:
        yield problem("thermal.at-slowdown", Severity.FAIL, g,
                      f"GPU at {t.gpu_c} °C, at or over its slowdown threshold "
                      f"{t.slowdown_c} °C", "Check cooling now; clocks are being cut.",
                      **evidence)
    elif t.gpu_c >= t.slowdown_c - TEMP_MARGIN_C:
        yield problem("thermal.near-slowdown", Severity.WARN, g,
                      f"GPU at {t.gpu_c} °C, within {TEMP_MARGIN_C} °C of its slowdown "
                      f"threshold {t.slowdown_c} °C",
                      "Check airflow and fans; under sustained load it will throttle.",
                      **evidence)
    else:
        yield ok("thermal", g, f"{t.gpu_c} °C, slowdown at {t.slowdown_c} °C", **evidence)
