"""A giant fitted by two workers that share no folder with each other or with the API (docs/fits.md, "Giant images";
docs/s3.md, "Models on S3"): the job store in Redis, the uploads and the models in a bucket of a real S3
server (tests/s3server.py). The API streams the upload into the bucket, a worker reads it back by range and splits
it, both workers fit blocks, the last one publishes the version to the bucket (its marker last), and the API, which
never saw any of it on disk, lists and serves it through its disk cache."""

from __future__ import annotations

import time

import httpx
import numpy as np
import pytest

from fitstore import FitStore
from tests.fits import RedisServer, Worker, photo
from tests.servers import Server
from tests.service.api.test_fits_blocks import psnr, served, wait_done
from tests.service.api.test_fits_uploads import FIT, pyramid_tiff

W, H, BLOCK = 112, 72, 48  # 3 × 2 blocks and the overview: 7 pieces


@pytest.fixture
def stack(s3_server, tmp_path):
    (tmp_path / "redis").mkdir()
    redis = RedisServer(tmp_path / "redis")
    bucket = s3_server.bucket()
    models, uploads = s3_server.url(bucket, "models"), s3_server.url(bucket, "uploads")
    env = {**s3_server.env, "INR_FIT_STORE": redis.url, "INR_FIT_UPLOADS": uploads, "INR_FIT_STALE_S": "3"}
    srv = Server(
        models,
        "--model-control-mode",
        "poll",
        "--repository-poll-secs",
        "0.5",
        env={**env, "INR_MAX_UPLOAD_PIXELS": "4000", "INR_MODEL_CACHE": str(tmp_path / "api-cache")},
    ).wait_ready()
    workers = [Worker(redis.url, models, tmp_path / f"worker{i}.log", env=env) for i in range(2)]
    store = FitStore(redis.url, stale_s=3)
    client = httpx.Client(base_url=srv.url, timeout=60)
    try:
        deadline = time.monotonic() + 180  # each worker imports torch, then beats
        while len(store.workers()) < 2 and time.monotonic() < deadline:
            time.sleep(0.3)
        assert len(store.workers()) == 2, workers[0].output()[-2000:]
        yield client, store, s3_server.client(), bucket
    finally:
        client.close()
        store.close()
        for w in workers:
            w.stop()
        srv.stop()
        redis.stop()


def test_a_giant_goes_through_the_bucket_fitted_by_two_workers_and_served(stack):
    client, store, s3, bucket = stack
    img = photo(W, H, seed=5)
    r = client.post(
        "/v1/fits",
        files={"file": ("scan.tif", pyramid_tiff(img), "image/tiff")},
        data={**FIT, "block_size": str(BLOCK), "name": "scan"},
    )
    assert r.status_code == 202, r.text
    rec = r.json()
    assert rec["source"]["upload"] == f"{rec['id']}.tif"
    done = wait_done(client, rec["id"], timeout=600)
    assert done["state"] == "succeeded", done
    children = [store.get(c) for c in store.get(rec["id"])["children"]]
    assert len(children) == 7 and len({c["worker"] for c in children}) == 2, "both workers fit pieces"
    keys = [o["Key"] for o in s3.list_objects_v2(Bucket=bucket).get("Contents", [])]
    assert f"uploads/{rec['id']}.tif" not in keys, "the upload goes once the job is split"
    assert "models/scan/1/.published" in keys and "models/scan/1/blocks/r1c2.onnx" in keys
    truth = np.asarray(img, np.float64) / 255
    assert psnr(served(client, "scan", width=W, height=H, timeout=60), truth) > 24
