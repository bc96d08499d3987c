"""XID errors as the kernel log tells them: each line names the GPU by its PCI bus id.

    NVRM: Xid (PCI:0000:18:00): 79, pid=1234, GPU has fallen off the bus.
    NVRM: Xid (0000:18:00): 13, Graphics Exception          (older drivers: no "PCI:")

`inspect` reads the whole log once (dmesg); the monitor follows /dev/kmsg and takes only the
lines written since it started, the way it takes NVML's XID events.
"""

from __future__ import annotations

import contextlib
import os
import re
import subprocess
from collections import Counter

_XID = re.compile(r"NVRM: Xid \((?:PCI:)?([0-9a-fA-F]{1,8}:[0-9a-fA-F]{2}:[0-9a-fA-F]{2})"
                  r"(?:\.[0-7])?\): (\d+)")


def xid_bus(bus_id: str) -> str:
    """The key a kernel-log XID and a GPU share: '0000:18:00' from '00000000:18:00.0' too."""
    bus_id = bus_id.strip().lower()
    if bus_id.count(":") == 2:
        domain, bus, rest = bus_id.split(":")
        return f"{domain[-4:].rjust(4, '0')}:{bus}:{rest.split('.')[0]}"
    return bus_id


def parse_kernel_xids(kernel_log: str) -> list[tuple[str, int]]:
    """(bus key, XID code) for every XID line, in log order."""
    return [(xid_bus(m.group(1)), int(m.group(2))) for m in _XID.finditer(kernel_log)]


def parse_xids_by_bus(kernel_log: str) -> dict[str, dict[int, int]]:
    """bus key → XID code → count."""
    out: dict[str, Counter[int]] = {}
    for bus, code in parse_kernel_xids(kernel_log):
        out.setdefault(bus, Counter())[code] += 1
    return {bus: dict(codes) for bus, codes in out.items()}


def parse_xids(kernel_log: str) -> dict[int, int]:
    """XID code → count over every GPU."""
    return dict(Counter(code for _, code in parse_kernel_xids(kernel_log)))


def read_kernel_xids() -> tuple[dict[str, dict[int, int]] | None, str | None]:
    """XIDs in the kernel log by bus, or (None, why not). Containers usually may not read it."""
    try:
        out = subprocess.run(["dmesg"], capture_output=True, text=True, timeout=10)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return None, f"dmesg could not run: {exc}"
    if out.returncode != 0:
        return None, f"kernel log not readable: {out.stderr.strip() or 'dmesg failed'}"
    return parse_xids_by_bus(out.stdout), None


class KmsgFollower:
    """XID lines written to the kernel log since the last call (the first call: since this
    object was made). Reads /dev/kmsg without blocking; `reason` says why it cannot."""

    def __init__(self, path: str = "/dev/kmsg") -> None:
        self.reason: str | None = None
        self._fd: int | None = None
        try:
            self._fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)
            os.lseek(self._fd, 0, os.SEEK_END)  # what was logged before we started is history
        except OSError as exc:
            self.reason = f"cannot follow the kernel log ({path}): {exc.strerror or exc}"
            self.close()

    def close(self) -> None:
        if self._fd is not None:
            with contextlib.suppress(OSError):
                os.close(self._fd)
            self._fd = None

    def new_xids(self) -> list[tuple[str, int]]:
        if self._fd is None:
            return []
        found: list[tuple[str, int]] = []
        while True:
            try:
                record = os.read(self._fd, 8192)  # one record per read
            except BlockingIOError:
                return found
            except BrokenPipeError:
                continue  # the ring buffer overwrote records we had not read: go on
            except OSError as exc:
                self.reason = f"kernel log read failed: {exc.strerror or exc}"
                self.close()
                return found
            if not record:
                return found
            found.extend(parse_kernel_xids(record.decode(errors="replace")))
