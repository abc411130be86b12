"""Fits over HTTP in the compose stack (docs/fits.md): `docker compose up` runs the api behind
nginx and the `trainer` (the worker, from the train image). An image POSTed to /v1/fits through nginx is
fitted by the trainer, its Server-Sent Events stream through nginx in order until `succeeded`, and the
new version, written into ./models as the host user, is served by the api (poll mode) through v1 query,
render and IIIF, without a restart. Then: with no worker, a fit queues and says so, and the trainer
started again fits it; and nginx lets a full-size upload reach the service's own limit."""

from __future__ import annotations

import io
import json
import os
import time

import httpx
import numpy as np
import pytest
from PIL import Image, ImageDraw

from .stack import Stack

NAME = "photo-http"
OPTIONS = {"preset": "fourier-small", "size": "32", "steps": "40", "seed": "1"}
FINAL = {"succeeded", "failed", "cancelled"}


UPLOAD_LIMIT = 20 << 20


@pytest.fixture(scope="module")
def stack(make_stack, report) -> Stack:
    s = make_stack("fits")
    s.env["INR_FIT_MAX_UPLOAD_BYTES"] = str(UPLOAD_LIMIT)  # compose's default is 3 GiB: too much to send here
    report["fits_time_to_healthy_s"] = round(s.up(1), 1)
    return s


