"""Fits over HTTP end to end: the real server (poll mode) and a real `python -m training worker` subprocess on
one SQLite store. An upload over HTTP is fitted with ordered SSE progress and previews, and the new
model answers v1 query, render and a IIIF tile; a running fit cancelled over HTTP writes nothing; a fit
goes on while the API restarts, and its event stream resumes from Last-Event-ID on the new process."""

from __future__ import annotations

import io
import json
import shutil
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from fitstore import FitStore
from tests.fits import Worker, photo, png
from tests.servers import ROOT, Server

FAST = {"preset": "fourier-small", "size": "32", "steps": "60", "protocol": "paper", "seed": "0"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """The server and one worker over a copy of the bundled models; stale after 3 s on both sides."""
    repo = tmp_path_factory.mktemp("fit-worker-models")
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    url = f"sqlite:///{tmp_path_factory.mktemp('fit-worker-store') / 'fits.sqlite'}"
    srv = Server(
        repo,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "0.5",
        env={"INR_FIT_STORE": url, "INR_FIT_STALE_S": "3"},
    ).wait_ready()
    worker = Worker(url, repo, tmp_path_factory.mktemp("fit-worker-log") / "worker.log")
    client, store = httpx.Client(base_url=srv.url, timeout=30), FitStore(url, stale_s=3)
    try:
        deadline = time.monotonic() + 120  # the worker imports torch, then sends its first heartbeat
        while not store.workers() and time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(0.2)
        assert store.workers(), worker.output()[-3000:]
        srv.env = {"INR_FIT_STORE": url, "INR_FIT_STALE_S": "3"}
        yield srv, worker, client, repo
    finally:
        client.close()
        store.close()
        worker.stop()
        srv.stop()


def sse(client: httpx.Client, path: str, timeout: float = 240) -> list[tuple[int, str, dict]]:
    """Every event of a stream until the server closes it: (id, type, data)."""
    events, block = [], {}
    with client.stream("GET", path, timeout=timeout) as r:
        assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
        for line in r.iter_lines():
            if not line:
                if "event" in block:
                    events.append((int(block["id"]), block["event"], json.loads(block["data"])))
                block = {}
            elif not line.startswith((":", "retry")):
                key, _, value = line.partition(": ")
                block[key] = value
    return events


def wait_state(client: httpx.Client, job: str, states: set[str], timeout: float = 240) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        rec = client.get(f"/v1/fits/{job}").json()
        if rec["state"] in states:
            return rec
        time.sleep(0.2)
    raise AssertionError(f"fit {job} not in {states} after {timeout} s: {rec}")


def test_an_upload_is_fitted_with_ordered_progress_and_served(stack):
    srv, worker, client, repo = stack
    r = client.post("/v1/fits", files={"file": ("snap.png", png(photo(48, 40)))}, data=FAST)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    events = sse(client, f"/v1/fits/{job}/events")
    assert [seq for seq, _, _ in events] == list(range(1, len(events) + 1)), worker.output()[-3000:]
    kinds = [kind for _, kind, _ in events]
    assert kinds[0] == "queued" and kinds[-1] == "succeeded" and "started" in kinds, (kinds, worker.output()[-3000:])
    steps = [data["step"] for _, kind, data in events if kind == "progress"]
    assert steps == sorted(set(steps)) and steps[-1] == 60
    previews = [data["preview"] for _, kind, data in events if kind == "progress" and "preview" in data]
    assert previews and all(p.startswith(f"/v1/fits/{job}/previews/") for p in previews)
    shown = client.get(previews[-1])
    # the whole 48×40 upload capped at size 32 is 32×27: the preview keeps that aspect
    assert shown.status_code == 200 and Image.open(io.BytesIO(shown.content)).size == (64, 54)

    rec = client.get(f"/v1/fits/{job}").json()
    assert rec["state"] == "succeeded" and rec["name"] == "snap" and rec["version"] == 1
    assert rec["workers"] == 1 and "note" not in rec and rec["metrics"]
    links = rec["links"]
    assert links["model"] == "/v1/models/snap" and links["iiif"] == "/iiif/3/snap/info.json"
    assert links["viewer"] == "/?model=snap" and links["preview"] == previews[-1]
    deadline = time.monotonic() + 30  # poll mode loads the new folder
    while client.get(links["model"]).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    model = client.get(links["model"]).json()
    assert model["task"] == "image" and any(v["version"] == 1 for v in model["versions"]), model
    q = client.post("/v1/models/snap/query", json={"coords": [[0.5, 0.5], [0.1, 0.9]]})
    assert q.status_code == 200 and len(q.json()["rgb"]) == 2
    render = client.get(links["render"])
    assert render.status_code == 200 and Image.open(io.BytesIO(render.content)).size == (512, 432)  # 32×27's aspect
    assert client.get(links["iiif"]).status_code == 200
    info = client.get(links["iiif"]).json()
    assert (info["width"], info["height"]) == (32, 27)  # the whole upload, at the size it was fitted at
    assert client.get("/iiif/3/snap/full/64,/0/default.png").status_code == 400  # past native needs ^
    tile = client.get("/iiif/3/snap/full/^64,/0/default.png")
    assert tile.status_code == 200 and Image.open(io.BytesIO(tile.content)).width == 64
    assert (repo / "snap" / "1" / "model.onnx").is_file()


def test_a_running_fit_cancelled_over_http_writes_nothing(stack):
    srv, worker, client, repo = stack
    data = {**FAST, "steps": "20000", "name": "never-written"}
    job = client.post("/v1/fits", files={"file": ("long.png", png())}, data=data).json()["id"]
    wait_state(client, job, {"running"}, timeout=120)
    r = client.delete(f"/v1/fits/{job}")
    assert r.status_code in (200, 202), r.text  # 202: the worker had not reached its next check yet
    assert r.json()["state"] == ("cancelled" if r.status_code == 200 else "running")
    rec = wait_state(client, job, {"cancelled", "failed", "succeeded"}, timeout=60)
    assert rec["state"] == "cancelled", rec
    assert client.delete(f"/v1/fits/{job}").status_code == 409
    assert [kind for _, kind, _ in sse(client, f"/v1/fits/{job}/events", timeout=10)][-1] == "cancelled"
    assert not (repo / "never-written").exists()


def first_events(client: httpx.Client, path: str, n: int, headers: dict | None = None) -> list[tuple[int, str]]:
    """The first n events of a stream, then hang up."""
    got = []
    with client.stream("GET", path, headers=headers, timeout=120) as r:
        for line in r.iter_lines():
            if line.startswith("id: "):
                seq = int(line[4:])
            elif line.startswith("event: "):
                got.append((seq, line[7:]))
                if len(got) == n:
                    break
    return got


def test_a_fit_goes_on_across_an_api_restart_and_its_stream_resumes(stack):
    _, worker, _, repo = stack
    api = Server(repo, env=stack[0].env).wait_ready()
    try:
        with httpx.Client(base_url=api.url, timeout=30) as c:
            job = c.post(
                "/v1/fits", files={"file": ("restart.png", png())}, data={**FAST, "steps": "20000", "name": "restarted"}
            ).json()["id"]
            wait_state(c, job, {"running"}, timeout=120)
            seen = first_events(c, f"/v1/fits/{job}/events", 3)
            assert [kind for _, kind in seen] == ["queued", "started", "progress"]
        api.stop()
        api = Server(repo, env=stack[0].env).wait_ready()  # a new process on the same store
        with httpx.Client(base_url=api.url, timeout=30) as c:
            rec = c.get(f"/v1/fits/{job}").json()
            assert rec["state"] == "running" and rec["workers"] == 1 and rec["seq"] >= seen[-1][0]
            resumed = first_events(c, f"/v1/fits/{job}/events", 2, headers={"Last-Event-ID": str(seen[-1][0])})
            assert [seq for seq, _ in resumed] == [seen[-1][0] + 1, seen[-1][0] + 2], resumed
            assert all(kind == "progress" for _, kind in resumed)
            assert c.delete(f"/v1/fits/{job}").status_code in (200, 202)
            assert wait_state(c, job, {"cancelled", "failed", "succeeded"}, timeout=60)["state"] == "cancelled"
    finally:
        api.stop()
    assert not (repo / "restarted").exists()


def test_a_real_photo_is_fitted_whole_by_the_default_preset_and_served_at_its_native_size(stack):
    """Native geometry: a non-square real photo (scikit-image's chelsea, 451×300, scaled to 90×60 to keep CI fast)
    through the default preset (grid): fitted whole, not cropped, and served at 90×60 by every path."""
    from skimage import data

    srv, worker, client, repo = stack
    upload = Image.fromarray(data.chelsea()).resize((90, 60), Image.LANCZOS)
    r = client.post(
        "/v1/fits",
        files={"file": ("chelsea.jpg", png(upload, "JPEG", quality=95))},
        data={"steps": "120", "seed": "0", "name": "chelsea"},
    )
    assert r.status_code == 202, r.text
    rec = wait_state(client, r.json()["id"], {"succeeded", "failed", "cancelled"})
    assert rec["state"] == "succeeded", (rec, worker.output()[-3000:])
    assert rec["options"]["preset"] == "grid", rec["options"]
    deadline = time.monotonic() + 30  # poll mode loads the new folder
    while client.get("/v1/models/chelsea").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    model = client.get("/v1/models/chelsea").json()
    assert (model["width"], model["height"]) == (90, 60), model
    v2 = client.get("/v2/models/chelsea").json()
    assert (v2["parameters"]["image_width"], v2["parameters"]["image_height"]) == (90, 60), v2
    # v1 query at pixel centres, and a render at native size: the same pixels, and close to the photo
    native = client.get("/v1/models/chelsea/render", params={"width": 90})
    assert native.status_code == 200
    pixels = np.asarray(Image.open(io.BytesIO(native.content)).convert("RGB"), np.float64)
    assert pixels.shape == (60, 90, 3)
    ij = [(5, 7), (30, 45), (59, 89)]
    q = client.post("/v1/models/chelsea/query", json={"coords": [[(j + 0.5) / 90, (i + 0.5) / 60] for i, j in ij]})
    assert q.status_code == 200
    assert np.abs(np.asarray(q.json()["rgb"]) * 255 - [pixels[i, j] for i, j in ij]).max() <= 1.0
    truth = np.asarray(Image.open(io.BytesIO(png(upload, "JPEG", quality=95))).convert("RGB"), np.float64)
    mse = np.mean((pixels - truth) ** 2)
    assert 10 * np.log10(255**2 / mse) > 22, "the served render is not the photo"
    # V2 infer at the same points
    body = {
        "inputs": [
            {
                "name": "coords",
                "datatype": "FP32",
                "shape": [3, 2],
                "data": [c for i, j in ij for c in ((j + 0.5) / 90, (i + 0.5) / 60)],
            }
        ]
    }
    v2rgb = client.post("/v2/models/chelsea/infer", json=body).json()["outputs"][0]["data"]
    assert np.allclose(np.asarray(v2rgb).reshape(3, 3), q.json()["rgb"], atol=1e-6)
    # IIIF: the native size, a tile at native scale equal to the render, the manifest's canvas
    info = client.get("/iiif/3/chelsea/info.json").json()
    assert (info["width"], info["height"]) == (90, 60)
    tile = client.get("/iiif/3/chelsea/0,0,45,30/45,/0/default.png")
    assert tile.status_code == 200
    shown = np.asarray(Image.open(io.BytesIO(tile.content)).convert("RGB"), np.float64)
    assert shown.shape == (30, 45, 3) and np.abs(shown - pixels[:30, :45]).max() <= 1
    canvas = client.get("/iiif/3/chelsea/manifest.json").json()["items"][-1]
    assert (canvas["width"], canvas["height"]) == (90, 60)
    assert client.get("/", params={"model": "chelsea"}).status_code == 200


def fit_metrics(client: httpx.Client) -> dict:
    """The fit samples of the real /metrics: {(name, labels as a sorted tuple): value}."""
    from prometheus_client.parser import text_string_to_metric_families

    r = client.get("/metrics")
    assert r.status_code == 200
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(r.text)
        if family.name.startswith("inr_fit_")
        for s in family.samples
    }


