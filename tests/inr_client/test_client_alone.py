"""The client runs alone: `training`, torch and the service cannot be imported (the client is a package of its own)."""

from __future__ import annotations

import subprocess
import sys

from tests.servers import ROOT

# Python started with a finder that refuses `training`, `torch` and `service`, then runs the client as -m would.
HIDDEN = (
    "import sys, runpy\n"
    "class Hide:\n"
    "    def find_spec(self, name, path=None, target=None):\n"
    "        if name.split('.')[0] in ('training', 'torch', 'service'):\n"
    "            raise ModuleNotFoundError(f'No module named {name!r} (hidden by the test)')\n"
    "sys.meta_path.insert(0, Hide())\n"
    "sys.argv = ['inr_client', *sys.argv[1:]]\n"
    "runpy.run_module('inr_client', run_name='__main__', alter_sys=True)\n"
)


def client(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", HIDDEN, *args], cwd=ROOT, capture_output=True, text=True, timeout=60)


def test_the_hiding_works():
    r = subprocess.run(
        [sys.executable, "-c", HIDDEN.replace("inr_client", "training"), "--help"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert r.returncode != 0 and "hidden by the test" in r.stderr


def test_help_and_commands_work_without_training(server):
    r = client("--help")
    assert r.returncode == 0 and "models" in r.stdout, r.stderr
    r = client("--url", server.url, "models")
    assert r.returncode == 0 and "astronaut" in r.stdout, r.stderr
    r = client("--url", server.url, "query", "--model", "astronaut", "0.5,0.5")
    assert r.returncode == 0, r.stderr
    r = client("--url", server.url, "query", "--model", "astronaut", "0.5")
    assert r.returncode == 2 and r.stderr.startswith("error:"), r.stderr