def photo(seed: int = 0) -> bytes:
    """A small RGB picture with edges and a gradient: something a 40-step fit visibly learns."""
    rng = np.random.default_rng(seed)
    x = np.linspace(0, 255, 48, dtype=np.float32)
    rgb = np.stack([np.tile(x, (40, 1)), np.tile(x[::-1], (40, 1)), np.full((40, 48), 128.0)], axis=-1)
    image = Image.fromarray(rgb.astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(image)
    draw.ellipse((10, 8, 30, 28), fill=tuple(int(v) for v in rng.integers(0, 255, 3)))
    draw.rectangle((30, 20, 44, 36), fill=(20, 20, 20))
    buf = io.BytesIO()
    image.save(buf, "PNG")
    return buf.getvalue()


def submit(http: httpx.Client, name: str, seed: int = 0) -> dict:
    r = http.post("/v1/fits", files={"file": (f"{name}.png", photo(seed), "image/png")}, data={**OPTIONS, "name": name})
    assert r.status_code == 202, r.text
    record = r.json()
    assert r.headers["location"] == record["links"]["self"] == f"/v1/fits/{record['id']}"
    return record


def follow(stack: Stack, path: str, timeout: float = 300) -> list[tuple[float, int | None, str, dict]]:
    """Read the SSE stream through nginx until the final event: (arrival s, id, type, data) each. The id is None
    for the `progress` events a job fitted in pieces gets from its pieces, which are not stored (docs/fits.md)."""
    events, fields, t0 = [], {}, time.monotonic()
    with httpx.stream("GET", stack.url + path, timeout=httpx.Timeout(10, read=60)) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            assert time.monotonic() - t0 < timeout, f"no final event after {timeout} s: {events[-3:]}"
            if line.startswith(":"):
                continue
            if line:
                key, _, value = line.partition(":")
                fields[key] = value.removeprefix(" ")
                continue
            if "event" in fields:
                seq = int(fields["id"]) if "id" in fields else None
                events.append((time.monotonic() - t0, seq, fields["event"], json.loads(fields["data"])))
                if fields["event"] in FINAL:
                    break
            fields = {}
    return events


def wait_served(http: httpx.Client, name: str, version: int, timeout: float = 60) -> float:
    t0 = time.monotonic()
    while True:
        r = http.get(f"/v1/models/{name}")
        if r.status_code == 200 and r.json().get("status") == "ready" and r.json().get("version") == version:
            return time.monotonic() - t0
        assert time.monotonic() - t0 < timeout, f"{name} version {version} not served after {timeout} s: {r.text}"
        time.sleep(0.25)


def test_the_trainer_runs_the_worker_as_the_host_user(stack):
    (trainer,) = stack.containers("trainer")
    assert stack.engine.inspect(trainer)["State"]["Status"] == "running", stack.diagnose("/v1/fits")
    ids = stack.engine("exec", trainer, "id").stdout
    assert f"uid={os.getuid()}" in ids and "10001" in ids  # HOST_UID, and the store's group


def test_a_fit_posted_through_nginx_streams_its_progress_and_is_served(stack, http, report):
    t0 = time.monotonic()
    record = submit(http, NAME)
    assert record["state"] == "queued" and record["name"] == NAME
    posted = time.monotonic() - t0
    events = follow(stack, record["links"]["events"])
    streamed = time.monotonic() - t0
    types = [e[2] for e in events]
    assert types[-1] == "succeeded", stack.diagnose(record["links"]["self"]) + f"\n{events[-3:]}"
    assert types[0] == "queued" and "started" in types and "progress" in types, types
    assert [e[1] for e in events] == list(range(events[0][1], events[0][1] + len(events))), "ids in order, none lost"
    steps = [e[3]["step"] for e in events if e[2] == "progress"]
    assert steps == sorted(steps) and len(set(steps)) == len(steps) and steps[-1] <= 40
    # streamed, not delivered at the end: the queued event came well before the final one
    assert events[-1][0] - events[0][0] > 0.5, [round(e[0], 2) for e in events]

    done = http.get(record["links"]["self"]).json()
    assert done["state"] == "succeeded" and isinstance(done["version"], int), done
    version = done["version"]
    served_after = wait_served(http, NAME, version)
    total = time.monotonic() - t0
    rgb = http.post(f"/v1/models/{NAME}/query", json={"coords": [[0.5, 0.5], [0.1, 0.9]]})
    assert rgb.status_code == 200 and np.array(rgb.json()["rgb"]).shape == (2, 3)
    png = http.get(f"/v1/models/{NAME}/versions/{version}/render", params={"width": 64, "height": 64})
    assert png.status_code == 200 and Image.open(io.BytesIO(png.content)).size == (64, 64)
    info = http.get(f"/iiif/3/{NAME}/info.json")
    assert info.status_code == 200 and info.json()["type"] == "ImageService3"
    tile = http.get(f"/iiif/3/{NAME}/full/32,/0/default.png")
    assert tile.status_code == 200 and Image.open(io.BytesIO(tile.content)).size[0] == 32
    # written into ./models by the trainer, as the host user (HOST_UID), a whole version folder
    folder = stack.models / NAME / str(version)
    assert (folder / "model.onnx").is_file() and folder.stat().st_uid == os.getuid()
    (api,) = stack.containers()
    assert stack.engine.inspect(api)["RestartCount"] == 0
    report["fits_http"] = {
        "post_s": round(posted, 2),
        "first_event_s": round(events[0][0], 2),
        "events": len(events),
        "progress_events": len(steps),
        "stream_to_succeeded_s": round(streamed, 1),
        "served_after_succeeded_s": round(served_after, 1),
        "upload_to_served_s": round(total, 1),
        "psnr_last_step": [e[3] for e in events if e[2] == "progress"][-1].get("psnr"),
        "metrics": events[-1][3].get("metrics"),
    }


def test_without_a_worker_a_fit_queues_and_says_so_then_the_trainer_fits_it(stack, http, report):
    (trainer,) = stack.containers("trainer")
    stack.engine("stop", "-t", "30", trainer)
    try:
        deadline = time.monotonic() + 60  # the last heartbeat goes stale (INR_FIT_STALE_S, 15 s)
        while (record := submit(http, f"{NAME}-queued")) and record.get("workers", 0) > 0:
            assert time.monotonic() < deadline, f"a stopped trainer still counts as a worker: {record}"
            http.delete(record["links"]["self"])
            time.sleep(2)
        time.sleep(3)
        queued = http.get(record["links"]["self"]).json()
        assert queued["state"] == "queued" and queued["workers"] == 0 and "worker" in queued["note"], queued
    finally:
        stack.engine("start", trainer)
    t0 = time.monotonic()
    events = follow(stack, record["links"]["events"])
    assert events[-1][2] == "succeeded", stack.diagnose(record["links"]["self"])
    report["fits_queued_then_fitted_after_trainer_start_s"] = round(time.monotonic() - t0, 1)


def test_nginx_lets_a_full_size_upload_reach_the_service(http):
    """Over INR_FIT_MAX_UPLOAD_BYTES but within nginx's 3073m: the service's JSON 413, not nginx's page."""
    limit = UPLOAD_LIMIT
    big = photo() + os.urandom(limit + 1024 - len(photo()))
    r = http.post("/v1/fits", files={"file": ("big.png", big, "image/png")}, data=OPTIONS)
    assert r.status_code == 413 and r.headers["content-type"].startswith("application/json"), r.text[:300]
    assert "error" in r.json()
