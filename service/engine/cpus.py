"""The CPUs this process may use, for the default thread counts: its affinity mask, capped by a cgroup quota
(a container's `cpus:` limit, Kubernetes' CPU limit)."""

from __future__ import annotations

import math
import os
from pathlib import Path


def cgroup_cpu_limit(
    cpu_max: str | None = None, quota_us: str | None = None, period_us: str | None = None
) -> int | None:
    """CPUs allowed by a cgroup quota: v2 `cpu.max` ("200000 100000" or "max 100000") or
    v1 `cpu.cfs_quota_us` / `cpu.cfs_period_us`. None when there is no quota."""
    try:
        if cpu_max is not None:
            quota, period = cpu_max.split()[:2]
            if quota == "max":
                return None
            return max(1, math.ceil(int(quota) / int(period)))
        if quota_us is not None and period_us is not None and int(quota_us) > 0:
            return max(1, math.ceil(int(quota_us) / int(period_us)))
    except (ValueError, ZeroDivisionError):
        return None
    return None


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def available_cpus() -> int:
    """CPUs this process may use: its affinity mask, capped by the cgroup CPU quota."""
    try:
        n = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        n = os.cpu_count() or 1
    limit = cgroup_cpu_limit(
        _read("/sys/fs/cgroup/cpu.max"),
        _read("/sys/fs/cgroup/cpu/cpu.cfs_quota_us"),
        _read("/sys/fs/cgroup/cpu/cpu.cfs_period_us"),
    )
    return max(1, min(n, limit) if limit else n)


def default_threads(workers: int = 1) -> int:
    return max(1, available_cpus() // max(1, workers))
