"""Fits into a folder of their own (INR_FIT_MODELS, modelrepo/union.py), as `make serve` and `make worker` run:
the real server and a real `python -m training worker` on one SQLite store. A fit over HTTP lands in the fits'
folder and is served beside the bundled models, and nothing under the models' folder changes; a fit into a name the
models' folder holds is a 409 naming the setting."""

from __future__ import annotations

import hashlib
import shutil
import time

import httpx
import pytest

from fitstore import FitStore
from tests.fits import Worker, photo, png
from tests.servers import ROOT, Server
from tests.service.api.test_fits_worker import FAST, wait_state


def snapshot(folder) -> dict[str, tuple[int, str]]:
    """Every file and folder under `folder`: its size and sha256 (folders: their entries)."""
    found = {}
    for p in sorted(folder.rglob("*")):
        rel = p.relative_to(folder).as_posix()
        found[rel] = (p.stat().st_size, hashlib.sha256(p.read_bytes()).hexdigest()) if p.is_file() else (0, "dir")
    return found


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    models, fits = tmp_path_factory.mktemp("bundled"), tmp_path_factory.mktemp("data") / "fitted"
    shutil.copytree(ROOT / "models" / "astronaut", models / "astronaut")
    url = f"sqlite:///{tmp_path_factory.mktemp('fit-folder-store') / 'fits.sqlite'}"
    env = {"INR_FIT_STORE": url, "INR_FIT_STALE_S": "3", "INR_FIT_MODELS": str(fits)}
    srv = Server(models, "--model-control-mode", "poll", "--repository-poll-secs", "0.5", env=env).wait_ready()
    worker = Worker(url, fits, tmp_path_factory.mktemp("fit-folder-log") / "worker.log")
    client, store = httpx.Client(base_url=srv.url, timeout=30), FitStore(url, stale_s=3)
    try:
        worker.registered(store)
        yield client, worker, models, fits
    finally:
        client.close()
        store.close()
        worker.stop()
        srv.stop()


def test_a_fit_lands_in_the_fits_folder_and_is_served_beside_the_models(stack):
    client, worker, models, fits = stack
    before = snapshot(models)
    assert fits.is_dir()  # made by the server at its start
    r = client.post("/v1/fits", files={"file": ("snap.png", png(photo(40, 32)))}, data=FAST)
    assert r.status_code == 202, r.text
    rec = wait_state(client, r.json()["id"], {"succeeded", "failed"})
    assert rec["state"] == "succeeded" and rec["name"] == "snap" and rec["version"] == 1, worker.output()[-3000:]
    deadline = time.monotonic() + 30  # poll mode finds the new folder in the fits' repository
    while client.get("/v1/models/snap").status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert [m["name"] for m in client.get("/v1/models").json()["models"]] == ["astronaut", "snap"]
    q = client.post("/v1/models/snap/query", json={"coords": [[0.5, 0.5], [0.1, 0.9]]})
    assert q.status_code == 200 and len(q.json()["rgb"]) == 2
    assert client.get("/iiif/3/snap/full/32,/0/default.png").status_code == 200
    assert (fits / "snap" / "1" / "model.onnx").is_file() and not (models / "snap").exists()
    assert snapshot(models) == before  # nothing under the models' folder changed

    # a fit into a name the models' folder holds would be a version beside it, never served: refused
    r = client.post("/v1/fits", files={"file": ("a.png", png(photo(40, 32)))}, data={**FAST, "name": "astronaut"})
    assert r.status_code == 409 and "INR_FIT_MODELS" in r.json()["error"] and "astronaut" in r.json()["error"]
    assert snapshot(models) == before and not (fits / "astronaut").exists()
