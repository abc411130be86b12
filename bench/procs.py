"""One place for what the benchmarks read of a server's processes in /proc: its process tree, their CPU time
(user + system) and their memory lines, so that every server, ours, a baseline's or a peer's, is counted the same way.
A process that has exited counts nothing."""

from __future__ import annotations

import os
from pathlib import Path


def tree(pid: int) -> list[int]:
    """`pid` and its descendants (a server's worker processes), found through /proc."""
    children: dict[int, list[int]] = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        children.setdefault(int(fields[1]), []).append(int(stat.parent.name))
    out, todo = [], [pid]
    while todo:
        out.append(todo.pop())
        todo += children.get(out[-1], [])
    return out


def cpu_seconds(pids: list[int]) -> float:
    """CPU time (user + system, /proc/PID/stat fields 14 and 15) of the processes so far."""
    tick, total = os.sysconf("SC_CLK_TCK"), 0.0
    for pid in pids:
        try:
            fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        total += (int(fields[11]) + int(fields[12])) / tick
    return total


def status_kib(pid: int, key: str) -> int:
    """A memory line of /proc/PID/status in KiB (VmRSS, VmHWM, …); 0 when the process is gone or has no such line."""
    try:
        lines = Path(f"/proc/{pid}/status").read_text().splitlines()
    except OSError:
        return 0
    return next((int(line.split()[1]) for line in lines if line.startswith(key + ":")), 0)
