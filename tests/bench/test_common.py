"""bench/common.py: what it reads of a server's processes in /proc (their tree, CPU time and memory lines, for
real processes), and the ports the tests' and benchmarks' servers listen on. Two processes asking at once never get
the same one, a port another program holds is never given, and each is below the kernel's range for outgoing
connections, so no client can take it between the choice and the server's bind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time

from bench import common
from bench.common import HIGH, LOW, free_port

ASK = "from bench.common import free_port; import sys; print(*[free_port() for _ in range(100)]); sys.stdin.read()"

BUSY = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
BUSY += "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)\n"


def test_two_processes_asking_at_once_get_different_ports():
    procs = [
        subprocess.Popen([sys.executable, "-c", ASK], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        for _ in range(2)
    ]
    try:
        got = [set(map(int, p.stdout.readline().split())) for p in procs]  # both still hold theirs here
    finally:
        for p in procs:
            p.communicate("")
    assert len(got[0]) == len(got[1]) == 100 and not got[0] & got[1]
    assert all(LOW <= port < HIGH for port in got[0] | got[1])
    low, _ = map(int, open("/proc/sys/net/ipv4/ip_local_port_range").read().split())
    assert HIGH <= low  # below the ephemeral range of this machine


def test_a_block_of_ports_binds_and_ports_held_by_other_programs_are_skipped(monkeypatch):
    base = free_port(5)
    for port in range(base, base + 5):  # all five bind
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))
    base = free_port(3)  # three ports of which a program that does not use this module holds two
    monkeypatch.setattr(common, "LOW", base)
    monkeypatch.setattr(common, "HIGH", base + 3)
    others = []
    try:
        for port in (base, base + 2):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            others.append(s)
        while common._held:  # this process's own reservations let go: only the other program's sockets stay
            os.close(common._held.popleft())
        for _ in range(20):  # each time the one left, then given back (a process's own reservation excludes it too)
            assert free_port() == base + 1
            os.close(common._held.pop())
    finally:
        for s in others:
            s.close()


def test_a_tree_is_counted_whole_and_a_gone_process_counts_nothing():
    parent = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        deadline = time.monotonic() + 20

        def started() -> bool:
            return len(common.tree(parent.pid)) == 2 and common.cpu_seconds([parent.pid]) >= 0.3

        while not started() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = common.tree(parent.pid)
        assert pids[0] == parent.pid and len(pids) == 2  # the child it started is counted with it
        assert common.cpu_seconds(pids) >= 0.3
        assert all(common.status_kib(pid, "VmRSS") > 0 for pid in pids)
        assert common.status_kib(parent.pid, "VmHWM") >= common.status_kib(parent.pid, "VmRSS")
        assert common.status_kib(parent.pid, "NoSuchLine") == 0
    finally:
        for pid in common.tree(parent.pid)[1:]:
            subprocess.run(["kill", str(pid)], check=False)
        parent.kill()
        parent.wait()
    assert common.cpu_seconds([parent.pid]) == 0.0 and common.status_kib(parent.pid, "VmRSS") == 0