def test_fit_metrics_reach_metrics_through_the_store(stack):
    """Fit metrics: after a real fit by the real worker, the API's /metrics counts it (read from the store)."""
    srv, worker, client, repo = stack
    before = fit_metrics(client)
    r = client.post("/v1/fits", files={"file": ("metered.png", png())}, data={**FAST, "name": "metered"})
    assert r.status_code == 202, r.text
    rec = wait_state(client, r.json()["id"], {"succeeded", "failed", "cancelled"})
    assert rec["state"] == "succeeded", (rec, worker.output()[-3000:])
    after = fit_metrics(client)
    assert after["inr_fit_store_up", ()] == 1 and after["inr_fit_workers", ()] == 1
    done = ("inr_fit_finished_total", (("state", "succeeded"),))
    assert after[done] == before.get(done, 0) + 1
    assert after["inr_fit_duration_seconds_count", ()] == before.get(("inr_fit_duration_seconds_count", ()), 0) + 1
    assert after["inr_fit_steps_per_second_count", ()] == after["inr_fit_duration_seconds_count", ()]
    assert after["inr_fit_duration_seconds_sum", ()] > before.get(("inr_fit_duration_seconds_sum", ()), 0)
    assert after["inr_fit_duration_seconds_bucket", (("le", "+Inf"),)] == after["inr_fit_duration_seconds_count", ()]
    assert after["inr_fit_running", ()] == 0 and after["inr_fit_queue_depth", ()] == 0
    assert after["inr_fit_jobs", (("state", "succeeded"),)] >= 1
    for reason in ("deadline", "worker_died", "invalid", "error"):
        assert ("inr_fit_failures_total", (("reason", reason),)) in after
    assert ("inr_fit_retries_total", (("reason", "worker_died"),)) in after
