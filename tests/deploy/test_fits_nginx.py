"""The nginx template run by the local nginx in front of a stand-in backend (no container): Server-Sent
Events on /v1/fits/ID/events reach the client as the backend sends them, even from a backend that does
not ask for it with `X-Accel-Buffering: no`; a 20 MiB upload passes /v1/fits while other routes keep
16m. tests/containers/test_fits.py runs the same through nginx in the compose stack with the real API."""

from __future__ import annotations

import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest

from .nginxconf import LocalNginx

HOLD_S = 20  # the longest the backend holds event 2 back, waiting for the client to have event 1


class Backend(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    bodies: list[tuple[str, int]] = []
    got_first = threading.Event()  # set by the test when event 1 has reached it
    second_after_first: list[bool] = []  # per stream: was event 2 sent only after event 1 had arrived?

    def log_message(self, *args):
        pass

    def do_GET(self):
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")  # no X-Accel-Buffering: nginx's config decides
        self.send_header("Connection", "close")
        self.end_headers()
        for seq in (1, 2):
            if seq == 2:  # by construction: event 2 goes out only once the client has event 1
                Backend.second_after_first.append(Backend.got_first.wait(HOLD_S))
            self.wfile.write(f'id: {seq}\nevent: progress\ndata: {{"sent": {time.time()}}}\n\n'.encode())
            self.wfile.flush()

    def do_POST(self):
        length = int(self.headers["Content-Length"])
        remaining = length
        while remaining:
            remaining -= len(self.rfile.read(min(remaining, 1 << 20)))
        Backend.bodies.append((self.path, length))
        body = b'{"ok": true}'
        self.send_response(202)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)


@pytest.fixture(scope="module")
def nginx(tmp_path_factory):
    backend = ThreadingHTTPServer(("127.0.0.1", 0), Backend)
    threading.Thread(target=backend.serve_forever, daemon=True).start()
    local = LocalNginx(tmp_path_factory.mktemp("nginx"), [f"127.0.0.1:{backend.server_port}"])
    yield local.url
    local.stop()
    backend.shutdown()


def test_events_reach_the_client_as_they_are_sent(nginx):
    """The backend sends event 2 only once event 1 has reached the client (or after HOLD_S): a buffering
    nginx holds event 1 back, so event 2 goes out late and unasked. (Was: a 1.5 s gap between the sends
    measured as more than 1.05 s between the arrivals, which a client descheduled at the first one missed.)"""
    Backend.got_first.clear()
    Backend.second_after_first.clear()
    ids = []
    with httpx.stream("GET", nginx + "/v1/fits/f3a9c2e1d0b4/events", timeout=2 * HOLD_S) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("id:"):
                ids.append(line)
                Backend.got_first.set()
    assert ids == ["id: 1", "id: 2"]
    assert Backend.second_after_first == [True], "the first event was held back until the second"


def test_a_64_mib_upload_passes_to_v1_fits_and_not_elsewhere(nginx):
    body = b"x" * (64 * (1 << 20) + 50_000)  # an upload of a 20 MP uncompressed TIFF plus some envelope
    Backend.bodies.clear()
    r = httpx.post(
        nginx + "/v1/fits", content=body, headers={"Content-Type": "multipart/form-data; boundary=b"}, timeout=60
    )
    assert r.status_code == 202 and Backend.bodies == [("/v1/fits", len(body))]
    r = httpx.post(nginx + "/v1/models/astronaut/render", content=body, timeout=60)
    assert r.status_code == 413 and len(Backend.bodies) == 1, "only the upload route takes more than 16m"
