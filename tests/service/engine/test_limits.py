"""Limits come from the model's spec: v1 classify, V2 infer and v1 query accept up to the model's
max_batch_size and answer 413 above it, naming the limit and what raises it."""

from __future__ import annotations

import shutil

import httpx
import numpy as np
import pytest

from modelrepo import config_text, read_spec


@pytest.fixture(scope="module")
def small(model_repo, server, tmp_path_factory):
    """The test models with max_batch_size 4 (digits) and 50 (astronaut), served without INR_ caps."""
    repo = tmp_path_factory.mktemp("limits")
    for name, limit in (("digits", 4), ("astronaut", 50)):
        shutil.copytree(model_repo / name, repo / name)
        spec = read_spec(repo / name)
        (repo / name / "config.pbtxt").write_text(config_text(spec.with_(max_batch_size=limit)))
    srv = type(server)(repo)
    srv.wait_ready()
    with httpx.Client(base_url=srv.url, timeout=30.0) as c:
        yield c
    srv.stop()


def v2_body(n: int) -> dict:
    return {"inputs": [{"name": "images", "datatype": "FP32", "shape": [n, 1, 28, 28], "data": [0.1] * (784 * n)}]}


def test_classify_and_v2_infer_share_the_models_max_batch_size(small):
    images = np.zeros((5, 28, 28)).tolist()
    assert small.post("/v1/models/digits/classify", json={"images": images[:4]}).status_code == 200
    assert small.post("/v2/models/digits/infer", json=v2_body(4)).status_code == 200
    for r in (
        small.post("/v1/models/digits/classify", json={"images": images}),
        small.post("/v2/models/digits/infer", json=v2_body(5)),
    ):
        assert r.status_code == 413
        assert r.json()["error"] == (
            "5 images is more than the limit of 4 per request for model 'digits' "
            "(max_batch_size in digits/config.pbtxt)"
        )
    assert small.get("/v1/models/digits").json()["max_batch_size"] == 4


def test_uploads_count_against_the_same_limit(small):
    files = [("files", (f"{i}.png", b"\x89PNG not really", "image/png")) for i in range(5)]
    r = small.post("/v1/models/digits/classify", files=files)
    assert r.status_code == 413 and "limit of 4" in r.json()["error"]


def test_queries_are_limited_by_the_image_models_row_limit(small):
    assert small.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]] * 50}).status_code == 200
    r = small.post("/v1/models/astronaut/query", json={"coords": [[0.5, 0.5]] * 51})
    assert r.status_code == 413 and "max_batch_size in astronaut/config.pbtxt" in r.json()["error"]


def test_a_setting_lowers_the_limit_and_is_named(client):
    r = client.post("/v1/models/digits/classify", json={"images": np.zeros((9, 28, 28)).tolist()})
    assert r.status_code == 413 and "(INR_MAX_CLASSIFY_IMAGES)" in r.json()["error"]
