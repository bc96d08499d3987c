"""Host↔device copies: the rule that finds them from PCIe telemetry or from a profile, and
whether the host memory they come from is pageable. See rules.py for how shares and gains are
computed."""

from __future__ import annotations

from .evidence import Signals, gpu_obs, gpu_source, obs, trace_source
from .findings import Proposal, Result, amdahl
from .findings import finding as _finding
from .findings import pct as _pct
from .rules import COPY_RATE, GB, PINNED_OF_LINK, PINNED_SETTINGS


def copy_bound(sig: Signals) -> list[Result]:
    """Host↔device copies dominate: ≥ 1 GB/s over PCIe while the SMs work under half the
    time and the GPU is busy without them (NVML utilization − SM activity ≥ 10 points, or
    utilization ≥ 50 %); pageable memory when the rate is under 30 % of the link or the
    profiler shows pageable copies."""
    t = sig.trace
    pageable_us = sum(v for k, v in (t.memcpy_time_us.items() if t else ()) if "pageable" in k)
    for g in sig.gpus:
        u, s = g.utilization_pct, g.sm_activity_pct
        rate = g.pcie_bytes_per_s
        if u is None or rate is None or rate < COPY_RATE:
            continue
        s_eff = s if s is not None else 0.0
        if s_eff >= 50 or not (u - s_eff >= 10 or u >= 50):
            continue
        share = 1 - s_eff / 100
        link = g.pcie_link_bytes_per_s
        pinned = link * PINNED_OF_LINK if link else None
        pageable = (pageable_us > 0) or (pinned is not None and rate < 0.3 * link)  # type: ignore[operator]
        ev = [obs("pcie_rate", rate / GB, "GB/s", gpu_source(g), 2),
              gpu_obs(g, "utilization_pct"), gpu_obs(g, "sm_activity_pct")]
        if link:
            ev.append(obs("pcie_link", link / GB, "GB/s", f"PCIe gen {g.pcie_gen} x"
                          f"{g.pcie_width} as trained now, one direction"))
        if t and pageable_us:
            ev.append(obs("pageable_copy_time", pageable_us / max(t.window_us, 1), "of window",
                          trace_source(t)))
        if pageable and pinned:
            speed = max(pinned / rate, 1.0)
            msg = (f"host↔device copies fill the GPU's time at {rate / GB:.1f} GB/s, "
                   f"{_pct(rate / link)} of the link: pageable host memory")  # type: ignore[operator]
            props: tuple[Proposal, ...] = (Proposal(
                action="pinned host memory and asynchronous copies",
                settings=PINNED_SETTINGS,
                gain_low=amdahl(share, speed / 2), gain_high=amdahl(share, speed),
                gain_basis=f"copies at {rate / GB:.1f} GB/s could run at ~{pinned / GB:.0f} "
                           f"GB/s pinned ({PINNED_OF_LINK:.0%} of the link)"),
                     _copy_less(share))
        else:
            msg = (f"host↔device copies fill the GPU's time at {rate / GB:.1f} GB/s"
                   + (f", {_pct(rate / link)} of the link: the link is the limit" if link
                      else ""))
            props = (_copy_less(share),)
            if s_eff >= 5:  # something to hide the copies behind
                props += (Proposal(
                    action="overlap copies with compute (prefetch the next batch on a side "
                           "stream)",
                    settings="x = x.to('cuda', non_blocking=True)  # from pinned memory",
                    gain_high=amdahl(min(share, s_eff / 100)),
                    gain_basis="hides copies behind compute: at most the compute time"),)
        return [Result(_finding("copy-bound", "Copy bound (host↔device)", share, "high", msg,
                                ev, g.index), props)]
    return _copy_bound_from_trace(sig)


def _copy_bound_from_trace(sig: Signals) -> list[Result]:
    """The profiled steps spend ≥ 30 % of the GPU's span in host↔device copies (an H200 job
    copying 128 MiB pageable batches read NVML utilization 44 % and SM activity 35 %: too
    little for the telemetry test, while its trace showed 60 % non-compute time)."""
    t = sig.trace
    if not (t and t.cuda and t.devices):
        return []
    keys = [k for k in t.memcpy_time_us if k.startswith(("HtoD", "DtoH"))]
    copy_us = sum(t.memcpy_time_us[k] for k in keys)
    d = t.devices[0]
    share = min(d.share(copy_us), 1.0)
    if share < 0.3:
        return []
    pageable_us = sum(t.memcpy_time_us[k] for k in keys if "pageable" in k)
    moved = sum(t.memcpy_bytes.get(k, 0) for k in keys)
    rate = moved / (copy_us / 1e6) if copy_us and moved else None
    ev = [obs("copy_time", share, "of GPU span", trace_source(t)),
          obs("pageable_copy_time", pageable_us / copy_us, "of copy time", trace_source(t))]
    if rate:
        ev.append(obs("copy_rate", rate / GB, "GB/s", trace_source(t), 2))
    g = sig.gpus[0] if sig.gpus else None
    link = g.pcie_link_bytes_per_s if g else None
    props: tuple[Proposal, ...] = (_copy_less(share),)
    if pageable_us >= 0.5 * copy_us:
        msg = (f"host↔device copies take {_pct(share)} of the GPU's time, from pageable host "
               "memory" + (f" at {rate / GB:.1f} GB/s" if rate else ""))
        pinned_rate = link * PINNED_OF_LINK if link else None
        speed = pinned_rate / rate if pinned_rate and rate else None
        props = (Proposal(
            action="pinned host memory and asynchronous copies",
            settings=PINNED_SETTINGS,
            gain_low=amdahl(share, speed / 2) if speed and speed > 2 else None,
            gain_high=amdahl(share, speed) if speed and speed > 1 else amdahl(share),
            gain_basis=(f"copies at {rate / GB:.1f} GB/s could run at ~"
                        f"{pinned_rate / GB:.0f} GB/s pinned" if speed and pinned_rate and rate
                        else "pinned copies overlap compute; the link rate was not read")),
            *props)
    else:
        msg = f"host↔device copies take {_pct(share)} of the GPU's time"
    return [Result(_finding("copy-bound", "Copy bound (host↔device)", share, "high", msg, ev,
                            d.device), props)]


def _copy_less(share: float) -> Proposal:
    return Proposal(action="move less data: keep tensors on the GPU between steps, send "
                           "uint8/bf16 instead of float32, decode on the GPU",
                    gain_high=amdahl(share / 2),
                    gain_basis="half the bytes assumed (float32 → bf16)")
