"""Callers that hang up: a render stops computing and frees its slot; a half-sent body is no 500."""
import socket
import time

import httpx
import pytest

from tests.servers import Server


@pytest.fixture
def one_slot_server(model_repo):
    srv = Server(model_repo, "--log-level", "info",
                 env={"INR_RENDER_CONCURRENCY": "1", "INR_RENDER_TILE_SAMPLES": "1024"})
    with srv.running():
        yield srv


def test_a_disconnected_render_is_abandoned_and_frees_the_slot(one_slot_server):
    url = f"{one_slot_server.url}/v1/models/astronaut/render"
    big = {"width": 2000, "height": 2000, "format": "png"}  # ~4000 tiles: seconds of work
    with pytest.raises(httpx.ReadTimeout):
        httpx.get(url, params=big, timeout=httpx.Timeout(30.0, read=0.5))
    t0 = time.monotonic()
    r = httpx.get(url, params={"width": 8, "height": 8}, timeout=60.0)
    waited = time.monotonic() - t0
    assert r.status_code == 200
    one_slot_server.stop()
    log = one_slot_server.proc.stdout.read()
    assert "render of astronaut 2000x2000 abandoned: the client disconnected" in log, log[-2000:]
    assert waited < 30.0


def test_a_body_cut_off_midway_is_logged_quietly_not_as_a_server_error(one_slot_server):
    host, port = "127.0.0.1", one_slot_server.port
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(b"POST /v2/models/astronaut/infer HTTP/1.1\r\nHost: x\r\n"
                  b"Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{\"coords\": [[0.5,")
    time.sleep(0.5)
    assert httpx.get(f"{one_slot_server.url}/health/live", timeout=10).status_code == 200
    one_slot_server.stop()
    log = one_slot_server.proc.stdout.read()
    assert "client disconnected during POST /v2/models/astronaut/infer" in log, log[-2000:]
    assert "Traceback" not in log and "unexpected error" not in log, log[-3000:]
