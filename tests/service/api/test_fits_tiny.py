"""Issue 38: a tiny upload (1×1, 2×3) fits exactly, and its PSNR (an MSE of 0) must still reach every reader as
strict JSON. Through the real routes: the real server (poll mode) and a real `python -m training worker` on one
SQLite store; the job's record, its events, the new model's metadata over HTTP and its metadata.json on disk
all parse as strict JSON (no Infinity or NaN), and every PSNR in them is a finite number or null."""

from __future__ import annotations

import json
import math
import shutil
import subprocess
import time

import httpx
import pytest
from PIL import Image

from fitstore import FitStore
from tests.fits import Worker, png
from tests.servers import ROOT, Server
from training.metrics import PSNR_CAP_DB

# A white image: the sigmoid output saturates to exactly 1.0, so the training loss and the evaluation's MSE reach 0
# (after about 25 steps of fourier-small; the grid preset gets there on other colours with more steps).
FIT = {"preset": "fourier-small", "steps": "60"}


def strict(text: str):
    """JSON as the standard has it: Python's json module otherwise reads Infinity and NaN."""

    def refuse(constant: str):
        raise ValueError(f"{constant} is not JSON")

    return json.loads(text, parse_constant=refuse)


def psnrs(doc) -> list:
    """Every value of a key with 'psnr' in its name, anywhere in the document."""
    if isinstance(doc, dict):
        found = [v for k, v in doc.items() if "psnr" in k.lower() and not isinstance(v, (dict, list))]
        return found + [p for v in doc.values() for p in psnrs(v)]
    if isinstance(doc, list):
        return [p for v in doc for p in psnrs(v)]
    return []


def finite_or_null(values: list) -> bool:
    return all(v is None or (isinstance(v, (int, float)) and math.isfinite(v) and v <= PSNR_CAP_DB) for v in values)


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    repo = tmp_path_factory.mktemp("fit-tiny-models")
    shutil.copytree(ROOT / "models" / "digits", repo / "digits")
    url = f"sqlite:///{tmp_path_factory.mktemp('fit-tiny-store') / 'fits.sqlite'}"
    env = {"INR_FIT_STORE": url, "INR_FIT_STALE_S": "3"}
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.5", env=env).wait_ready()
    worker = Worker(url, repo, tmp_path_factory.mktemp("fit-tiny-log") / "worker.log")
    client, store = httpx.Client(base_url=srv.url, timeout=30), FitStore(url, stale_s=3)
    try:
        deadline = time.monotonic() + 120  # the worker imports torch, then sends its first heartbeat
        while not store.workers() and time.monotonic() < deadline and worker.proc.poll() is None:
            time.sleep(0.2)
        assert store.workers(), worker.output()[-3000:]
        yield client, worker, repo
    finally:
        client.close()
        store.close()
        worker.stop()
        srv.stop()


def events(client: httpx.Client, path: str, timeout: float = 240) -> list[tuple[str, dict]]:
    """Every event of the stream until the server ends it: (type, data parsed strictly)."""
    out, block = [], {}
    with client.stream("GET", path, timeout=timeout) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if not line:
                if "event" in block:
                    out.append((block["event"], strict(block["data"])))
                block = {}
            elif not line.startswith((":", "retry")):
                key, _, value = line.partition(": ")
                block[key] = value
    return out


@pytest.mark.parametrize("width,height", [(1, 1), (2, 3)])
def test_a_tiny_upload_fits_exactly_and_every_psnr_is_json(stack, width, height):
    client, worker, repo = stack
    name = f"tiny-{width}x{height}"
    image = Image.new("RGB", (width, height), (255, 255, 255))
    r = client.post("/v1/fits", files={"file": (f"{name}.png", png(image))}, data={**FIT, "name": name})
    assert r.status_code == 202, r.text
    job = r.json()["id"]

    seen = events(client, f"/v1/fits/{job}/events")
    kinds = [kind for kind, _ in seen]
    assert kinds[0] == "queued" and kinds[-1] == "succeeded", (kinds, worker.output()[-3000:])
    progress = [data for kind, data in seen if kind == "progress"]
    assert progress and all(isinstance(d["psnr"], float) for d in progress), progress
    assert finite_or_null(psnrs([data for _, data in seen]))

    got = client.get(f"/v1/fits/{job}")
    assert got.status_code == 200, got.text
    rec = strict(got.text)
    assert rec["state"] == "succeeded" and rec["version"] == 1
    assert finite_or_null(psnrs(rec)), rec
    assert rec["metrics"]["full_psnr"] == rec["psnr"] == PSNR_CAP_DB, rec  # exact: the documented cap
    listed = client.get("/v1/fits")
    assert listed.status_code == 200 and finite_or_null(psnrs(strict(listed.text)))

    deadline = time.monotonic() + 30  # poll mode loads the new folder
    while (model := client.get(f"/v1/models/{name}")).status_code != 200 and time.monotonic() < deadline:
        time.sleep(0.3)
    assert model.status_code == 200, model.text
    doc = strict(model.text)
    assert doc["metrics"] == rec["metrics"] and finite_or_null(psnrs(doc)), doc
    on_disk = strict((repo / name / "1" / "metadata.json").read_text())
    assert on_disk["metrics"] == rec["metrics"]


@pytest.mark.skipif(shutil.which("node") is None, reason="node is not installed")
def test_the_viewer_shows_the_cap_as_an_exact_fit_and_null_as_none():
    """The viewer's PSNR text (service/static/fitplot.js, used by the fit and model panels), run by node."""
    script = (
        f'import {{ PSNR_CAP_DB, psnrText }} from "{ROOT / "service" / "static" / "fitplot.js"}";'
        "console.log(JSON.stringify([PSNR_CAP_DB, ...[100, 31.138, null, undefined].map(psnrText)]));"
    )
    out = subprocess.run(["node", "--input-type=module", "-e", script], capture_output=True, text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout) == [PSNR_CAP_DB, "≥ 100 dB (exact)", "31.14 dB", "–", "–"]
