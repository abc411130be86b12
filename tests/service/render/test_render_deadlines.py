"""Render deadlines and slot timeouts over HTTP: a render past INR_RENDER_TIMEOUT_S answers 503 naming the
setting and frees its slot; one that waits longer than INR_QUEUE_TIMEOUT_S for a slot gets 503 with
Retry-After; both are counted in /metrics."""

from __future__ import annotations

import re
import threading

import httpx
import pytest

from tests.servers import Server

URL = "/v1/models/astronaut/render"
RENDER_QUEUE = 'model="astronaut",queue="render"'
BIG = {"width": 3000, "height": 3000}  # 9M samples in 256-sample tiles: far more than the 1 s deadline


@pytest.fixture(scope="module")
def strict(model_repo):
    srv = Server(
        model_repo,
        env={
            "INR_RENDER_CONCURRENCY": "1",
            "INR_RENDER_WORKERS": "1",
            "INR_RENDER_TIMEOUT_S": "1",
            "INR_QUEUE_TIMEOUT_S": "0.3",
            "INR_RENDER_TILE_SAMPLES": "256",
            "INR_MAX_RENDER_PIXELS": "16000000",
            # admission by cost out of the way (tests/security/test_render_flood.py tests it): no ceiling, one lane
            # for every render, no share, as a deadline and a slot's wait are what this module tests
            "INR_RENDER_MAX_COST_S": "1000000",
            "INR_RENDER_CHEAP_COST_S": "0",
            "INR_RENDER_CALLER_SHARE": "64",
        },
    )
    with srv.running():
        yield srv


def counter(url: str, name: str, labels: str = 'model="astronaut"') -> float:
    m = re.search(rf"^{name}_total{{{labels}}} (\S+)$", httpx.get(url + "/metrics").text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_render_past_its_deadline_answers_503_and_frees_its_slot(strict):
    before = counter(strict.url, "inr_render_deadline_exceeded")
    r = httpx.post(strict.url + URL, json=BIG, timeout=30)
    assert r.status_code == 503
    error = r.json()["error"]
    assert "INR_RENDER_TIMEOUT_S" in error and "tiles" in error
    assert counter(strict.url, "inr_render_deadline_exceeded") == before + 1
    # the only slot is free again: a small render gets it at once (a held slot would time out in 0.3 s)
    small = httpx.get(strict.url + URL, params={"width": 8, "height": 8}, timeout=30)
    assert small.status_code == 200 and small.headers["content-type"] == "image/png"


def test_a_render_that_cannot_get_a_slot_in_time_answers_503_with_retry_after(strict):
    before = counter(strict.url, "inr_queue_timeouts", RENDER_QUEUE)
    started = threading.Event()
    big: dict = {}

    def hold_the_slot():
        started.set()
        big["r"] = httpx.post(strict.url + URL, json={**BIG, "transform": {"rotate": 1}}, timeout=30)

    t = threading.Thread(target=hold_the_slot)
    t.start()
    started.wait()
    # wait until the big render holds the slot (it stops at its deadline, 1 s)
    for i in range(50):  # a new render each time: a repeat would come from the render cache, slot-free
        r = httpx.get(strict.url + URL, params={"width": 9, "height": 9, "rotate": i}, timeout=30)
        if r.status_code == 503:
            break
    t.join()
    assert r.status_code == 503 and int(r.headers["retry-after"]) >= 1
    error = r.json()["error"]
    assert "INR_QUEUE_TIMEOUT_S" in error and "INR_RENDER_CONCURRENCY" in error
    assert counter(strict.url, "inr_queue_timeouts", RENDER_QUEUE) >= before + 1
    assert big["r"].status_code == 503 and "INR_RENDER_TIMEOUT_S" in big["r"].json()["error"]
    assert httpx.get(strict.url + "/health/ready").status_code == 200
