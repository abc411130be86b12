"""bench.procs: a server's process tree, its CPU time and its memory lines, read from /proc for real processes."""

import subprocess
import sys
import time

from bench import procs

BUSY = "import subprocess, sys, time\nsubprocess.Popen([sys.executable, '-c', 'import time; time.sleep(30)'])\n"
BUSY += "end = time.process_time() + 0.3\nwhile time.process_time() < end: pass\ntime.sleep(30)\n"


def test_a_tree_is_counted_whole_and_a_gone_process_counts_nothing():
    parent = subprocess.Popen([sys.executable, "-c", BUSY])
    try:
        deadline = time.monotonic() + 20

        def started() -> bool:
            return len(procs.tree(parent.pid)) == 2 and procs.cpu_seconds([parent.pid]) >= 0.3

        while not started() and time.monotonic() < deadline:
            time.sleep(0.05)
        pids = procs.tree(parent.pid)
        assert pids[0] == parent.pid and len(pids) == 2  # the child it started is counted with it
        assert procs.cpu_seconds(pids) >= 0.3
        assert all(procs.status_kib(pid, "VmRSS") > 0 for pid in pids)
        assert procs.status_kib(parent.pid, "VmHWM") >= procs.status_kib(parent.pid, "VmRSS")
        assert procs.status_kib(parent.pid, "NoSuchLine") == 0
    finally:
        for pid in procs.tree(parent.pid)[1:]:
            subprocess.run(["kill", str(pid)], check=False)
        parent.kill()
        parent.wait()
    assert procs.cpu_seconds([parent.pid]) == 0.0 and procs.status_kib(parent.pid, "VmRSS") == 0
