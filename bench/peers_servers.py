"""The servers of `python -m bench.peers`: each in a process group of its own, waited for, stopped as a group;
the peers' versions, the CPU's AVX flags, a server's idle CPU, and the wait for a server to finish its backlog."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from pathlib import Path

import httpx

from .common import lscpu
from .serving import Server, free_port

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = {"kserve": "kserve", "litserve": "litserve", "bentoml": "bentoml"}


class PeerServer(Server):
    """One server process (and its children) in a session of its own, stopped as a group."""

    def __init__(self, name: str, cmd: list[str], ready: str, env: dict, log_path: Path, cwd: Path = ROOT):
        self.name, self.port, self.ready, self.log_path = name, free_port(), ready, log_path
        self.url = f"http://127.0.0.1:{self.port}"
        grpc = str(free_port())  # ours: each its own gRPC port, so that two of ours can run at once
        self.cmd = [a.replace("{port}", str(self.port)).replace("{grpc_port}", grpc) for a in cmd]
        with open(
            log_path, "wb"
        ) as out:  # `python -m` imports from its working directory first: ROOT's, or --baseline's
            self.proc = subprocess.Popen(
                self.cmd,
                cwd=cwd,
                env={**os.environ, **env},
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def wait(self, timeout: float = 180) -> "PeerServer":
        end = time.monotonic() + timeout
        while time.monotonic() < end:
            if self.proc.poll() is not None:
                tail = self.log_path.read_text(errors="replace").strip().splitlines()[-1:] or ["no output"]
                raise RuntimeError(f"{self.name} exited with code {self.proc.returncode}: {tail[0]}")
            try:
                if httpx.get(self.url + self.ready, timeout=2).status_code == 200:
                    return self
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise RuntimeError(f"{self.name} was not ready on {self.ready} after {timeout:g} s")

    def stop(self) -> None:
        for sig, grace in ((signal.SIGTERM, 15), (signal.SIGKILL, 5)):
            try:
                os.killpg(self.proc.pid, sig)
            except ProcessLookupError:
                return
            try:
                self.proc.wait(grace)
                return
            except subprocess.TimeoutExpired:
                continue


def peer_versions(python: str, names: list[str]) -> dict[str, str]:
    code = "import importlib.metadata as m, json, sys; print(json.dumps({n: m.version(n) for n in sys.argv[1:]}))"
    pkgs = [PACKAGES[n] for n in names if n in PACKAGES] + ["onnxruntime"]
    out = subprocess.run([python, "-c", code, *pkgs], capture_output=True, text=True, timeout=60)
    if out.returncode != 0:
        raise RuntimeError(
            f"--peer-python {python} lacks {', '.join(pkgs)}: {(out.stderr.strip().splitlines() or ['?'])[-1]}"
        )
    return json.loads(out.stdout)


def simd_flags() -> list[str]:
    """The AVX flags lscpu reports (onnxruntime's kernels depend on them)."""
    return lscpu().get("avx", [])


def idle_cpu(servers: dict[str, PeerServer], seconds: float = 3.0) -> dict[str, float]:
    """CPU share (%) each server burns with no requests: a polling server would tax its neighbours."""
    before = {n: s.cpu_seconds() for n, s in servers.items()}
    time.sleep(seconds)
    return {n: round((s.cpu_seconds() - before[n]) * 100 / seconds, 1) for n, s in servers.items()}


def settle(server: PeerServer, timeout: float = 30.0) -> None:
    """Wait until the server has finished what wrk left in flight (its CPU use falls under 5 % of a core),
    so that no backlog spills into the next run, its own or another server's."""
    end, cpu = time.monotonic() + timeout, server.cpu_seconds()
    while time.monotonic() < end:
        time.sleep(0.25)
        cpu, before = server.cpu_seconds(), cpu
        if cpu - before < 0.0125:
            return
