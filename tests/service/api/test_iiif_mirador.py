"""IIIF Presentation 3 manifests (/iiif/3/{id}/manifest.json, /iiif/3/collection.json) against the real server, and
the vendored Mirador opening one in headless Chromium (Debian's /usr/bin/chromium via Playwright): tiles drawn, the
page not blank, a zoom fetching deeper tiles. The JSON is checked with the Presentation 3 models iiif-prezi3
generates from the IIIF presentation validator's JSON schema (iiif_3_0.json)."""

from __future__ import annotations

import hashlib
import io
import re
import shutil

import httpx
import numpy as np
import pytest
from iiif_prezi3 import Collection, Manifest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401

from tests.servers import ROOT, Server

STATIC = ROOT / "service" / "static"
TILE = re.compile(r"/iiif/3/cat%401/(full|\d+,\d+,\d+,\d+)/(\d*),(\d*)/0/default\.jpg$")
CORS = "access-control-allow-origin"


def test_mirador_is_vendored_with_its_licence_and_the_recorded_hash():
    vendor = STATIC / "vendor" / "mirador"
    readme = (vendor / "README.md").read_text()
    digest = hashlib.sha256((vendor / "mirador.min.js").read_bytes()).hexdigest()
    assert f"`{digest}`" in readme and "mirador@4.0.0" in readme and "sha512-" in readme
    assert "Apache License" in (vendor / "LICENSE.txt").read_text()
    html = (STATIC / "mirador.html").read_text()
    assert 'src="vendor/mirador/mirador.min.js"' in html and "//" not in html.split("<script")[1][:60]
    assert 'id="mirador"' in (STATIC / "iiif.html").read_text()


@pytest.fixture(scope="module")
def two_versions(iiif_repo, tmp_path_factory):
    """The IIIF repository's astronaut with a second version and version_policy all: two Canvases."""
    repo = tmp_path_factory.mktemp("manifest-models")
    shutil.copytree(iiif_repo / "astronaut", repo / "astronaut")
    shutil.copytree(iiif_repo / "digits", repo / "digits")
    shutil.copytree(repo / "astronaut" / "1", repo / "astronaut" / "2")
    meta = repo / "astronaut" / "2" / "metadata.json"
    meta.write_text(meta.read_text().replace('"version": 1', '"version": 2', 1))
    cfg = repo / "astronaut" / "config.pbtxt"
    cfg.write_text(
        re.sub(r"version_policy \{.*?\n\}\n", "version_policy {\n  all {\n  }\n}\n", cfg.read_text(), flags=re.S)
    )
    srv = Server(repo)
    with srv.running():
        yield srv


def test_the_manifest_has_one_canvas_per_version_and_validates(two_versions):
    url = two_versions.url
    r = httpx.get(f"{url}/iiif/3/astronaut/manifest.json")
    assert r.status_code == 200 and r.headers[CORS] == "*"
    assert r.headers["content-type"].startswith("application/ld+json")
    doc = r.json()
    Manifest.model_validate(doc)  # the Presentation 3 schema, as pydantic models
    assert doc["@context"] == "http://iiif.io/api/presentation/3/context.json" and doc["type"] == "Manifest"
    assert [c["label"]["en"][0] for c in doc["items"]] == ["astronaut, version 1", "astronaut, version 2"]
    info = httpx.get(f"{url}/iiif/3/astronaut/info.json").json()
    for version, canvas in zip((1, 2), doc["items"]):
        assert (canvas["width"], canvas["height"]) == (info["width"], info["height"])
        assert canvas["summary"]["en"][0] and canvas["thumbnail"][0]["type"] == "Image"
        labels = {m["label"]["en"][0]: m["value"]["en"][0] for m in canvas["metadata"]}
        assert {"Source", "Native size", "PSNR"} <= set(labels) and labels["PSNR"].endswith(" dB")
        assert labels["Native size"] == f"{info['width']} × {info['height']} pixels"
        anno = canvas["items"][0]["items"][0]
        assert anno["motivation"] == "painting" and anno["target"] == canvas["id"]
        service = anno["body"]["service"][0]
        assert service["type"] == "ImageService3" and service["id"].endswith(f"/iiif/3/astronaut%40{version}")
        assert httpx.get(f"{service['id']}/info.json").json()["id"] == service["id"]  # the service answers
        thumb = httpx.get(canvas["thumbnail"][0]["id"])
        assert thumb.status_code == 200 and Image.open(io.BytesIO(thumb.content)).size == (256, 256)
    pinned = httpx.get(f"{url}/iiif/3/astronaut@2/manifest.json").json()
    assert [c["label"]["en"][0] for c in pinned["items"]] == ["astronaut, version 2"]


