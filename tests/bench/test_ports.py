"""bench/ports.py: the ports the tests' and benchmarks' servers listen on. Two processes asking at once never get
the same one, a port another program holds is never given, and each is below the kernel's range for outgoing
connections, so no client can take it between the choice and the server's bind."""

from __future__ import annotations

import os
import socket
import subprocess
import sys

from bench import ports
from bench.ports import HIGH, LOW, free_port

ASK = "from bench.ports import free_port; import sys; print(*[free_port() for _ in range(100)]); sys.stdin.read()"


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
    monkeypatch.setattr(ports, "LOW", base)
    monkeypatch.setattr(ports, "HIGH", base + 3)
    others = []
    try:
        for port in (base, base + 2):
            s = socket.socket()
            s.bind(("127.0.0.1", port))
            others.append(s)
        while ports._held:  # this process's own reservations let go: only the other program's sockets stay
            os.close(ports._held.popleft())
        for _ in range(20):  # each time the one left, then given back (a process's own reservation excludes it too)
            assert free_port() == base + 1
            os.close(ports._held.pop())
    finally:
        for s in others:
            s.close()
