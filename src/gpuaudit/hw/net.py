"""Network interfaces and RDMA devices, from sysfs (/sys/class/net, /sys/class/infiniband) and
`ibv_devinfo` where it is installed. `root` lets tests point at a fake /sys tree."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path

from gpuaudit.model import Nic, RdmaPort

_PCI = re.compile(r"^[0-9a-f]{4}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-9a-f]$")
_RATE = re.compile(r"^\s*([\d.]+)\s*Gb/sec")


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:  # speed on a down or virtual link reads as EINVAL
        return None


def _int(text: str | None) -> int | None:
    try:
        return int(text) if text is not None else None
    except ValueError:
        return None


def _pci_address(device_path: str) -> str | None:
    """The PCI function a device hangs off: the last PCI address in its sysfs path (a virtio
    NIC is virtioN under its PCI function)."""
    found = [p for p in device_path.split("/") if _PCI.match(p)]
    return found[-1] if found else None


def rdma_ports(root: str = "/") -> list[RdmaPort]:
    """Every port of every RDMA device in /sys/class/infiniband."""
    base = Path(root, "sys/class/infiniband")
    ports: list[RdmaPort] = []
    for dev in sorted(base.iterdir()) if base.is_dir() else []:
        netdevs = tuple(sorted(p.name for p in (dev / "device/net").iterdir())) \
            if (dev / "device/net").is_dir() else ()
        firmware = _read(dev / "fw_ver")
        for port in sorted((dev / "ports").iterdir(), key=lambda p: _int(p.name) or 0) \
                if (dev / "ports").is_dir() else []:
            state = _read(port / "state")  # "4: ACTIVE"
            rate = _RATE.match(_read(port / "rate") or "")
            ports.append(RdmaPort(
                device=dev.name, port=_int(port.name) or 0,
                state=state.split(":", 1)[-1].strip() if state else None,
                rate_gbps=float(rate.group(1)) if rate else None,
                link_layer=_read(port / "link_layer"), netdevs=netdevs, firmware=firmware))
    return ports


def read_nics(root: str = "/", rdma: list[RdmaPort] | None = None) -> list[Nic]:
    """Every interface in /sys/class/net with its link speed, driver and PCI/NUMA place."""
    base = Path(root, "sys/class/net")
    rdma = rdma_ports(root) if rdma is None else rdma
    nics = []
    for iface in sorted(base.iterdir()) if base.is_dir() else []:
        unavailable: dict[str, str] = {}
        device = iface / "device"
        if iface.name == "lo" or _read(iface / "type") == "772":  # ARPHRD_LOOPBACK
            kind = "loopback"
        elif device.exists():
            kind = "physical"
        else:
            kind = "virtual"
        speed = _int(_read(iface / "speed"))
        operstate = _read(iface / "operstate")
        if speed is None or speed < 0:
            speed = None
            unavailable["speed_mbps"] = (
                "link down: no speed" if operstate == "down" and kind == "physical" else
                "the driver does not report a link speed"
                + (" (virtual device)" if kind != "physical" else ""))
        driver = pci = numa = None
        if device.exists():
            driver = os.path.basename(os.path.realpath(device / "driver")) \
                if (device / "driver").exists() else None
            real = os.path.realpath(device)
            pci = _pci_address(real)
            numa = _int(_read(device / "numa_node"))
            if numa is None and pci:
                numa = _int(_read(Path(root, "sys/bus/pci/devices", pci, "numa_node")))
            if numa is not None and numa < 0:
                numa = None  # -1: the platform does not say
        nics.append(Nic(
            name=iface.name, kind=kind, operstate=operstate,
            speed_mbps=speed, mtu=_int(_read(iface / "mtu")), driver=driver, pci_address=pci,
            numa_node=numa,
            rdma_devices=tuple(sorted({p.device for p in rdma if iface.name in p.netdevs})),
            unavailable=unavailable))
    return nics


def parse_ibv_devinfo(text: str) -> list[RdmaPort]:
    """Ports from `ibv_devinfo` output: `hca_id: DEV` blocks with fw_ver, then `port: N`
    blocks with `state: PORT_ACTIVE (4)` and `link_layer`. It gives no rate: sysfs does."""
    ports: list[RdmaPort] = []
    device, firmware = None, None
    current: dict[str, str] | None = None

    def close() -> None:
        nonlocal current
        if device is not None and current is not None:
            state = current.get("state", "")
            ports.append(RdmaPort(
                device=device, port=int(current["port"]),
                state=state.split()[0].removeprefix("PORT_") if state else None,
                link_layer=current.get("link_layer"), firmware=firmware))
        current = None

    for raw in text.splitlines():
        key, sep, value = raw.strip().partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "hca_id":
            close()
            device, firmware = value, None
        elif key == "fw_ver":
            firmware = value
        elif key == "port":
            close()
            current = {"port": value}
        elif current is not None:
            current[key] = value
    close()
    return ports


def merge_ports(sysfs: list[RdmaPort], ibv: list[RdmaPort]) -> list[RdmaPort]:
    """sysfs's ports (it has the rate and the netdevs), with ibv_devinfo filling what sysfs
    lacks (firmware, state) and adding ports only it sees (e.g. sysfs hidden in a container)."""
    by_key = {(p.device, p.port): p for p in ibv}
    merged = []
    for p in sysfs:
        other = by_key.pop((p.device, p.port), None)
        if other is not None:
            p = p.model_copy(update={"firmware": p.firmware or other.firmware,
                                     "state": p.state or other.state,
                                     "link_layer": p.link_layer or other.link_layer})
        merged.append(p)
    return merged + sorted(by_key.values(), key=lambda p: (p.device, p.port))


def ibv_devinfo() -> tuple[list[RdmaPort] | None, str | None]:
    """(ports as ibv_devinfo reports them, None) or (None, why not)."""
    exe = shutil.which("ibv_devinfo")
    if exe is None:
        return None, "ibv_devinfo not installed (rdma-core's ibverbs-utils)"
    try:
        done = subprocess.run([exe], capture_output=True, text=True, timeout=20, check=False)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"ibv_devinfo did not run: {exc}"
    ports = parse_ibv_devinfo(done.stdout)
    if done.returncode != 0 and not ports:
        last = (done.stderr or done.stdout).strip().splitlines()[-1:] or ["no output"]
        return None, f"ibv_devinfo: {last[0][:200]}"
    return ports, None
