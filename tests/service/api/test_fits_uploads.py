"""Uploads too large to carry in the store (docs/fits.md, "Giant images"), in small: INR_MAX_UPLOAD_PIXELS is set
low, so a JPEG, PNG or TIFF over it is streamed into INR_FIT_UPLOADS and kept there as a file, which a real worker
reads by region. A pyramidal TIFF goes upload → blocks → served; a kept JPEG with a size cap is fitted whole from its
reduced pixels; a truncated TIFF fails its job with the reason; an upload that stops midway leaves nothing behind.
Each kept file is gone once its job has been split or has ended."""

from __future__ import annotations

import io
import json
import socket
import subprocess
import time

import httpx
import numpy as np
import pytest
import pyvips
from PIL import Image

from fitstore import FitStore
from tests.fits import Worker, photo
from tests.servers import Server
from tests.service.api.test_fits_blocks import psnr, served, wait_done

W, H, BLOCK = 112, 72, 48  # 3 × 2 blocks; 8,064 pixels, over MAX_PIXELS
MAX_PIXELS = 4000
FIT = {"preset": "grid", "steps": "60", "protocol": "full"}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    repo = tmp_path_factory.mktemp("uploads-models")
    uploads = tmp_path_factory.mktemp("uploads")
    url = f"sqlite:///{tmp_path_factory.mktemp('uploads-store') / 'fits.sqlite'}"
    env = {
        "INR_FIT_STORE": url,
        "INR_FIT_STALE_S": "3",
        "INR_FIT_QUEUE_LIMIT": "8",
        "INR_MAX_UPLOAD_PIXELS": str(MAX_PIXELS),
        "INR_FIT_UPLOADS": str(uploads),
    }
    srv = Server(repo, "--model-control-mode", "poll", "--repository-poll-secs", "0.5", env=env).wait_ready()
    logs = tmp_path_factory.mktemp("uploads-logs")
    worker = Worker(url, repo, logs / "worker.log", env={"INR_FIT_UPLOADS": str(uploads)})
    client, store = httpx.Client(base_url=srv.url, timeout=60), FitStore(url, stale_s=3)
    try:
        deadline = time.monotonic() + 120  # the worker imports torch, then beats
        while not store.workers() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert store.workers(), worker.output()[-2000:]
        srv.repo = repo
        yield client, store, uploads, srv
    finally:
        client.close()
        store.close()
        worker.stop()
        srv.stop()


def emptied(folder, timeout: float = 10) -> bool:
    """True once `folder` is empty: a worker deletes a job's file just after the store says the job ended."""
    deadline = time.monotonic() + timeout
    while list(folder.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.05)
    return not list(folder.iterdir())


def pyramid_tiff(img: Image.Image) -> bytes:
    """A tiled pyramidal TIFF (tiles of 16, levels halving), as scanners and IIIF servers keep giants."""
    return pyvips.Image.new_from_array(np.asarray(img)).tiffsave_buffer(
        tile=True, tile_width=16, tile_height=16, pyramid=True, compression="deflate"
    )


def post(client: httpx.Client, filename: str, data: bytes, **fields) -> httpx.Response:
    return client.post("/v1/fits", files={"file": (filename, data, "image/tiff")}, data={**FIT, **fields})


def test_a_pyramidal_tiff_is_kept_read_by_region_fitted_in_blocks_and_served(stack):
    client, store, uploads, _ = stack
    img = photo(W, H, seed=3)
    r = post(client, "scan.tif", pyramid_tiff(img), block_size=str(BLOCK), name="scan")
    assert r.status_code == 202, r.text
    rec = r.json()
    source = rec["source"]
    assert source["upload"] == f"{rec['id']}.tif" and (uploads / source["upload"]).is_file()
    assert (source["width"], source["height"], source["format"]) == (W, H, "TIFF") and source["levels"] > 1
    assert store.image(rec["id"]) is None, "a kept upload's pixels are not carried in the store"
    done = wait_done(client, rec["id"])
    assert done["state"] == "succeeded", done
    assert not (uploads / source["upload"]).exists(), "the file goes once the job is split into blocks"
    assert len(store.get(rec["id"])["children"]) == 7  # 6 blocks and the overview
    truth = np.asarray(img, np.float64) / 255
    assert psnr(served(client, "scan", width=W, height=H), truth) > 24


