"""Giant images in small (docs/fits.md, "Giant images"): a non-square upload longer than its block size goes over HTTP
to two real workers as a job per block and one for the overview, is published as one block model, and is served
whole: no seam at the block borders, IIIF tiles across a border as a one-model fit of the same image gives them, a
worker killed mid-block costs only that block, which is retried."""

from __future__ import annotations

import io
import time

import httpx
import numpy as np
import pytest
from PIL import Image

from fitstore import FitStore
from modelrepo.blocks import BlockLayout
from tests.fits import Worker, photo, png
from tests.servers import Server

W, H, BLOCK = 120, 72, 48  # 3 × 2 blocks
FIT = {"preset": "grid", "steps": "80", "block_size": str(BLOCK), "protocol": "full"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    repo = tmp_path_factory.mktemp("blocks-models")
    url = f"sqlite:///{tmp_path_factory.mktemp('blocks-store') / 'fits.sqlite'}"
    env = {"INR_FIT_STORE": url, "INR_FIT_STALE_S": "3", "INR_FIT_MAX_RUNNING": "2", "INR_FIT_QUEUE_LIMIT": "8"}
    env["INR_FIT_BLOCK_SIZE"] = str(BLOCK)
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.5", env=env).wait_ready()
    logs = tmp_path_factory.mktemp("blocks-logs")
    workers = [Worker(url, repo, logs / f"worker{k}.log") for k in range(2)]
    client, store = httpx.Client(base_url=srv.url, timeout=60), FitStore(url, stale_s=3)
    try:
        deadline = time.monotonic() + 120  # the workers import torch, then beat
        while len(store.workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert len(store.workers()) == 2, [w.output()[-2000:] for w in workers]
        yield client, store, workers, (url, repo, logs)
    finally:
        client.close()
        store.close()
        for w in workers:
            w.stop()
        srv.stop()


def upload(client: httpx.Client, name: str, img: Image.Image, **fields) -> str:
    r = client.post(
        "/v1/fits", files={"file": (f"{name}.png", png(img), "image/png")}, data={**FIT, **fields, "name": name}
    )
    assert r.status_code == 202, r.text
    return r.json()["id"]


def wait_done(client: httpx.Client, job: str, timeout: float = 300) -> dict:
    deadline, seen = time.monotonic() + timeout, []
    while time.monotonic() < deadline:
        rec = client.get(f"/v1/fits/{job}").json()
        seen.append(rec)
        if rec["state"] in ("succeeded", "failed", "cancelled"):
            return {**rec, "seen": seen}
        time.sleep(0.3)
    raise AssertionError(f"fit {job} did not end in {timeout} s: {rec}")


def served(client: httpx.Client, name: str, timeout: float = 30, width: int = W, height: int = H) -> np.ndarray:
    """The model's render at the image's native size, once the poll has loaded it."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        r = client.get(f"/v1/models/{name}/render", params={"width": width, "height": height})
        if r.status_code == 200:
            return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), np.float64) / 255
        time.sleep(0.3)
    raise AssertionError(f"{name} not served: {r.status_code} {r.text}")


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    return float(10 * np.log10(1 / max(((a - b) ** 2).mean(), 1e-12)))


def test_an_image_over_the_block_size_is_fitted_by_two_workers_and_served_whole_with_no_seam(stack):
    client, store, _, _ = stack
    img = photo(W, H, seed=3)
    job = upload(client, "giant", img)
    rec = wait_done(client, job)
    assert rec["state"] == "succeeded", rec
    progress = [s for s in rec["seen"] if s.get("pieces")]
    assert progress and progress[-1]["pieces"]["total"] == 7  # 6 blocks and the overview, shown while running
    children = store.children(store.get(job))
    assert {c["state"] for c in children} == {"succeeded"}
    assert len({c["worker"] for c in children}) == 2, "every piece went to one worker"
    assert [f["id"] for f in client.get("/v1/fits").json()["fits"]] == [job]  # the pieces are not jobs of the list
    # each piece makes as many passes over its pixels as the job's steps over the image (training/blocks.py,
    # piece_steps): here every step is a whole pass (the image is smaller than a batch), so each takes all 80
    assert {c["steps"] for c in children} == {80} and store.get(job)["steps"] == 7 * 80
    layout = BlockLayout.plan(W, H, BLOCK, 12)
    preview = store.pieces_progress(store.get(job))["preview_of"]  # the whole image's: the overview's latest
    assert preview["job"] == children[-1]["id"] and children[-1]["piece"] == "overview"
    r = client.get(f"/v1/fits/{preview['job']}/previews/{preview['seq']}.png")
    assert r.status_code == 200 and r.headers["content-type"] == "image/png"

    truth = np.asarray(img, np.float64) / 255
    out = served(client, "giant")
    detail = client.get("/v1/models/giant").json()
    assert detail["metadata"]["blocks"]["grid"] == [3, 2] and (detail["width"], detail["height"]) == (W, H), detail
    assert detail["metadata"]["blocks"]["overview"] == [30, 18]
    whole = psnr(out, truth)
    assert whole >= rec["metrics"]["full_psnr"] - 0.5  # the recorded bound, less the 8-bit rounding of the PNG
    band = np.zeros((H, W), bool)
    for e in layout.x_edges[1:-1]:
        band[:, e - 8 : e + 8] = True
    for e in layout.y_edges[1:-1]:
        band[e - 8 : e + 8, :] = True
    err = ((out - truth) ** 2).mean(axis=2)
    seam = float(10 * np.log10(1 / err[band].mean()))
    assert seam >= whole - 1.0, f"the borders' PSNR {seam:.2f} dB is more than 1 dB under the image's {whole:.2f}"

    q = client.post("/v1/models/giant/query", json={"coords": [[0.5, 0.5], [0.01, 0.99], [0.99, 0.01]]})
    assert q.status_code == 200 and len(q.json()["rgb"]) == 3


def test_an_upload_longer_than_the_block_size_that_a_worker_can_hold_is_one_model(stack):
    """The blocks are for the images that need them (docs/fits.md, "One model or blocks"): with the defaults, an
    upload longer than INR_FIT_BLOCK_SIZE that a worker's memory holds as one model is fitted as one model."""
    client, store, _, _ = stack
    fields = {k: v for k, v in FIT.items() if k != "block_size"}
    r = client.post("/v1/fits", files={"file": ("one.png", png(photo(W, H, seed=5)), "image/png")}, data=fields)
    assert r.status_code == 202 and r.json()["options"]["blocks"] == "auto", r.text
    rec = wait_done(client, r.json()["id"])
    assert rec["state"] == "succeeded" and "children" not in store.get(rec["id"]), rec
    served(client, "one")
    detail = client.get("/v1/models/one").json()
    assert "blocks" not in detail["metadata"] and (detail["width"], detail["height"]) == (W, H)


def test_iiif_tiles_across_a_border_match_a_one_model_fit_of_the_same_image(stack):
    client, _, _, _ = stack
    img = photo(W, H, seed=3)
    if client.get("/v1/models/giant").status_code != 200:
        assert wait_done(client, upload(client, "giant", img))["state"] == "succeeded"
    whole = upload(client, "whole", img, blocks="auto")  # one model of the whole image: a worker holds it
    assert wait_done(client, whole)["state"] == "succeeded"
    served(client, "whole")
    region = "30,20,40,40"  # across the border at x 40 and y 36
    tiles = {}
    for name in ("giant", "whole"):
        r = client.get(f"/iiif/3/{name}/{region}/max/0/default.png")
        assert r.status_code == 200, r.text
        tiles[name] = np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"), np.float64) / 255
    truth = np.asarray(img, np.float64)[20:60, 30:70] / 255
    assert psnr(tiles["giant"], tiles["whole"]) >= 30
    assert psnr(tiles["giant"], truth) >= psnr(tiles["whole"], truth) - 3


def test_a_worker_killed_mid_block_loses_only_that_block_which_is_retried(stack):
    client, store, workers, (url, repo, logs) = stack
    job = upload(client, "killed", photo(W, H, seed=4), steps="1500")
    deadline = time.monotonic() + 120
    victim = None
    while victim is None and time.monotonic() < deadline:
        rec = store.get(job)
        running = [c for c in store.children(rec) if c["state"] == "running" and c["step"] > 0] if rec else []
        if running:
            victim = running[0]
        time.sleep(0.1)
    assert victim is not None, store.get(job)
    wid = victim["worker"]
    doomed = next(w for w in workers if w.proc.poll() is None and str(w.proc.pid) in wid_pids(store, wid))
    doomed.kill()
    workers.append(Worker(url, repo, logs / "worker-after-kill.log"))  # two workers again
    rec = wait_done(client, job, timeout=400)
    assert rec["state"] == "succeeded", rec
    retried = store.get(victim["id"])
    assert retried["attempt"] == 2 and retried["failures"] == 1 and retried["state"] == "succeeded"
    others = [c for c in store.children(store.get(job)) if c["id"] != victim["id"]]
    assert all(c["attempt"] == 1 for c in others if c["worker"] != wid), "pieces of live workers were fitted again"
    served(client, "killed")


def wid_pids(store: FitStore, wid: str) -> set[str]:
    """The pid the heartbeat of worker `wid` reports."""
    return {str(hb.get("pid")) for hb in store.workers() if hb["worker"] == wid}


def test_the_pieces_of_a_cancelled_fit_are_taken_by_the_next_fit_of_the_same_bytes(stack):
    """What was fitted is not lost: a job cancelled with some blocks written, sent again (same bytes, same options),
    copies those blocks and fits only the rest; the version is the same blend."""
    client, store, _, _ = stack
    img = photo(W, H, seed=6)
    first = upload(client, "again", img, steps="400")
    deadline = time.monotonic() + 240
    while time.monotonic() < deadline:
        rec = store.get(first)
        if rec.get("children") and sum(c["state"] == "succeeded" for c in store.children(rec)) >= 2:
            break
        time.sleep(0.1)
    assert client.delete(f"/v1/fits/{first}").status_code in (200, 202)
    assert wait_done(client, first)["state"] == "cancelled"
    deadline = time.monotonic() + 120  # a piece may still finish, or be claimed and stop, after its parent ended
    while any(c["state"] in ("queued", "running") for c in store.children(store.get(first))):
        assert time.monotonic() < deadline, store.children(store.get(first))
        time.sleep(0.2)
    written = {c["piece"] for c in store.children(store.get(first)) if c["state"] == "succeeded"}
    assert len(written) >= 2
    second = upload(client, "again", img, steps="400")
    rec = wait_done(client, second)
    assert rec["state"] == "succeeded", rec
    kids = store.children(store.get(second))
    reused = {c["piece"] for c in kids if c.get("reused_from") == first}
    # every piece written is taken (the overview too: it is queued first); with all written, one is fitted again
    assert reused == (written if len(written) < len(kids) else written - {"overview"}), (reused, written)
    assert all(c["state"] == "succeeded" for c in kids)
    truth = np.asarray(img, np.float64) / 255
    assert psnr(served(client, "again"), truth) >= rec["metrics"]["full_psnr"] - 0.5
    other = upload(client, "again-other", img, steps="399")  # other options: nothing is taken
    assert wait_done(client, other)["state"] == "succeeded"
    assert not [c for c in store.children(store.get(other)) if c.get("reused_from")]