def test_the_collection_lists_every_image_model(two_versions):
    r = httpx.get(f"{two_versions.url}/iiif/3/collection.json")
    assert r.status_code == 200 and r.headers[CORS] == "*"
    doc = r.json()
    Collection.model_validate(doc)
    assert [(m["type"], m["label"]["en"][0]) for m in doc["items"]] == [("Manifest", "astronaut")]
    assert httpx.get(doc["items"][0]["id"]).status_code == 200


@pytest.mark.parametrize(
    "path, status, message",
    [
        ("/iiif/3/no-such-model/manifest.json", 404, "unknown model 'no-such-model'"),
        ("/iiif/3/astronaut@9/manifest.json", 404, "unknown version 9"),
        ("/iiif/3/digits/manifest.json", 400, "model 'digits' has task 'digits'; IIIF needs a model with task 'image'"),
        ("/iiif/3/astronaut@x/manifest.json", 400, "the version after @ must be a positive integer"),
    ],
)
def test_bad_manifest_identifiers_are_clear_errors_with_cors(two_versions, path, status, message):
    r = httpx.get(two_versions.url + path)
    assert r.status_code == status and message in r.json()["error"] and r.headers[CORS] == "*"


def test_mirador_opens_the_manifest_draws_tiles_and_a_zoom_fetches_deeper_ones(browser, iiif_server):
    context = browser.new_context(viewport={"width": 1000, "height": 700})
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors, tiles = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: tiles.append(r) if TILE.search(r.url) else None)
    page.goto(f"{iiif_server.url}/mirador.html?id=cat")  # non-square 2400×1500, four levels
    page.wait_for_selector(".openseadragon-canvas canvas")
    for _ in range(600):
        if sum(r.status == 200 for r in tiles) >= 2:
            break
        page.wait_for_timeout(100)
    assert tiles and all(r.status == 200 for r in tiles), [(r.url, r.status) for r in tiles][:5]
    page.wait_for_timeout(1500)  # the tiles fade in

    def viewer_pixels() -> np.ndarray:
        box = page.locator(".openseadragon-canvas").bounding_box()
        png = page.screenshot(clip=box)
        return np.asarray(Image.open(io.BytesIO(png)).convert("RGB"), np.float32)

    pixels = viewer_pixels()
    assert pixels.std() > 10, f"the viewer looks blank (pixel std {pixels.std():.1f})"

    def scale(r) -> float:  # IIIF pixels per tile pixel: the level the tile comes from
        region, w, h = TILE.search(r.url).groups()
        if region == "full":
            return 1e9
        rw, rh = (int(v) for v in region.split(",")[2:])
        return rw / int(w) if w else rh / int(h)

    first, seen = min(scale(r) for r in tiles), len(tiles)
    box = page.locator(".openseadragon-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(6):
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(300)
    for _ in range(600):
        if any(scale(r) < first for r in tiles[seen:]):
            break
        page.wait_for_timeout(100)
    deeper = [scale(r) for r in tiles[seen:]]
    assert deeper and min(deeper) < first, f"zooming fetched levels {sorted(set(deeper))} after {first}"
    assert all(r.status == 200 for r in tiles)
    assert errors == [], errors
    context.close()
