"""Host facts: CPU, memory, OS, container and hypervisor, Python and torch versions.

torch is never imported here (it takes seconds and may be absent): its version and the CUDA
version it was built for are read from the installed package's files.
"""

from __future__ import annotations

import glob
import importlib.metadata
import importlib.util
import os
import platform
import re
import socket
from pathlib import Path

import psutil

from gpuaudit.model import Host


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text(errors="replace")
    except OSError:
        return None


def cpu_model(cpuinfo: str | None) -> str | None:
    if cpuinfo:
        m = re.search(r"^model name\s*:\s*(.+)$", cpuinfo, re.M)
        if m:
            return m.group(1).strip()
    return platform.processor() or None


def cpu_sockets(cpuinfo: str | None) -> int | None:
    if not cpuinfo:
        return None
    ids = set(re.findall(r"^physical id\s*:\s*(\d+)$", cpuinfo, re.M))
    return len(ids) or None


def detect_container(environ: dict[str, str], root: str = "/") -> str | None:
    """The container runtime we run in, from the marks each one leaves, or None."""
    if "KUBERNETES_SERVICE_HOST" in environ:
        return "kubernetes"
    if os.path.exists(os.path.join(root, ".dockerenv")):
        return "docker"
    if os.path.exists(os.path.join(root, "run/.containerenv")):
        return "podman"
    cgroup = _read(os.path.join(root, "proc/1/cgroup")) or ""
    for mark, name in (("kubepods", "kubernetes"), ("docker", "docker"), ("lxc", "lxc"),
                       ("containerd", "containerd")):
        if mark in cgroup:
            return name
    container = environ.get("container")  # set by systemd-nspawn, podman, lxc
    return container or None


def detect_hypervisor(cpuinfo: str | None, root: str = "/", kernel: str | None = None
                      ) -> str | None:
    """The hypervisor under this machine, or None on bare metal (or when it cannot tell)."""
    product = (_read(os.path.join(root, "sys/class/dmi/id/product_name")) or "").strip()
    vendor = (_read(os.path.join(root, "sys/class/dmi/id/sys_vendor")) or "").strip()
    kernel = (kernel if kernel is not None else platform.release()).lower()
    if "firecracker" in product.lower() or "-fc-" in kernel:
        return "firecracker"
    for mark, name in (("KVM", "kvm"), ("QEMU", "kvm"), ("VMware", "vmware"),
                       ("VirtualBox", "virtualbox"), ("Xen", "xen"),
                       ("Amazon EC2", "kvm"), ("Google Compute Engine", "kvm"),
                       ("Microsoft Corporation", "hyper-v")):
        if mark in product or mark in vendor:
            return name
    if cpuinfo and re.search(r"^flags\s*:.*\bhypervisor\b", cpuinfo, re.M):
        return "unknown"
    if (_read(os.path.join(root, "proc/version")) or "").find("gVisor") >= 0:
        return "gvisor"
    return None


def torch_versions() -> tuple[str | None, str | None]:
    """(torch version, CUDA version torch was built for), without importing torch."""
    try:
        version = importlib.metadata.version("torch")
    except importlib.metadata.PackageNotFoundError:
        return None, None
    spec = importlib.util.find_spec("torch")
    cuda = None
    for location in (spec.submodule_search_locations or []) if spec else []:
        text = _read(os.path.join(location, "version.py")) or ""
        m = re.search(r"^cuda\s*(?::[^=]*)?=\s*['\"]([\d.]+)['\"]", text, re.M)
        if m:
            cuda = m.group(1)
            break
    return version, cuda


def numa_node_count(root: str = "/") -> int | None:
    nodes = glob.glob(os.path.join(root, "sys/devices/system/node/node[0-9]*"))
    return len(nodes) or None


# Variables that change how every CUDA call runs: a debugger or profiler injected into the
# process (DCGM's deployment check warns on the same list), or launches made synchronous.
CUDA_ENV_VARS = ("CUDA_LAUNCH_BLOCKING", "CUDA_INJECTION32_PATH", "CUDA_INJECTION64_PATH",
                 "NSIGHT_CUDA_DEBUGGER", "CUDA_AUTO_BOOST", "CUDA_ENABLE_COREDUMP_ON_EXCEPTION",
                 "CUDA_COREDUMP_FILE", "CUDA_DEVICE_WAITS_ON_EXCEPTION", "CUDA_PROFILE",
                 "COMPUTE_PROFILE", "OPENCL_PROFILE")


def cuda_env_set(environ: dict[str, str]) -> tuple[str, ...]:
    """The CUDA_ENV_VARS set in `environ` (CUDA_LAUNCH_BLOCKING only when it is on)."""
    return tuple(name for name in CUDA_ENV_VARS if name in environ and not (
        name == "CUDA_LAUNCH_BLOCKING" and environ[name].strip() in ("", "0")))


def read_host() -> Host:
    cpuinfo = _read("/proc/cpuinfo")
    torch_version, torch_cuda = torch_versions()
    try:
        os_name = platform.freedesktop_os_release().get("PRETTY_NAME")
    except OSError:
        os_name = f"{platform.system()} {platform.release()}"
    unavailable = {}
    if torch_version is None:
        unavailable["torch_version"] = "torch is not installed"
    return Host(
        hostname=socket.gethostname(),
        cpu_model=cpu_model(cpuinfo),
        cpu_cores_physical=psutil.cpu_count(logical=False),
        cpu_threads=psutil.cpu_count(logical=True),
        cpu_sockets=cpu_sockets(cpuinfo),
        numa_nodes=numa_node_count(),
        memory_total_bytes=psutil.virtual_memory().total,
        os_name=os_name,
        kernel=platform.release(),
        architecture=platform.machine(),
        container=detect_container(dict(os.environ)),
        hypervisor=detect_hypervisor(cpuinfo),
        python_version=platform.python_version(),
        torch_version=torch_version,
        torch_cuda_version=torch_cuda,
        cuda_env_set=cuda_env_set(dict(os.environ)),
        unavailable=unavailable,
    )
