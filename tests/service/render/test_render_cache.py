"""The render cache over HTTP: strong ETags, 304 on If-None-Match, hits and misses in /metrics under
Triton's names, the LRU's byte bound, and no stale render after the model folder changes."""

from __future__ import annotations

import re
import shutil

import httpx
import numpy as np
import torch

from service.engine.cache import CacheStore
from service.render.cache import CachedRender, etag_matches
from tests.servers import Server
from training.encodings import EncodingConfig
from training.fit_image import FitConfig, export_image_model
from training.image_models import ImageINR, ImageModelConfig

URL = "/v1/models/astronaut/render"


def metric(client, name: str) -> float:
    text = client.get("/metrics").text
    m = re.search(rf'^{name}{{model="astronaut"[^}}]*}} (\S+)$', text, re.M)
    return float(m.group(1)) if m else 0.0


def test_a_render_has_a_strong_etag_and_repeats_from_the_cache(client):
    params = {"width": 40, "height": 30, "rotate": 17, "supersample": 2}
    hits, misses = metric(client, "nv_cache_num_hits_per_model"), metric(client, "nv_cache_num_misses_per_model")
    first = client.get(URL, params=params)
    again = client.get(URL, params=params)
    assert first.status_code == again.status_code == 200
    etag = first.headers["etag"]
    assert re.fullmatch(r'"[0-9a-f]{64}"', etag), "a strong ETag (no W/)"
    assert again.headers["etag"] == etag and again.content == first.content
    assert first.headers["cache-control"].startswith("public, max-age=")
    assert metric(client, "nv_cache_num_misses_per_model") == misses + 1
    assert metric(client, "nv_cache_num_hits_per_model") == hits + 1
    assert "nv_cache_num_entries" in client.get("/metrics").text


def test_if_none_match_answers_304_without_a_body(client):
    params = {"width": 24, "height": 24, "format": "webp"}
    etag = client.get(URL, params=params).headers["etag"]
    for header in (etag, f'"other", {etag}', f"W/{etag}", "*"):
        r = client.get(URL, params=params, headers={"If-None-Match": header})
        assert r.status_code == 304 and r.content == b"" and r.headers["etag"] == etag
    r = client.get(URL, params=params, headers={"If-None-Match": '"0000"'})
    assert r.status_code == 200 and r.headers["etag"] == etag


def test_the_key_is_the_canonical_request(client):
    get = client.get(URL, params={"width": 20, "height": 20, "quality": 50}).headers["etag"]
    post = client.post(URL, json={"width": 20, "height": 20, "transform": {}, "format": "png"}).headers["etag"]
    assert get == post, "png ignores quality; an empty transform is the identity"
    other = client.get(URL, params={"width": 20, "height": 20, "rotate": 1}).headers["etag"]
    jpeg = client.get(URL, params={"width": 20, "height": 20, "format": "jpeg", "quality": 50}).headers["etag"]
    assert len({get, other, jpeg}) == 3


def test_bad_renders_are_not_cached_and_answer_json(client):
    r = client.get(URL, params={"width": 2000, "height": 2000})
    assert r.status_code == 413 and "INR_MAX_RENDER_PIXELS" in r.json()["error"] and "etag" not in r.headers


def test_the_lru_keeps_within_its_byte_bound():
    cache = CacheStore(max_bytes=100)
    for i in range(5):
        cache.put(str(i), CachedRender(f'"{i}"', "image/png", bytes(40)))
    assert cache.info() == {"entries": 2, "bytes": 80, "max_bytes": 100, "evictions": 3}
    assert cache.get("4") is not None and cache.get("0") is None
    cache.get("3")
    cache.put("5", CachedRender('"5"', "image/png", bytes(40)))
    assert cache.get("3") is not None and cache.get("4") is None, "least recently used goes first"
    cache.put("huge", CachedRender('"h"', "image/png", bytes(101)))
    assert cache.get("huge") is None
    assert CacheStore(0).get("x") is None


def test_etag_matching_follows_rfc_9110():
    assert etag_matches('"a", "b"', '"b"') and etag_matches('W/"b"', '"b"') and etag_matches("*", '"b"')
    assert not etag_matches(None, '"b"') and not etag_matches('"bb"', '"b"')


def write_model(folder, seed: int) -> None:
    torch.manual_seed(seed)
    cfg = ImageModelConfig(width=16, depth=2, encoding=EncodingConfig("gaussian", features=16))
    export_image_model(
        ImageINR(cfg).eval(), FitConfig(model=cfg), folder, {"kind": "test"}, {}, {}, np.zeros((2, 2, 3), np.float32)
    )


def test_a_new_model_version_never_answers_an_old_etag_and_pinned_urls_are_immutable(tmp_path):
    repo = tmp_path / "repo"
    write_model(repo / "astronaut", seed=1)  # version 1
    params = {"width": 16, "height": 16}
    srv = Server(repo).wait_ready()
    try:
        old = httpx.get(srv.url + URL, params=params)
        pinned = httpx.get(srv.url + "/v1/models/astronaut/versions/1/render", params=params)
    finally:
        srv.stop()
    assert "immutable" in pinned.headers["cache-control"] and "immutable" not in old.headers["cache-control"]
    assert pinned.content == old.content
    write_model(repo / "astronaut", seed=2)  # version 2, served now
    assert (repo / "astronaut" / "2" / "model.onnx").is_file()
    srv = Server(repo).wait_ready()
    try:
        new = httpx.get(srv.url + URL, params=params, headers={"If-None-Match": old.headers["etag"]})
        gone = httpx.get(srv.url + "/v1/models/astronaut/versions/1/render", params=params)
    finally:
        srv.stop()
    assert new.status_code == 200 and new.headers["etag"] != old.headers["etag"]
    assert new.content != old.content
    assert gone.status_code == 404 and "version" in gone.json()["error"]


def test_a_changed_model_folder_never_answers_an_old_etag(tmp_path):
    """The same version number with other files (a folder replaced in place): the sha256s differ."""
    repo = tmp_path / "repo"
    write_model(repo / "astronaut", seed=1)
    params = {"width": 16, "height": 16}
    srv = Server(repo).wait_ready()
    try:
        old = httpx.get(srv.url + URL, params=params)
    finally:
        srv.stop()
    shutil.rmtree(repo / "astronaut")
    write_model(repo / "astronaut", seed=2)
    srv = Server(repo).wait_ready()
    try:
        new = httpx.get(srv.url + URL, params=params, headers={"If-None-Match": old.headers["etag"]})
    finally:
        srv.stop()
    assert new.status_code == 200 and new.headers["etag"] != old.headers["etag"]
    assert new.content != old.content
