"""Non-square models through the real server: the native geometry in the model detail and V2
metadata, v1 query transforms and renders in square pixels, defaults at the native aspect, ETags that change
with the geometry, and a version whose ONNX metadata disagrees with its recorded size listed failed."""

import io
import re

import httpx
import numpy as np
import pytest
from PIL import Image

from tests.geometry import H, W, add_version_with_size, make_nonsquare_model
from tests.servers import Server


@pytest.fixture(scope="module")
def geo_repo(tmp_path_factory):
    """`cat` (40×24, then a version 2 of the same graph recorded as 48×24) and `mismatch` (version 2's ONNX
    says 48×24, its metadata 40×24), both with version_policy all."""
    repo = tmp_path_factory.mktemp("geometry-models")
    make_nonsquare_model(repo / "cat")
    add_version_with_size(repo / "cat", (48, 24))
    make_nonsquare_model(repo / "mismatch", steps=50)
    add_version_with_size(repo / "mismatch", (W, H), onnx_size=(48, 24))
    for name in ("cat", "mismatch"):
        cfg = repo / name / "config.pbtxt"
        cfg.write_text(
            re.sub(r"version_policy \{.*?\n\}\n", "version_policy {\n  all {\n  }\n}\n", cfg.read_text(), flags=re.S)
        )
    return repo


@pytest.fixture(scope="module")
def geo(geo_repo):
    srv = Server(geo_repo, env={"INR_RENDER_TILE_SAMPLES": "1024", "INR_MODEL_LOADING": "startup"})
    with srv.running():
        with httpx.Client(base_url=srv.url, timeout=60.0) as c:
            yield c


def png(client, path="/v1/models/cat/versions/1/render", **fields) -> np.ndarray:
    r = client.post(path, json={"format": "png", **fields})
    assert r.status_code == 200, r.text
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB"))


def psnr(a, b) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_the_model_detail_and_v2_metadata_give_the_native_size(geo):
    detail = geo.get("/v1/models/cat").json()
    assert (detail["width"], detail["height"], detail["version"]) == (48, 24, 2)  # the serving version's
    v2 = geo.get("/v2/models/cat/versions/1").json()
    assert v2["parameters"] == {"image_width": W, "image_height": H}
    assert geo.get("/v2/models/cat").json()["parameters"] == {"image_width": 48, "image_height": 24}


def test_a_version_whose_onnx_disagrees_with_its_size_is_failed_and_the_other_serves(geo):
    detail = geo.get("/v1/models/mismatch").json()
    versions = {v["version"]: v for v in detail["versions"]}
    assert versions[1]["status"] == "ready" and versions[1]["serving"]
    assert versions[2]["status"] == "failed"
    assert "48×24" in versions[2]["error"] and "40×24" in versions[2]["error"]
    assert "geometry disagrees" in versions[2]["error"]
    assert geo.post("/v1/models/mismatch/query", json={"coords": [[0.5, 0.5]]}).status_code == 200
    assert geo.get("/v2/models/mismatch/versions/2/ready").status_code == 400


def test_rotate_90_is_np_rot90_of_the_plain_render(geo):
    plain = png(geo, width=400, height=240)
    turned = png(geo, width=240, height=400, transform={"rotate": 90})
    assert psnr(turned, np.rot90(plain)) >= 100
    assert psnr(png(geo, width=400, height=240, transform={"rotate": 180}), np.rot90(plain, 2)) >= 100


def test_a_one_pixel_translate_is_an_exact_shift(geo):
    plain = png(geo, width=W, height=H)
    shifted = png(geo, width=W, height=H, transform={"translate": [1 / W, 0]})
    assert np.array_equal(shifted[:, 1:], plain[:, :-1])
    down = png(geo, width=W, height=H, transform={"translate": [0, 1 / H]})
    assert np.array_equal(down[1:], plain[:-1])


def test_render_defaults_follow_the_native_aspect(geo):
    assert png(geo, width=200).shape[:2] == (120, 200)
    assert png(geo, height=120).shape[:2] == (120, 200)
    assert png(geo).shape[:2] == (154, 256)
    assert png(geo, width=120, transform={"rotate": 90}).shape[:2] == (200, 120)
    r = geo.get("/v1/models/cat/versions/1/render", params={"width": 100})
    assert Image.open(io.BytesIO(r.content)).size == (100, 60)


def test_query_transforms_rotate_in_square_pixels(geo):
    """10 pixels right of the centre, turned 90° counter-clockwise, shows what is 10 pixels below it."""
    turned = geo.post(
        "/v1/models/mismatch/query", json={"coords": [[0.5 + 10 / W, 0.5]], "transform": {"rotate": 90}}
    ).json()["rgb"]
    below = geo.post("/v1/models/mismatch/query", json={"coords": [[0.5, 0.5 + 10 / H]]}).json()["rgb"]
    assert turned[0] == pytest.approx(below[0], abs=1e-5)


def test_the_etag_changes_with_the_geometry_and_304_still_works(geo):
    one = geo.get("/v1/models/cat/versions/1/render", params={"width": 40, "height": 24})
    two = geo.get("/v1/models/cat/versions/2/render", params={"width": 40, "height": 24})
    assert one.headers["etag"] != two.headers["etag"]
    again = geo.get(
        "/v1/models/cat/versions/1/render",
        params={"width": 40, "height": 24},
        headers={"If-None-Match": one.headers["etag"]},
    )
    assert again.status_code == 304 and again.headers["etag"] == one.headers["etag"]
    # the same graph at another recorded size turns differently: 30° of 48×24 pixels is not 30° of 40×24
    a = png(geo, width=40, height=24, transform={"rotate": 30})
    b = png(geo, "/v1/models/cat/versions/2/render", width=40, height=24, transform={"rotate": 30})
    assert not np.array_equal(a, b)


def test_render_keys_hold_the_geometry():
    from types import SimpleNamespace

    from service.render.cache import render_key
    from service.render.imaging import RenderSpec

    spec = RenderSpec(width=4, height=4, matrix=np.eye(3)[:2])
    model = dict(name="m", version=1, record=None, separable=None)
    sizes = ((40, 24), (48, 24), None)
    keys = {render_key(SimpleNamespace(**model, image_size=size), spec, "png", 90) for size in sizes}
    assert len(keys) == 3
