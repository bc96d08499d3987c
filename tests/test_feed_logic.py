"""The feed suites' logic on CPU with exact values: units, percentiles, windows, host facts from
a fake /sys, and the reference tools' output parsers on real outputs."""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import os
import random
import sys
from pathlib import Path

import pytest

from gpuaudit.bench.context import BenchContext
from gpuaudit.bench.feed import fio, rates, storage
from gpuaudit.bench.feed.fio import job_file, parse_fio_json, to_measurements
from gpuaudit.bench.feed.jpeg import crop_box
from gpuaudit.bench.feed.native_net import parse_ib_write_bw, parse_iperf3
from gpuaudit.bench.feed.network import parse_peer
from gpuaudit.bench.feed.storage import Plan
from gpuaudit.bench.feed.stream import stream_bytes, working_set_bytes
from gpuaudit.bench.stats import measure
from gpuaudit.errors import BadInputError
from gpuaudit.hw.cpus import last_level_cache_bytes, numa_cpus, parse_cpulist
from gpuaudit.hw.net import merge_ports, parse_ibv_devinfo, rdma_ports, read_nics
from gpuaudit.hw.storage import (
    DiskStat,
    disk_stat,
    is_network_fs,
    max_request_bytes,
    mount_of,
    parse_mountinfo,
    storage_target,
)
from gpuaudit.percentile import percentile

from .conftest import FIXTURES, fixture_machine

FEED = FIXTURES / "feed"

# -- units, percentiles, windows ------------------------------------------------------------


def test_unit_conversions_are_decimal():
    assert rates.gb_per_s(3e9, 2) == 1.5
    assert rates.gbit_per_s(1.25e9, 1) == 10.0  # 1.25 GB/s is a 10 Gbit/s link
    assert rates.mbps_to_gbit(400_000) == 400.0  # sysfs speed of a 400G NIC
    assert rates.per_second(12_000, 4) == 3000
    with pytest.raises(ValueError):
        rates.gb_per_s(1, 0)


def test_percentiles_interpolate_like_numpy():
    assert percentile([4, 1, 3, 2], 50) == 2.5
    assert percentile([1, 2, 3, 4], 0) == 1 and percentile([1, 2, 3, 4], 100) == 4
    xs = list(range(1, 1001))
    got = rates.percentiles(xs)
    assert got[50.0] == 500.5
    assert got[99.0] == pytest.approx(990.01, abs=1e-9)
    assert got[99.9] == pytest.approx(999.001, abs=1e-9)
    assert rates.percentile_name(99.9) == "p99.9" and rates.percentile_name(50) == "p50"
    with pytest.raises(ValueError):
        percentile([], 50)
    with pytest.raises(ValueError):
        percentile([1], 101)


def test_window_rates_count_completions_and_drop_a_short_tail():
    ends = [0.1, 0.2, 0.6, 0.7, 0.8, 1.05]
    assert rates.window_rates(ends, 0.0, 0.5) == [4.0, 6.0]  # 1.05 falls in a 0.05 s tail
    assert rates.window_rates([0.1, 0.2, 0.6, 0.7, 0.8, 1.3], 0.0, 0.5) == [4.0, 6.0, 2.0]
    assert rates.window_rates([], 0.0, 0.5) == []


def test_fits_keeps_a_margin():
    assert rates.fits(1 << 30, (1 << 30) + (256 << 20), 256 << 20)
    assert not rates.fits(1 << 30, (1 << 30) + (255 << 20), 256 << 20)


def test_stream_counting_and_working_set():
    assert stream_bytes("copy", 1000) == 16_000 and stream_bytes("triad", 1000) == 24_000
    assert working_set_bytes(105 << 20, 1 << 30, 512 << 30) == 1 << 30
    assert working_set_bytes(480 << 20, 1 << 30, 512 << 30) == 4 * (480 << 20)
    assert working_set_bytes(None, 1 << 30, 2 << 30) == 512 << 20  # a quarter of free memory


def test_crop_box_follows_random_resized_crop():
    rng = random.Random(7)
    for _ in range(200):
        left, top, w, h = crop_box(500, 375, rng)
        assert left >= 0 and left + w <= 500 and top >= 0 and top + h <= 375
        assert 0.08 * 500 * 375 * 0.98 <= w * h <= 500 * 375
        assert 3 / 4 * 0.97 <= w / h <= 4 / 3 * 1.03
    assert crop_box(2, 1000, random.Random(0)) == (0, 499, 2, 2)  # no fit: the centre square


