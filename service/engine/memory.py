"""The process's memory, for the model memory budget (service/engine/residency.py): byte sizes as settings write
them, the memory this process may use (a container's limit, else the machine's), its resident set, and giving
a model's freed memory back to the system.

A model's bytes are measured, not guessed: the growth of this process's resident set (/proc/self/statm) across its
load and warmup, with loads measured one at a time (residency.Residency).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import logging
import os
import re
from pathlib import Path

from commandline import parse_bytes

log = logging.getLogger(__name__)
NO_LIMIT = 2**60  # cgroup v1 writes its "no limit" as a number near 2^63
DEFAULT_SHARE = 0.5  # the default budget: this share of the memory the process may use
PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096


def format_bytes(n: float) -> str:
    for unit, size in (("GiB", 1024**3), ("MiB", 1024**2), ("KiB", 1024)):
        if abs(n) >= size:
            return f"{n / size:.1f} {unit}"
    return f"{int(n)} B"


def _read(path: str) -> str | None:
    try:
        return Path(path).read_text().strip()
    except OSError:
        return None


def memory_limit() -> tuple[int, str]:
    """(bytes, where from): the cgroup's memory limit (v2 memory.max, v1 memory.limit_in_bytes) when there is
    one, else the machine's memory (MemTotal)."""
    for path in ("/sys/fs/cgroup/memory.max", "/sys/fs/cgroup/memory/memory.limit_in_bytes"):
        text = _read(path)
        if text and text != "max" and text.isdigit() and int(text) < NO_LIMIT:
            return int(text), "the container's memory limit"
    meminfo = _read("/proc/meminfo") or ""
    m = re.search(r"^MemTotal:\s+(\d+) kB", meminfo, re.M)
    return (int(m.group(1)) * 1024 if m else 4 * 1024**3), "the machine's memory"


def default_budget() -> tuple[int, str]:
    """The budget when none is set: DEFAULT_SHARE of memory_limit(), and a sentence saying so."""
    limit, where = memory_limit()
    budget = int(limit * DEFAULT_SHARE)
    return budget, f"{DEFAULT_SHARE:.0%} of {where} ({format_bytes(limit)})"


def budget(setting: str) -> tuple[int, str]:
    """(bytes, where from) of the memory budget: `setting` (--memory-budget, INR_MEMORY_BUDGET) when set, else
    default_budget()."""
    if setting:
        return parse_bytes(setting), "--memory-budget / INR_MEMORY_BUDGET"
    return default_budget()


def rss() -> int:
    """This process's resident set now, in bytes."""
    text = _read("/proc/self/statm")
    return int(text.split()[1]) * PAGE if text else 0


def reset_peak() -> bool:
    """Start this process's peak resident set (VmHWM) again from now (Linux's clear_refs 5); False where it cannot."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


def peak_rss() -> int:
    """This process's peak resident set since the start or the last `reset_peak`, in bytes (0 where unknown)."""
    m = re.search(r"^VmHWM:\s+(\d+) kB", _read("/proc/self/status") or "", re.M)
    return int(m.group(1)) * 1024 if m else 0


@functools.cache
def _libc():
    """The C library, found once (find_library runs ldconfig); None where it cannot be loaded."""
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6")
    except OSError:
        return None


def _malloc_trim():
    """glibc's malloc_trim; None on other C libraries."""
    return getattr(_libc(), "malloc_trim", None)


M_ARENA_MAX = -8  # glibc's malloc.h


def one_malloc_arena() -> bool:
    """Keep glibc's malloc to one arena in this process and the worker processes it starts (MALLOC_ARENA_MAX=1),
    unless the operator set MALLOC_ARENA_MAX. With an arena per thread, the memory of unloaded models stayed in
    the arenas of the threads that had loaded them: under constant eviction the resident set crept ~330 MiB over
    the budget's bytes in two minutes, against ~110 MiB with one arena, at the same tile rate (docs/benchmarks.md,
    collection). True when set here."""
    if "MALLOC_ARENA_MAX" in os.environ:
        return False
    os.environ["MALLOC_ARENA_MAX"] = "1"
    mallopt = getattr(_libc(), "mallopt", None)
    return mallopt is not None and mallopt(M_ARENA_MAX, 1) == 1


def trim() -> None:
    """Give free heap memory back to the system after an unload (glibc's malloc_trim, which also returns free pages
    inside the heap); nothing on other C libraries."""
    call = _malloc_trim()
    if call is not None:
        call(0)
