"""Free ports for the servers the benchmarks and the tests start, safe when several of them start servers at once
(pytest-xdist workers, two sessions' suites).

Asking the kernel for port 0 and closing the socket races: the port is free again until the server binds it,
and the kernel hands the same range (`ip_local_port_range`, 32768–60999 here) to every outgoing connection, so
a test's HTTP client could take it first. These ports come from below that range instead, each reserved by an
exclusive lock on a file in a folder of this user's, held until this process exits (or has taken `KEEP` more):
no two processes using this module get the same one, and one another program holds is skipped (it cannot be
bound)."""

from __future__ import annotations

import collections
import fcntl
import os
import random
import socket
import tempfile
from pathlib import Path

LOW, HIGH = 20_000, 32_000  # below the kernel's ephemeral range
KEEP = 256  # reservations one process holds; past that its oldest ends (that server is long gone)
_held: collections.deque[int] = collections.deque()  # the lock files' descriptors


def _folder() -> Path:
    d = Path(tempfile.gettempdir()) / f"inr-serve-ports-{os.getuid()}"
    d.mkdir(mode=0o700, exist_ok=True)
    if d.is_symlink() or d.stat().st_uid != os.getuid():
        raise RuntimeError(f"{d} is not this user's own folder")
    return d


def _bindable(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
    return True


def free_port(n: int = 1) -> int:
    """A port p such that p … p+n−1 are free now and no other process using this function will be given them."""
    folder, rng = _folder(), random.Random()
    for _ in range(2000):
        base = rng.randrange(LOW, HIGH - n)
        fds = []
        for p in range(base, base + n):
            fd = os.open(folder / str(p), os.O_CREAT | os.O_RDWR, 0o600)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                break
            fds.append(fd)
            if not _bindable(p):
                break
        else:
            _held.extend(fds)
            while len(_held) > KEEP:
                os.close(_held.popleft())
            return base
        for fd in fds:
            os.close(fd)  # releases its lock
    raise RuntimeError(f"no {n} free consecutive ports in {LOW}–{HIGH}")