def test_parse_peer():
    assert parse_peer("node2") == ("node2", 5301)
    assert parse_peer("node2:6000") == ("node2", 6000)
    assert parse_peer("10.0.0.2", 7000) == ("10.0.0.2", 7000)
    assert parse_peer("[fe80::1]:6000") == ("fe80::1", 6000)
    with pytest.raises(BadInputError):
        parse_peer("node2:99999")


# -- hw: mounts and block devices -------------------------------------------------------------

MOUNTINFO = """\
22 27 0:21 / /proc rw,relatime - proc proc rw
27 1 259:1 / / rw,relatime - ext4 /dev/nvme0n1p1 rw
30 27 259:1 /srv /mnt/my\\040data rw,relatime - ext4 /dev/nvme0n1p1 rw
31 27 0:50 / /mnt/bucket rw,nosuid - fuse.mountpoint-s3 mountpoint-s3 rw
32 27 0:51 / /mnt/nfs ro,relatime - nfs4 fs1:/export ro,vers=4.2
33 27 0:52 / /mnt/nfs rw,relatime - nfs4 fs2:/export rw,vers=4.2
"""


def test_mountinfo_parsing_unescapes_and_picks_the_last_longest_mount():
    entries = parse_mountinfo(MOUNTINFO)
    assert [e.mount_point for e in entries][2] == "/mnt/my data"
    assert mount_of("/mnt/my data/train", entries).source == "/dev/nvme0n1p1"
    assert mount_of("/mnt/bucket/x", entries).fs_type == "fuse.mountpoint-s3"
    assert mount_of("/mnt/nfs", entries).source == "fs2:/export"  # mounted over fs1
    assert mount_of("/mnt/nfsx", entries).mount_point == "/"  # a prefix is not a parent
    assert mount_of("/proc/1", entries).fs_type == "proc"


def test_network_file_systems():
    assert is_network_fs("nfs4") and is_network_fs("lustre") and is_network_fs("fuse.s3fs")
    assert is_network_fs("fuse.gcsfuse") and is_network_fs("ceph")
    assert not is_network_fs("ext4") and not is_network_fs("xfs")
    assert not is_network_fs("fuseblk") and not is_network_fs("tmpfs")


