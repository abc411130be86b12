"""SIGTERM with renders and classifies in flight, against the real server: the running requests
finish, readiness and new requests get 503 at once, and the process exits within the grace period
with the re-raised SIGTERM (uvicorn's way)."""

from __future__ import annotations

import http.client
import io
import re
import signal
import threading
import time

import httpx
import numpy as np
from PIL import Image

from tests.servers import HeldRequest, Server, in_flight, wait_for

GRACE = 60


def test_sigterm_drains_running_requests_and_refuses_new_ones(model_repo):
    """Two renders in flight by construction (headers sent, bodies held back until after the signal: they
    render during the drain), and three clients looping classifies on keep-alive connections."""
    srv = Server(
        model_repo,
        "--log-level",
        "info",
        env={
            "INR_GRACEFUL_SHUTDOWN_S": str(GRACE),
            "INR_BODY_TIMEOUT_S": str(GRACE),
            "INR_RENDER_TILE_SAMPLES": "1024",
        },
    )
    srv.wait_ready()
    classifies, errors = [], []

    def classify(seed: int):
        images = np.random.default_rng(seed).random((4, 784)).round(3).tolist()
        with httpx.Client(base_url=srv.url, timeout=GRACE) as c:  # keep-alive connection
            while True:
                try:
                    r = c.post("/v1/models/digits/classify", json={"images": images})
                except httpx.ConnectError:  # the listener is closed: refused, never half-answered
                    classifies.append("refused")
                    return
                except httpx.TransportError as e:
                    errors.append(repr(e))
                    return
                classifies.append(r.status_code)
                if r.status_code == 503:
                    assert r.headers["connection"] == "close" and "shutting down" in r.json()["error"]
                    return

    idle = in_flight(srv.url)  # the scrape itself
    renders = [
        HeldRequest(srv.url, "/v1/models/astronaut/render", {"width": 1200, "height": 1200, "supersample": 2})
        for _ in range(2)
    ]
    wait_for(lambda: in_flight(srv.url) >= idle + 2, 30, "the two renders in flight")
    threads = [threading.Thread(target=classify, args=(i,)) for i in range(3)]
    for t in threads:
        t.start()
    wait_for(lambda: classifies.count(200) >= 3, 60, "classifies answered before the signal")
    srv.proc.send_signal(signal.SIGTERM)
    t0 = time.monotonic()
    ready = httpx.get(f"{srv.url}/health/ready", timeout=10)
    assert ready.status_code == 503 and "shutting down" in ready.json()["error"]
    assert httpx.get(f"{srv.url}/health/live", timeout=10).status_code == 200
    late = httpx.post(f"{srv.url}/v1/models/digits/classify", json={"images": [[0.0] * 784]}, timeout=10)
    assert late.status_code == 503 and late.headers["retry-after"]
    for r in renders:
        r.release()
    answers = [r.answer() for r in renders]
    for t in threads:
        t.join(GRACE)
    srv.proc.wait(GRACE + 5)
    exited_after = time.monotonic() - t0
    log = srv.proc.stdout.read()

    assert errors == [], f"connections dropped mid-request: {errors}"
    assert [status for status, _, _ in answers] == [200, 200], log[-3000:]
    for _, _, png in answers:
        assert Image.open(io.BytesIO(png)).size == (1200, 1200)
    assert classifies.count(200) >= 3 and set(classifies) <= {200, 503, "refused"}, classifies
    assert srv.proc.returncode in (0, -signal.SIGTERM), log[-3000:]
    assert exited_after < GRACE
    assert re.search(r"SIGTERM: draining [2-5] running request", log), log[-3000:]
    try:
        httpx.get(f"{srv.url}/health/live", timeout=2)
        raise AssertionError("still answering after it exited")
    except httpx.ConnectError:
        pass


def test_a_render_cut_by_the_grace_period_ends_cleanly(model_repo):
    """A render that outlives INR_GRACEFUL_SHUTDOWN_S: the client gets an error status or a closed
    connection, the process exits, and no exception escapes in any thread (the tile workers used to
    raise InvalidStateError on the future that the cut request had cancelled). The render is in flight
    by construction (its body is held back until the signal has been sent, so it renders during the
    drain) and slow by construction: 2048² at supersample 8 is 268M samples in 262,144 tiles, 16 times
    the render that once had to be still running 1 s before the signal and 1 s after it."""
    srv = Server(
        model_repo,
        "--log-level",
        "info",
        env={
            "INR_GRACEFUL_SHUTDOWN_S": "1",
            "INR_BODY_TIMEOUT_S": "60",
            "INR_RENDER_TILE_SAMPLES": "1024",
            "INR_MAX_RENDER_PIXELS": str(2048 * 2048 * 64),
            "INR_RENDER_MAX_COST_S": "100000",  # dear on purpose: past the default cost ceiling
        },
    )
    srv.wait_ready()
    idle = in_flight(srv.url)
    render = HeldRequest(srv.url, "/v1/models/astronaut/render", {"width": 2048, "height": 2048, "supersample": 8})
    wait_for(lambda: in_flight(srv.url) >= idle + 1, 30, "the render in flight")
    srv.proc.send_signal(signal.SIGTERM)
    render.release()
    try:
        outcome = render.answer()[0]
    except (OSError, http.client.HTTPException) as e:  # the connection closed without an answer
        outcome = type(e).__name__
    srv.proc.wait(GRACE)
    log = srv.proc.stdout.read()
    assert outcome != 200, outcome
    assert not isinstance(outcome, int) or 500 <= outcome < 600, outcome
    assert "Traceback" not in log and "InvalidStateError" not in log, log[-3000:]
    assert srv.proc.returncode in (0, -signal.SIGTERM), log[-3000:]
