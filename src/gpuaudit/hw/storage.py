"""The storage under a path: its mount (from /proc/self/mountinfo) and the block device under
it (from sysfs, as lsblk reads it). `root` lets tests point at a fake /proc and /sys tree."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from gpuaudit.model import StorageTarget

NETWORK_FS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "ceph", "glusterfs", "lustre", "gpfs", "beegfs",
    "wekafs", "9p", "afs", "orangefs", "pvfs2",
})


@dataclass(frozen=True)
class MountEntry:
    mount_point: str
    fs_type: str
    source: str
    dev: str  # "major:minor" of the file system (st_dev)
    options: tuple[str, ...]


def _unescape(field: str) -> str:
    """mountinfo writes space, tab, newline and backslash as octal escapes (\\040...)."""
    out, i = [], 0
    while i < len(field):
        if field[i] == "\\" and i + 3 < len(field) and field[i + 1:i + 4].isdigit():
            out.append(chr(int(field[i + 1:i + 4], 8)))
            i += 4
        else:
            out.append(field[i])
            i += 1
    return "".join(out)


def parse_mountinfo(text: str) -> list[MountEntry]:
    """/proc/self/mountinfo lines: `id parent major:minor root mountpoint options [optional
    fields...] - fstype source superoptions` (proc(5))."""
    entries = []
    for line in text.splitlines():
        left, sep, right = line.partition(" - ")
        if not sep:
            continue
        a, b = left.split(), right.split()
        if len(a) < 6 or len(b) < 2:
            continue
        options = tuple(a[5].split(",")) + (tuple(b[2].split(",")) if len(b) > 2 else ())
        entries.append(MountEntry(mount_point=_unescape(a[4]), fs_type=b[0],
                                  source=_unescape(b[1]), dev=a[2], options=options))
    return entries


def mount_of(path: str, entries: list[MountEntry]) -> MountEntry | None:
    """The mount a (resolved) path lives on: the longest mount point above it; of equal ones
    the last mounted, which hides the others."""
    best: MountEntry | None = None
    for e in entries:
        mp = e.mount_point.rstrip("/") or "/"
        inside = path == mp or path.startswith(mp + "/") or mp == "/"
        if inside and (best is None or len(mp) >= len(best.mount_point.rstrip("/") or "/")):
            best = e
    return best


def is_network_fs(fs_type: str) -> bool:
    """nfs, ceph, lustre... and FUSE mounts (s3fs, gcsfuse, mountpoint-s3, rclone, juicefs),
    which is how object-store buckets get mounted."""
    base = fs_type.split(".", 1)[0]
    if fs_type in NETWORK_FS or base in NETWORK_FS:
        return True
    return base == "fuse"  # fuseblk (ntfs-3g and the like) is a local disk


def _read(path: Path) -> str | None:
    try:
        return path.read_text().strip()
    except OSError:
        return None


def _transport(sys_path: str, name: str) -> str | None:
    for mark, kind in (("/nvme", "nvme"), ("virtio", "virtio"), ("/usb", "usb"),
                       ("/ata", "sata"), ("/host", "scsi")):
        if mark in sys_path:
            return kind
    for prefix, kind in (("dm-", "dm"), ("md", "md"), ("loop", "loop"), ("zram", "zram"),
                         ("nbd", "nbd"), ("rbd", "rbd")):
        if name.startswith(prefix):
            return kind
    return None


def whole_disk(dev: str, root: str = "/") -> tuple[str | None, str | None]:
    """(the disk under a file system's major:minor, why not). A partition resolves to its
    disk; a device-mapper or md volume keeps its own name (its `slaves` are several disks)."""
    link = Path(root, "sys/dev/block", dev)
    try:
        target = Path(os.path.realpath(link))
    except OSError as exc:
        return None, f"sysfs: {exc}"
    if not target.exists():
        return None, f"no block device {dev} in sysfs (a network, FUSE or memory file system)"
    if (target / "partition").exists():
        target = target.parent
    return target.name, None


@dataclass(frozen=True)
class DiskStat:
    """A block device's counters since boot (/sys/block/DISK/stat): requests completed after
    splitting and merging, and the kernel's time accounting. Every process's I/O counts."""
    reads: int
    writes: int
    read_ms: int  # summed over requests: each one's time from start to completion
    write_ms: int
    in_queue_ms: int  # requests in flight, integrated over time (time_in_queue)
    flushes: int | None  # cache flushes completed (fsync's); None before Linux 5.5
    flush_ms: int | None

    def since(self, before: DiskStat) -> DiskStat:
        """What the disk did between `before` and this reading."""
        def less(now: int | None, then: int | None) -> int | None:
            return None if now is None or then is None else now - then

        return DiskStat(self.reads - before.reads, self.writes - before.writes,
                        self.read_ms - before.read_ms, self.write_ms - before.write_ms,
                        self.in_queue_ms - before.in_queue_ms,
                        less(self.flushes, before.flushes), less(self.flush_ms, before.flush_ms))

    def requests(self, write: bool) -> int:
        """Requests completed in one direction."""
        return self.writes if write else self.reads

    def requests_ms(self, write: bool) -> int:
        """Their time at the disk, summed over the requests."""
        return self.write_ms if write else self.read_ms


def disk_stat(disk: str, root: str = "/") -> DiskStat | None:
    """`disk`'s counters, or None where sysfs has no such device."""
    fields = (_read(Path(root, "sys/block", disk, "stat")) or "").split()
    if len(fields) < 11 or not all(x.isdigit() for x in fields):
        return None
    n = [int(x) for x in fields]
    flushes = (n[15], n[16]) if len(n) >= 17 else (None, None)
    return DiskStat(reads=n[0], writes=n[4], read_ms=n[3], write_ms=n[7], in_queue_ms=n[10],
                    flushes=flushes[0], flush_ms=flushes[1])


def max_request_bytes(disk: str, root: str = "/") -> int | None:
    """The largest request the block layer sends `disk` (queue/max_sectors_kb): a larger read
    is split whatever its buffer."""
    kb = _read(Path(root, "sys/block", disk, "queue/max_sectors_kb"))
    return int(kb) * 1024 if kb and kb.isdigit() and int(kb) > 0 else None


def storage_target(path: str, root: str = "/", mountinfo: str | None = None) -> StorageTarget:
    """What `path` is stored on. `path` must exist (the caller checks and says so)."""
    resolved = os.path.realpath(path)
    text = mountinfo if mountinfo is not None else (
        _read(Path(root, "proc/self/mountinfo")) or "")
    entry = mount_of(resolved, parse_mountinfo(text))
    st = os.statvfs(resolved)
    unavailable: dict[str, str] = {}
    if entry is None:
        unavailable["mount_point"] = "not found in /proc/self/mountinfo"
        entry = MountEntry("/", "unknown", "unknown", "0:0", ())
    read_only = "ro" in entry.options[:1] or not os.access(resolved, os.W_OK)
    fields: dict[str, object] = {}
    disk, why = whole_disk(entry.dev, root)
    if disk is None:
        unavailable["device"] = why or "not found"
    else:
        block = Path(root, "sys/block", disk)
        sys_path = os.path.realpath(block)
        fields["device"] = disk
        fields["transport"] = _transport(sys_path, disk)
        model = _read(block / "device/model") or _read(block / "dm/name")
        if model:
            fields["device_model"] = model
        else:
            unavailable["device_model"] = "no model in sysfs (virtual or unnamed disk)"
        rot = _read(block / "queue/rotational")
        fields["rotational"] = None if rot is None else rot == "1"
        lbs = _read(block / "queue/logical_block_size")
        fields["logical_block_bytes"] = int(lbs) if lbs and lbs.isdigit() else None
        sectors = _read(block / "size")
        fields["device_size_bytes"] = int(sectors) * 512 if sectors and sectors.isdigit() \
            else None
    return StorageTarget(
        path=resolved, mount_point=entry.mount_point, fs_type=entry.fs_type,
        mount_source=entry.source, network_fs=is_network_fs(entry.fs_type),
        read_only=read_only, free_bytes=st.f_bavail * st.f_frsize, unavailable=unavailable,
        **fields)