def _link(path: Path, target: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.symlink_to(target)


def _write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def test_storage_target_resolves_a_partition_to_its_nvme_disk(tmp_path: Path):
    root = tmp_path / "root"
    disk = root / "sys/devices/pci0000:00/0000:00:01.0/nvme/nvme0/nvme0n1"
    _write(disk / "nvme0n1p1/partition", "1")
    _write(disk / "device/model", "SAMSUNG MZQL23T8HCLS-00A07   \n")
    _write(disk / "queue/rotational", "0")
    _write(disk / "queue/logical_block_size", "4096")
    _write(disk / "size", "7501476528")
    _link(root / "sys/dev/block/259:1", str(disk / "nvme0n1p1"))
    _link(root / "sys/block/nvme0n1", str(disk))
    data = tmp_path / "data"
    data.mkdir()
    info = f"27 1 259:1 / {data} rw,relatime - xfs /dev/nvme0n1p1 rw\n"
    t = storage_target(str(data), root=str(root), mountinfo=info)
    assert (t.fs_type, t.mount_source, t.device, t.transport) == (
        "xfs", "/dev/nvme0n1p1", "nvme0n1", "nvme")
    assert t.device_model == "SAMSUNG MZQL23T8HCLS-00A07"
    assert (t.rotational, t.logical_block_bytes) == (False, 4096)
    assert t.device_size_bytes == 7501476528 * 512
    assert not t.network_fs and not t.read_only and t.free_bytes > 0
    assert t.unavailable == {}


def test_a_disks_counters_and_largest_request_from_sysfs(tmp_path: Path):
    # /sys/block/vda/stat of the GPU machine: reads and writes completed (fields 1 and 5),
    # their ms (4 and 8), requests × ms in flight (11), cache flushes and
    # their ms (16 and 17, since Linux 5.5)
    _write(tmp_path / "sys/block/vda/stat",
           "  812390   10521 63386954  2405917  2061380  1301271 372843840 11069843        0 "
           "1882208 13678306        0        0        0        0   203157   202545\n")
    _write(tmp_path / "sys/block/vda/queue/max_sectors_kb", "4096\n")
    _write(tmp_path / "sys/block/sda/queue/max_sectors_kb", "0\n")
    _write(tmp_path / "sys/block/sdb/stat", "1 2 3 4 5 6 7 8 0 10 11\n")  # Linux 4.x: 11 fields
    assert disk_stat("sdb", root=str(tmp_path)) == DiskStat(1, 5, 4, 8, 11, None, None)
    assert disk_stat("vda", root=str(tmp_path)) == DiskStat(
        reads=812390, writes=2061380, read_ms=2405917, write_ms=11069843, in_queue_ms=13678306,
        flushes=203157, flush_ms=202545)
    assert max_request_bytes("vda", root=str(tmp_path)) == 4096 * 1024
    # what the disk did between two readings, in each direction; no flush count, no difference
    later = DiskStat(reads=812400, writes=2061500, read_ms=2406000, write_ms=11070043,
                     in_queue_ms=13678906, flushes=203160, flush_ms=202547)
    done = later.since(disk_stat("vda", root=str(tmp_path)))
    assert (done.requests(False), done.requests(True)) == (10, 120)
    assert (done.requests_ms(False), done.requests_ms(True)) == (83, 200)
    assert (done.in_queue_ms, done.flushes, done.flush_ms) == (600, 3, 2)
    old = later.since(DiskStat(1, 5, 4, 8, 11, None, None))
    assert (old.flushes, old.flush_ms, old.writes) == (None, None, 2061495)
    assert disk_stat("sda", root=str(tmp_path)) is None  # no stat
    assert max_request_bytes("sda", root=str(tmp_path)) is None  # no limit read
    assert max_request_bytes("nvme0n1", root=str(tmp_path)) is None


def test_storage_target_of_a_network_mount_has_no_device_and_says_why(tmp_path: Path):
    info = f"40 1 0:60 / {tmp_path} ro,relatime - nfs4 fs1:/export ro\n"
    t = storage_target(str(tmp_path), root=str(tmp_path / "nosys"), mountinfo=info)
    assert t.network_fs and t.read_only and t.device is None
    assert "no block device 0:60" in t.unavailable["device"]


# -- hw: NICs and RDMA --------------------------------------------------------------------------


def _fake_net(root: Path) -> None:
    pci = root / "sys/devices/pci0000:3a/0000:3a:00.0/0000:3b:00.0"
    _write(pci / "numa_node", "1")
    _link(pci / "driver", str(root / "sys/bus/pci/drivers/mlx5_core"))
    (root / "sys/bus/pci/drivers/mlx5_core").mkdir(parents=True)
    eth = root / "sys/class/net/ens1np0"
    for name, text in (("speed", "400000"), ("mtu", "9000"), ("operstate", "up"),
                       ("type", "1")):
        _write(eth / name, text)
    _link(eth / "device", str(pci))
    veth = root / "sys/class/net/veth0"
    for name, text in (("mtu", "1500"), ("operstate", "up"), ("type", "1")):
        _write(veth / name, text)
    lo = root / "sys/class/net/lo"
    for name, text in (("mtu", "65536"), ("operstate", "unknown"), ("type", "772")):
        _write(lo / name, text)
    ib = root / "sys/class/infiniband/mlx5_0"
    _write(ib / "fw_ver", "28.39.1002")
    _write(ib / "ports/1/state", "4: ACTIVE")
    _write(ib / "ports/1/rate", "400 Gb/sec (4X NDR)")
    _write(ib / "ports/1/link_layer", "Ethernet")
    (pci / "net/ens1np0").mkdir(parents=True)
    _link(ib / "device", str(pci))


def test_nics_and_rdma_ports_from_sysfs(tmp_path: Path):
    _fake_net(tmp_path)
    ports = rdma_ports(str(tmp_path))
    assert len(ports) == 1
    p = ports[0]
    assert (p.device, p.port, p.state, p.rate_gbps, p.link_layer, p.netdevs, p.firmware) == (
        "mlx5_0", 1, "ACTIVE", 400.0, "Ethernet", ("ens1np0",), "28.39.1002")
    nics = {n.name: n for n in read_nics(str(tmp_path))}
    eth = nics["ens1np0"]
    assert (eth.kind, eth.speed_mbps, eth.mtu, eth.driver, eth.pci_address, eth.numa_node,
            eth.rdma_devices) == ("physical", 400000, 9000, "mlx5_core", "0000:3b:00.0", 1,
                                  ("mlx5_0",))
    assert nics["veth0"].kind == "virtual" and nics["veth0"].speed_mbps is None
    assert "virtual" in nics["veth0"].unavailable["speed_mbps"]
    assert nics["lo"].kind == "loopback"
    (tmp_path / "sys/class/net/ens1np0/operstate").write_text("down")
    (tmp_path / "sys/class/net/ens1np0/speed").write_text("-1")
    down = next(n for n in read_nics(str(tmp_path)) if n.name == "ens1np0")
    assert down.speed_mbps is None and down.unavailable["speed_mbps"] == "link down: no speed"


IBV_DEVINFO = """\
hca_id:\tmlx5_0
\ttransport:\t\t\tInfiniBand (0)
\tfw_ver:\t\t\t\t28.39.1002
\tvendor_id:\t\t\t0x02c9
\tphys_port_cnt:\t\t\t1
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_ACTIVE (4)
\t\t\tmax_mtu:\t\t4096 (5)
\t\t\tlink_layer:\t\tInfiniBand

hca_id:\tmlx5_1
\tfw_ver:\t\t\t\t28.39.1002
\t\tport:\t1
\t\t\tstate:\t\t\tPORT_DOWN (1)
\t\t\tlink_layer:\t\tEthernet
"""


def test_ibv_devinfo_parsing():
    ports = parse_ibv_devinfo(IBV_DEVINFO)
    assert [(p.device, p.port, p.state, p.link_layer, p.firmware) for p in ports] == [
        ("mlx5_0", 1, "ACTIVE", "InfiniBand", "28.39.1002"),
        ("mlx5_1", 1, "DOWN", "Ethernet", "28.39.1002")]


def test_ibv_devinfo_fills_what_sysfs_lacks_and_adds_what_only_it_sees(tmp_path: Path):
    _fake_net(tmp_path)
    sysfs = [p.model_copy(update={"firmware": None}) for p in rdma_ports(str(tmp_path))]
    merged = merge_ports(sysfs, parse_ibv_devinfo(IBV_DEVINFO))
    assert [(p.device, p.state, p.rate_gbps, p.link_layer, p.firmware, p.netdevs)
            for p in merged] == [
        ("mlx5_0", "ACTIVE", 400.0, "Ethernet", "28.39.1002", ("ens1np0",)),  # sysfs wins
        ("mlx5_1", "DOWN", None, "Ethernet", "28.39.1002", ())]


def test_numa_cpus_and_last_level_cache_from_sysfs(tmp_path: Path):
    assert parse_cpulist("0-3,8,10-11\n") == [0, 1, 2, 3, 8, 10, 11]
    _write(tmp_path / "sys/devices/system/node/node0/cpulist", "0-3")
    _write(tmp_path / "sys/devices/system/node/node1/cpulist", "4-7")
    assert numa_cpus(str(tmp_path), allowed={0, 1, 5, 9}) == {0: [0, 1], 1: [5]}
    assert numa_cpus(str(tmp_path / "none"), allowed={2, 3}) == {0: [2, 3]}
    for cpu, shared in ((0, "0-3"), (1, "0-3"), (4, "4-7")):
        base = tmp_path / f"sys/devices/system/cpu/cpu{cpu}/cache"
        for idx, (level, kind, size) in enumerate(((1, "Data", "48K"), (1, "Instruction", "32K"),
                                                   (2, "Unified", "2048K"),
                                                   (3, "Unified", "105M"))):
            for name, text in (("level", str(level)), ("type", kind), ("size", size),
                               ("shared_cpu_list", shared if level == 3 else str(cpu))):
                _write(base / f"index{idx}/{name}", text)
    assert last_level_cache_bytes(str(tmp_path)) == 2 * 105 * (1 << 20)


# -- reference tools' outputs ------------------------------------------------------------------


def test_iperf3_json_from_a_real_loopback_run():
    send = parse_iperf3((FEED / "iperf3_send.json").read_text())
    doc = json.loads((FEED / "iperf3_send.json").read_text())["end"]["sum_received"]
    assert send == (doc["bits_per_second"] / 1e9, doc["bytes"], doc["seconds"])
    assert 1 < send[0] < 100
    with pytest.raises(ValueError, match="unable to connect"):
        parse_iperf3('{"start": {}, "error": "unable to connect to server"}')


PERFTEST = """\
---------------------------------------------------------------------------------------
                    RDMA_Write BW Test
 Dual-port       : OFF\t\tDevice         : mlx5_0
---------------------------------------------------------------------------------------
 #bytes     #iterations    BW peak[Gb/sec]    BW average[Gb/sec]   MsgRate[Mpps]
 65536      5000             392.51             391.87             0.747427
---------------------------------------------------------------------------------------
"""


def test_ib_write_bw_result_row():
    assert parse_ib_write_bw(PERFTEST) == (65536, 392.51, 391.87)
    with pytest.raises(ValueError):
        parse_ib_write_bw("Couldn't connect to 10.0.0.2:18515")


def test_fio_job_file_mirrors_our_plan():
    text = job_file(Plan(file_bytes=1 << 30, seq_jobs=4, passes=5, depths=(1, 16),
                         rand_seconds=2.0), "/data/.gpuaudit-io-x", direct=True)
    assert "direct=1" in text and "ioengine=psync" in text
    assert text.count("stonewall") == 4
    assert "[seq_read]" in text and "size=268435456" in text and "offset_increment=268435456" \
        in text
    # One pass over the file per fio run, as one pass is one sample of ours; the write pass
    # ends with fio's fsync, as ours ends with fdatasync.
    assert text.count("loops=1") == 2 and "loops=5" not in text
    write = text.split("[seq_write]")[1].split("\n\n")[0]
    assert "end_fsync=1" in write and "end_fsync" not in text.split("[seq_read]")[1]
    assert "[rand4k_read_qd16]" in text and "numjobs=16" in text and "runtime=2s" in text
    # Sequential jobs without fio's per-I/O clock reads (ours reads none per call); the random
    # reads keep them, their latency percentiles come from them.
    sections = {s.splitlines()[0]: s for s in text.split("\n\n")}
    assert "gtod_reduce=1" in sections["[seq_write]"] and "gtod_reduce=1" in sections["[seq_read]"]
    assert "gtod_reduce" not in sections["[rand4k_read_qd1]"] + sections["[global]"]


def test_fio_job_file_with_buffers_gives_each_thread_its_own_section():
    text = job_file(Plan(file_bytes=1 << 30, seq_jobs=4, passes=5, depths=(1,),
                         rand_seconds=2.0), "/data/x", direct=True, buffers=(7, 8, 9, 10))
    read = text[text.index("[seq_read]"):text.index("[rand4k_read_qd1]")]
    threads = read.strip().split("\n\n")
    # four sections of one name: --section=seq_read runs them all, one group (one figure)
    assert [t.splitlines()[0] for t in threads] == ["[seq_read]"] * 4
    assert ["stonewall" in t for t in threads] == [True, False, False, False]
    assert [t.split("offset=")[1].split("\n")[0] for t in threads] == \
        [str(k * (256 << 20)) for k in range(4)]
    assert [t.split("iomem=")[1].split("\n")[0] for t in threads] == \
        [f"mmapshared:/proc/self/fd/{fd}" for fd in (7, 8, 9, 10)]
    assert all("size=268435456" in t and "numjobs" not in t for t in threads)
    assert text.count("end_fsync=1") == 4 and "iomem" not in text.split("[rand4k_read_qd1]")[1]


def test_io_buffers_are_written_through_and_closed():
    with storage.io_buffers(3) as fds:
        assert len(fds) == 3 and len(set(fds)) == 3
        for fd in fds:
            st = os.fstat(fd)
            assert st.st_size == storage.BUFFER_BYTES == (1 << 20) + 4096
            assert st.st_blocks * 512 >= storage.BUFFER_BYTES  # its pages exist before use
    for fd in fds:
        with pytest.raises(OSError):
            os.fstat(fd)


def _fio_passes() -> dict:
    return json.loads((FEED / "fio_passes.json").read_text())


def _pass_jobs(section: str) -> list[dict]:
    return [job for out in _fio_passes()["runs"][section] for job in parse_fio_json(out)]


def test_fio_runs_one_per_pass_become_the_median_like_ours():
    # Three real fio runs of [seq_write] (loops=1), one per pass: bw_bytes 1,720,740,102,
    # 2,080,895,007 and 2,684,354,560 B/s.
    jobs = _pass_jobs("seq_write") + _pass_jobs("seq_read") + _pass_jobs("rand")
    assert [j["job options"].get("loops") for j in jobs[:6]] == ["1"] * 6
    found = {m.name: m for m in to_measurements(jobs, {"path": "/data"})}
    w = found["seq_write"]
    assert w.samples == (1.720740102, 2.080895007, 2.68435456)
    assert w.value == 2.080895007 and w.statistic == "median"
    # Q1 halfway between the 1st and 2nd sample, Q3 between the 2nd and 3rd
    assert w.spread_low == pytest.approx(1.9008175545, abs=1e-12)
    assert w.spread_high == pytest.approx(2.3826247835, abs=1e-12) and w.spread_kind == "IQR"
    assert w.params == {"path": "/data", "tool": "fio", "block_bytes": 1 << 20, "passes": 3}
    # the very statistic measure() gives our passes
    ours = measure("storage", "seq_write", "GB/s", list(w.samples), warmup=0)
    assert (ours.value, ours.statistic, ours.spread_low, ours.spread_high, ours.notes) == \
        (w.value, w.statistic, w.spread_low, w.spread_high, w.notes)
    r = found["seq_read"]
    assert r.samples == (1.597830095, 1.63680156, 1.777718251) and r.value == 1.63680156
    # random reads: one run, fio's mean over it
    q4 = next(j for j in jobs if j["jobname"] == "rand4k_read_qd4")
    assert found["rand4k_read_qd4"].value == q4["read"]["iops"]
    assert found["rand4k_read_qd4"].statistic == "fio mean"
    assert found["rand4k_read_qd4"].samples == (q4["read"]["iops"],)


def test_a_failed_fio_pass_skips_that_figure_only():
    jobs = _pass_jobs("seq_write") + _pass_jobs("seq_read")
    jobs[1] = {**jobs[1], "error": 5}
    found = {m.name: m for m in to_measurements(jobs, {})}
    assert found["seq_write"].value is None
    assert found["seq_write"].skipped_reason == "fio seq_write: error 5"
    assert found["seq_read"].value == 1.63680156


FAKE_FIO = """#!{python}
import json, os, sys
log = os.environ["FAKE_FIO_LOG"]
with open(log, "a") as f:
    f.write(json.dumps(sys.argv[1:]) + "\\n")
runs = json.load(open({fixture!r}))["runs"]
sections = [a.split("=", 1)[1] for a in sys.argv[1:] if a.startswith("--section=")]
# the buffers this run's sections name, as this process sees them: their sizes in bytes
name, sizes = None, []
for line in open(sys.argv[-1]) if os.path.exists(sys.argv[-1]) else ():
    line = line.strip()
    if line.startswith("["):
        name = line[1:-1]
    elif line.startswith("iomem=mmapshared:") and name in sections:
        sizes.append(os.stat(line.split(":", 1)[1]).st_size)
with open(log + ".buffers", "a") as f:
    f.write(json.dumps(sizes) + "\\n")
key = sections[0] if sections[0].startswith("seq_") else "rand"
done = sum(1 for line in open(log) if key in line)  # this run's number for this section
if os.environ.get("FAKE_FIO_FAIL") == key:
    print("fio: pid=1, err=5/file:io_u.c:1896, func=io_u error, error=Input/output error",
          file=sys.stderr)
    sys.exit(1)
print("fio: a warning before the JSON")
print(runs[key][(done - 1) % len(runs[key])])
"""


@pytest.fixture
def fake_fio(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    exe = tmp_path / "fio"
    exe.write_text(FAKE_FIO.format(python=sys.executable,
                                   fixture=str(FEED / "fio_passes.json")))
    exe.chmod(0o755)
    log = tmp_path / "calls"
    monkeypatch.setenv("GPUAUDIT_FIO", str(exe))
    monkeypatch.setenv("FAKE_FIO_LOG", str(log))
    return log


def test_the_suite_runs_fio_once_per_pass_then_once_for_random_reads(fake_fio: Path,
                                                                     tmp_path: Path):
    data = tmp_path / "data"
    data.mkdir()
    ctx = BenchContext(machine=fixture_machine(), devices=(),
                       options={"paths": (str(data),), "file_bytes": 16 << 20,
                                "seq_jobs": 2, "depths": (1, 4)})
    steps: list[str] = []
    ctx = dataclasses.replace(ctx, step=steps.append)
    found = {m.name: m for m in fio.run_native(ctx)}
    calls = [json.loads(line) for line in fake_fio.read_text().splitlines()]
    sections = [[a for a in c if a.startswith("--section=")] for c in calls]
    # quick: 5 passes each, one fio process per pass, then both depths in one run
    assert sections == [["--section=seq_write"]] * 5 + [["--section=seq_read"]] * 5 + \
        [["--section=rand4k_read_qd1", "--section=rand4k_read_qd4"]]
    assert all(c[0] == "--output-format=json" and c[-1].endswith(".fio") for c in calls)
    # the recorded passes in turn (3 recorded, so passes 4 and 5 are the first two again)
    assert found["seq_write"].samples == (1.720740102, 2.080895007, 2.68435456,
                                          1.720740102, 2.080895007)
    assert found["seq_write"].value == 2.080895007
    assert found["seq_write"].statistic == found["seq_read"].statistic == "median"
    assert found["seq_read"].params["passes"] == 5
    assert found["seq_read"].params["cache_bypass"] in ("O_DIRECT",
                                                        "fio invalidate=1 (O_DIRECT refused)")
    assert found["rand4k_read_qd1"].unit == "IOPS" and "rand4k_read_qd4_p99" in found
    assert any("seq write" in s and "× 5" in s for s in steps)
    assert os.listdir(data) == []  # fio's file and the job file removed
    # each sequential pass's two threads mapped buffers made for it (open in fio's process),
    # as ours are; random reads use fio's own
    buffers = [json.loads(line) for line in (tmp_path / "calls.buffers").read_text().splitlines()]
    assert buffers == [[storage.BUFFER_BYTES] * 2] * 10 + [[]]


def test_fio_failing_is_one_skipped_line_after_what_it_measured(fake_fio: Path,
                                                                tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setenv("FAKE_FIO_FAIL", "seq_read")
    data = tmp_path / "data"
    data.mkdir()
    ctx = BenchContext(machine=fixture_machine(), devices=(),
                       options={"paths": (str(data),), "file_bytes": 16 << 20,
                                "seq_jobs": 2, "depths": (1,)})
    found = list(fio.run_native(ctx))
    assert [m.name for m in found] == ["seq_write", "fio"]
    assert found[1].skipped_reason == ("no JSON in fio's output (exit 1: fio: pid=1, "
                                       "err=5/file:io_u.c:1896, func=io_u error, "
                                       "error=Input/output error)")
    assert os.listdir(data) == []


def test_run_jobs_names_the_sections_and_fails_in_one_line(fake_fio: Path, tmp_path: Path):
    exe = os.environ["GPUAUDIT_FIO"]
    jobs = fio.run_jobs(exe, str(tmp_path / "x.fio"), ("seq_read",), 30)
    assert [j["jobname"] for j in jobs] == ["seq_read"]
    assert json.loads(fake_fio.read_text()) == ["--output-format=json", "--section=seq_read",
                                                str(tmp_path / "x.fio")]
    with pytest.raises(ValueError, match="would run them all"):
        fio.run_jobs(exe, str(tmp_path / "x.fio"), (), 30)
    slow = tmp_path / "slow"
    slow.write_text("#!/bin/sh\nsleep 5\n")
    slow.chmod(0o755)
    with pytest.raises(fio.FioFailed, match=r"^fio timed out after 0.2 s$"):
        fio.run_jobs(str(slow), str(tmp_path / "x.fio"), ("seq_read",), 0.2)


def test_fio_json_from_a_real_run_becomes_our_names():
    jobs = parse_fio_json("fio: some warning\n" + (FEED / "fio.json").read_text())
    found = {m.name: m for m in to_measurements(jobs, {"path": "/data"})}
    raw = {j["jobname"]: j for j in json.loads((FEED / "fio.json").read_text())["jobs"]}
    assert found["seq_write"].value == raw["seq_write"]["write"]["bw_bytes"] / 1e9
    assert found["seq_read"].value == raw["seq_read"]["read"]["bw_bytes"] / 1e9
    assert found["rand4k_read_qd4"].value == raw["rand4k_read_qd4"]["read"]["iops"]
    pct = raw["rand4k_read_qd1"]["read"]["clat_ns"]["percentile"]
    assert found["rand4k_read_qd1_p99.9"].value == pct["99.900000"] / 1000
    assert found["rand4k_read_qd1_p99.9"].unit == "µs"
    assert all(m.params["tool"] == "fio" and m.params["path"] == "/data"
               for m in found.values())
    with pytest.raises(ValueError):
        parse_fio_json("fio: file:filesetup.c: cannot open")


def test_fixtures_are_real_recordings():
    # The parsers above are tested on real tool output, not hand-written imitations.
    assert json.loads((FEED / "fio.json").read_text())["fio version"].startswith("fio-")
    assert "iperf" in json.loads((FEED / "iperf3_recv.json").read_text())["start"]["version"]
    assert os.path.getsize(FEED / "h200_2gpu_transfer.json") > 0


# -- validation/feed/compare.py: ours and fio pass by pass --------------------------------------


def _feed_compare():
    return importlib.import_module("validation.feed.compare")


def test_compare_pairs_pass_by_pass_and_alternates_who_goes_first():
    fc = _feed_compare()
    order: list[str] = []

    def ours(i: int) -> float:
        order.append(f"ours{i}")
        return 2.0 + i

    def ref(i: int) -> float:
        order.append(f"fio{i}")
        return 2.0

    assert fc.paired_passes(4, ours, ref) == [(2.0, 2.0), (3.0, 2.0), (4.0, 2.0), (5.0, 2.0)]
    assert order == ["ours0", "fio0", "fio1", "ours1", "ours2", "fio2", "fio3", "ours3"]
    # a second round of 5 passes carries on the alternation: 5 is odd, so fio starts
    order.clear()
    fc.paired_passes(2, ours, ref, first=5)
    assert order == ["fio0", "ours0", "ours1", "fio1"]


def test_compare_summary_is_the_median_of_the_pair_ratios_with_their_range():
    fc = _feed_compare()
    # ratios 1.1, 0.9, 1.2, 1.0, 0.5: median 1.0 (not ours' median ÷ fio's median, 2.4 / 2.4)
    pairs = [(2.2, 2.0), (2.7, 3.0), (2.4, 2.0), (3.0, 3.0), (1.25, 2.5)]
    s = fc.summarize(pairs)
    assert (s.ours, s.reference, s.pairs) == (2.4, 2.5, 5)
    assert s.ratio == pytest.approx(1.0, abs=1e-12)
    assert (s.low, s.high) == (pytest.approx(0.5), pytest.approx(1.2))
    # five pairs: the interval is ranks 0 and 4 of the sorted ratios, the whole range
    assert (s.ci_low, s.ci_high) == (pytest.approx(0.5), pytest.approx(1.2))
    assert fc.row("seq_read", s) == ("seq_read                      2.4          2.5   1.000  "
                                     "0.500–1.200  0.500–1.200     5")
    with pytest.raises(ValueError):
        fc.summarize([])


def test_the_median_ratios_confidence_interval_narrows_with_the_pairs():
    fc = _feed_compare()
    ratios = [0.90 + 0.01 * k for k in range(21)]  # 0.90 … 1.10, median 1.00
    # n = 21: ranks floor(10.5 - 4.49) = 6 and ceil(10.5 + 4.49) = 15
    assert fc.median_ci95(ratios) == (pytest.approx(0.96), pytest.approx(1.05))
    assert fc.median_ci95(list(reversed(ratios))) == fc.median_ci95(ratios)
    many = [0.90 + 0.002 * k for k in range(101)]  # n = 101: ranks 40 and 61
    lo, hi = fc.median_ci95(many)
    assert (lo, hi) == (pytest.approx(0.98), pytest.approx(1.022))
    assert hi - lo < 1.05 - 0.96  # more pairs, a narrower interval around the same median