def test_a_kept_jpeg_with_a_size_cap_is_fitted_whole_from_its_reduced_pixels(stack):
    client, store, uploads, srv = stack
    buf = io.BytesIO()
    photo(W, H, seed=4).save(buf, "JPEG", quality=95)
    r = post(client, "capped.jpg", buf.getvalue(), size="56", name="capped")
    assert r.status_code == 202, r.text
    rec = r.json()
    assert rec["source"]["upload"] == f"{rec['id']}.jpg"
    done = wait_done(client, rec["id"])
    assert done["state"] == "succeeded", done
    assert "children" not in store.get(rec["id"])
    assert emptied(uploads), "the file goes when its job ends"
    meta = json.loads((srv.repo / "capped" / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [56, 36] and (meta["source"]["width"], meta["source"]["height"]) == (W, H)


def test_a_truncated_tiff_is_refused_and_a_damaged_one_fails_its_job_with_the_reason(stack):
    client, _, uploads, _ = stack
    data = pyvips.Image.new_from_array(np.asarray(photo(W, H, seed=5))).tiffsave_buffer(
        tile=True, tile_width=16, tile_height=16, compression="deflate"
    )
    r = post(client, "cut.tif", data[: len(data) * 2 // 3], size="32", name="cut")  # libtiff writes the IFD last
    assert r.status_code == 400 and "'cut.tif' is a damaged or truncated image" in r.json()["error"], r.text
    assert not list(uploads.iterdir())
    damaged = data[:1000] + b"\xab" * 2000 + data[3000:]  # tiles garbled, the header whole
    r = post(client, "garbled.tif", damaged, size="32", name="garbled")
    assert r.status_code == 202, r.text  # the damage shows when its tiles are read, in the worker
    done = wait_done(client, r.json()["id"])
    assert done["state"] == "failed" and "garbled" not in [m["name"] for m in client.get("/v1/models").json()["models"]]
    assert r.json()["source"]["upload"] in done["error"], done["error"]
    assert emptied(uploads), "the file goes when its job ends"


def test_an_upload_that_stops_midway_leaves_nothing_and_the_server_goes_on(stack):
    client, _, uploads, srv = stack
    boundary = "b0undary"
    head = (
        f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.png"\r\n'
        "Content-Type: image/png\r\n\r\n"
    ).encode()
    body = head + b"\x89PNG\r\n\x1a\n" + b"\x00" * 3_000_000  # 3 MB of a 10 MB body, then the client goes
    host, port = httpx.URL(srv.url).host, httpx.URL(srv.url).port
    with socket.create_connection((host, port)) as s:
        s.sendall(
            (
                f"POST /v1/fits HTTP/1.1\r\nHost: {host}\r\nContent-Length: 10000000\r\n"
                f"Content-Type: multipart/form-data; boundary={boundary}\r\n\r\n"
            ).encode()
            + body
        )
        deadline = time.monotonic() + 10
        while not list(uploads.iterdir()) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert [p.name.startswith(".part-") for p in uploads.iterdir()] == [True], "streamed into a part file"
    deadline = time.monotonic() + 10
    while list(uploads.iterdir()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not list(uploads.iterdir()), "the part file of an upload that stopped is deleted"
    assert client.get("/health/ready").status_code == 200


def test_a_kept_png_over_16_mp_is_split_through_a_tiled_copy_that_never_lands_in_the_uploads_folder(stack):
    """Over regions.SMALL (16 MP) a PNG is cut into blocks through a tiled TIFF copy, written in the worker's temp
    folder: once the job is split, the uploads folder holds nothing of it. (A 2 GiB worker would fit 16 MP as one
    model: the job asks for blocks.)"""
    client, store, uploads, _ = stack
    side = np.linspace(0, 255, 4100, dtype=np.uint8)
    big = Image.fromarray(np.stack(np.broadcast_arrays(side[None, :], side[:, None], 128), -1)[:4000].astype(np.uint8))
    buf = io.BytesIO()
    big.save(buf, "PNG")
    fields = {"name": "big", "blocks": "always"}
    r = client.post("/v1/fits", files={"file": ("big.png", buf.getvalue(), "image/png")}, data=fields)
    assert r.status_code == 202, r.text
    job = r.json()["id"]
    deadline = time.monotonic() + 120
    while not store.get(job).get("children") and time.monotonic() < deadline:
        time.sleep(0.2)
    assert len(store.get(job)["children"]) == 7  # 2 × 3 blocks of 2048 and the overview
    assert client.delete(f"/v1/fits/{job}").status_code in (200, 202)
    assert wait_done(client, job)["state"] == "cancelled"
    assert not list(uploads.iterdir())


@pytest.fixture
def small_disk(tmp_path):
    """A 1 MiB tmpfs: a disk that fills during an upload (needs the right to mount; skipped without it)."""
    folder = tmp_path / "small"
    folder.mkdir()
    done = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m", "tmpfs", str(folder)], capture_output=True)
    if done.returncode:
        pytest.skip(f"cannot mount a small tmpfs here: {done.stderr.decode().strip()[:200]}")
    try:
        yield folder
    finally:
        subprocess.run(["umount", str(folder)], capture_output=True)


def test_an_upload_that_fills_the_disk_is_a_507_naming_the_folder_and_leaves_nothing(small_disk, tmp_path):
    env = {"INR_FIT_STORE": f"sqlite:///{tmp_path / 'fits.sqlite'}", "INR_FIT_UPLOADS": str(small_disk)}
    (tmp_path / "models").mkdir()
    srv = Server(tmp_path / "models", env=env).wait_ready()
    try:
        with httpx.Client(base_url=srv.url, timeout=60) as client:
            noise = np.random.default_rng(0).integers(0, 256, (700, 700, 3), np.uint8)  # ~1.5 MB as a PNG
            buf = io.BytesIO()
            Image.fromarray(noise).save(buf, "PNG", compress_level=0)
            r = post(client, "huge.png", buf.getvalue())
            assert r.status_code == 507, r.text
            assert "INR_FIT_UPLOADS" in r.json()["error"] and str(small_disk) in r.json()["error"]
            assert not list(small_disk.iterdir()), "the part written before the disk filled is deleted"
            r = post(client, "small.png", pyramid_tiff(photo(40, 30)), size="32")  # the space is back
            assert r.status_code == 202, r.text
    finally:
        srv.stop()
