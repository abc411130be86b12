"""deploy/healthcheck.py (the image's HEALTHCHECK) against the real service and real sockets."""

from __future__ import annotations

import http.server
import os
import subprocess
import sys
import threading
import time

import httpx
import pytest

from bench.common import free_port

from .conftest import ROOT

HEALTHCHECK = ROOT / "deploy" / "healthcheck.py"


def run_check(port: int) -> subprocess.CompletedProcess:
    env = {**os.environ, "INR_PORT": str(port)}
    return subprocess.run([sys.executable, str(HEALTHCHECK)], env=env, capture_output=True, text=True, timeout=20)


@pytest.fixture(scope="module")
def service(tmp_path_factory):
    port = free_port()
    models = tmp_path_factory.mktemp("models")
    env = {**os.environ, "INR_MODELS": str(models), "INR_PORT": str(port), "INR_HOST": "127.0.0.1"}
    proc = subprocess.Popen(
        [sys.executable, "-m", "service"], cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            try:
                if httpx.get(f"http://127.0.0.1:{port}/health/live", timeout=1).status_code == 200:
                    break
            except httpx.TransportError:
                time.sleep(0.2)
        else:
            pytest.fail("the service did not start")
        yield port
    finally:
        proc.terminate()
        proc.wait(timeout=15)


def test_healthcheck_passes_when_the_service_is_ready(service):
    result = run_check(service)
    assert result.returncode == 0, result.stderr


def test_healthcheck_fails_when_nothing_listens():
    result = run_check(free_port())
    assert result.returncode == 1
    assert result.stderr.startswith("unhealthy: http://127.0.0.1:")


def test_healthcheck_fails_when_ready_is_not_200():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), http.server.BaseHTTPRequestHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        result = run_check(server.server_address[1])
    finally:
        server.shutdown()
    assert result.returncode == 1
    assert "answered 501" in result.stderr
