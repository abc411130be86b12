"""Callers that hang up: a render stops computing and frees its slot; a half-sent body is no 500."""

import http.client
import socket
import time

import httpx
import pytest

from tests.servers import Server, in_flight, wait_for


@pytest.fixture
def one_slot_server(model_repo):
    srv = Server(
        model_repo,
        "--log-level",
        "info",
        env={
            "INR_RENDER_CONCURRENCY": "1",
            "INR_RENDER_TILE_SAMPLES": "1024",
            "INR_MAX_RENDER_PIXELS": str(2000 * 2000 * 64),
            "INR_RENDER_MAX_COST_S": "100000",  # dear on purpose: past the default cost ceiling
        },
    )
    with srv.running():
        yield srv


def test_a_disconnected_render_is_abandoned_and_frees_the_slot(one_slot_server):
    """The big render is slow by construction (2000² at supersample 8: 256M samples, minutes of work) and
    the client hangs up once the server counts it in flight (was: a 0.5 s read timeout on a 4M-sample
    render, seconds on this machine and not much more than that on a fast one). Only an abandoned render
    frees the one slot before the small render's wait for it hits INR_QUEUE_TIMEOUT_S (10 s, then 503)."""
    idle = in_flight(one_slot_server.url)
    conn = http.client.HTTPConnection("127.0.0.1", one_slot_server.port, timeout=30)
    conn.request("GET", "/v1/models/astronaut/render?width=2000&height=2000&supersample=8&format=png")
    wait_for(lambda: in_flight(one_slot_server.url) >= idle + 1, 30, "the big render in flight")
    conn.close()  # hang up without reading
    r = httpx.get(f"{one_slot_server.url}/v1/models/astronaut/render", params={"width": 8, "height": 8}, timeout=60.0)
    assert r.status_code == 200, r.text
    one_slot_server.stop()
    log = one_slot_server.proc.stdout.read()
    assert "render of astronaut 2000x2000 abandoned: the client disconnected" in log, log[-2000:]


def test_a_body_cut_off_midway_is_logged_quietly_not_as_a_server_error(one_slot_server):
    host, port = "127.0.0.1", one_slot_server.port
    with socket.create_connection((host, port), timeout=5) as s:
        s.sendall(
            b"POST /v2/models/astronaut/infer HTTP/1.1\r\nHost: x\r\n"
            b'Content-Type: application/json\r\nContent-Length: 1000\r\n\r\n{"coords": [[0.5,'
        )
    time.sleep(0.5)
    assert httpx.get(f"{one_slot_server.url}/health/live", timeout=10).status_code == 200
    one_slot_server.stop()
    log = one_slot_server.proc.stdout.read()
    assert "client disconnected during POST /v2/models/astronaut/infer" in log, log[-2000:]
    assert "Traceback" not in log and "unexpected error" not in log, log[-3000:]
