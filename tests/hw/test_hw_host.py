from __future__ import annotations

from gpuaudit.hw import decode
from gpuaudit.hw.host import (
    cpu_model,
    cpu_sockets,
    detect_container,
    detect_hypervisor,
    read_host,
)
from gpuaudit.hw.xids import parse_xids

CPUINFO = """processor\t: 0
model name\t: AMD EPYC 9654 96-Core Processor
physical id\t: 0
flags\t\t: fpu vme hypervisor avx
processor\t: 1
model name\t: AMD EPYC 9654 96-Core Processor
physical id\t: 1
"""


def test_cpu_model_and_sockets_from_cpuinfo():
    assert cpu_model(CPUINFO) == "AMD EPYC 9654 96-Core Processor"
    assert cpu_sockets(CPUINFO) == 2
    assert cpu_sockets(None) is None


def test_container_detection_by_marks(tmp_path):
    assert detect_container({}, root=str(tmp_path)) is None
    assert detect_container({"KUBERNETES_SERVICE_HOST": "10.0.0.1"}, str(tmp_path)) == "kubernetes"
    (tmp_path / "proc/1").mkdir(parents=True)
    (tmp_path / "proc/1/cgroup").write_text("0::/kubepods/besteffort/pod1/abc\n")
    assert detect_container({}, str(tmp_path)) == "kubernetes"
    (tmp_path / ".dockerenv").write_text("")
    assert detect_container({}, str(tmp_path)) == "docker"


def test_hypervisor_detection(tmp_path):
    dmi = tmp_path / "sys/class/dmi/id"
    dmi.mkdir(parents=True)
    (dmi / "product_name").write_text("Standard PC (Q35 + ICH9, 2009)\n")
    (dmi / "sys_vendor").write_text("QEMU\n")
    assert detect_hypervisor(None, str(tmp_path), kernel="6.1.0-18-amd64") == "kvm"
    (dmi / "sys_vendor").write_text("Supermicro\n")
    (dmi / "product_name").write_text("SYS-821GE-TNHR\n")
    # Bare-metal DMI, but the CPU flags still say a hypervisor is there.
    assert detect_hypervisor(CPUINFO, str(tmp_path), kernel="6.1.0") == "unknown"
    assert detect_hypervisor(None, str(tmp_path), kernel="6.1.0") is None
    assert detect_hypervisor(None, str(tmp_path), kernel="6.18.44-fc-v236-gpu") == "firecracker"


def test_xid_parse_counts_codes():
    log = (
        "[  1.0] NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.\n"
        "[  2.0] NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception\n"
        "[  3.0] NVRM: Xid (PCI:0000:2a:00): 13, Graphics Exception\n"
        "[  4.0] some other line 79\n"
    )
    assert parse_xids(log) == {79: 1, 13: 2}


def test_read_host_here_has_the_basics():
    host = read_host()
    assert host.hostname
    assert host.cpu_threads and host.cpu_threads >= 1
    assert host.memory_total_bytes and host.memory_total_bytes > 1 << 28
    assert host.python_version.count(".") == 2
    # torch is read from its files, never imported: whatever is installed, no import happened.
    import sys

    assert "torch" not in sys.modules or host.torch_version is not None


def test_clock_event_reasons_decode_every_bit():
    assert decode.clock_event_names(0) == ()
    assert decode.clock_event_names(0x1 | 0x8 | 0x80) == (
        "gpu_idle", "hw_slowdown", "hw_power_brake_slowdown")
    assert decode.clock_event_names(0x400) == ("unknown_0x400",)


def test_cpu_affinity_bitmask_and_bus_ids():
    assert decode.cpu_list([0xF, 0]) == (0, 1, 2, 3)
    assert decode.cpu_list([0, 1]) == (64,)
    assert decode.normalise_bus_id("00000000:9A:00.0") == "0000:9a:00.0"
    assert decode.cuda_version(13000) == "13.0"
    assert decode.cuda_version(12080) == "12.8"
