"""A block model (docs/model-repository.md, Block models) in the vendored OpenSeadragon and Mirador, in headless
Chromium against the real server: browsed from the whole view down to native size (from the blocks, blended
across their borders) and past it (the blocks rendered finer than their pixels), every tile a 200 and each one the
render route's own pixels. The model is fitted by `fit-image --block-size` on a non-square image (3 × 2 blocks)."""

from __future__ import annotations

import io
import json
import re
import subprocess
import sys

import httpx
import numpy as np
import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401

from fitstore import PRESETS
from tests.fits import photo
from tests.servers import ROOT, Server

W, H = 1200, 800  # larger than the viewer: its home view is a level above native
TILE = re.compile(r"/iiif/3/wide(?:%401)?/(full|\d+,\d+,\d+,\d+)/(?:\^|%5E)?(\d*),(\d*)/0/default\.jpg$")


@pytest.fixture(scope="module")
def blocks_server(tmp_path_factory):
    root = tmp_path_factory.mktemp("iiif-blocks")
    photo(W, H, seed=9).save(root / "wide.png")
    argv = ["--image", str(root / "wide.png"), "--out", str(root / "models" / "wide"), "--block-size", "512"]
    fast = ["--block-overlap", "16", "--steps", "60", "--protocol", "full", "--no-progress"]
    done = subprocess.run(
        [sys.executable, "-m", "training", "fit-image", *argv, *fast, *PRESETS["grid"]["argv"]],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert done.returncode == 0, done.stderr
    meta = json.loads((root / "models" / "wide" / "1" / "metadata.json").read_text())
    assert meta["blocks"]["grid"] == [3, 2]
    srv = Server(root / "models", env={"INR_IIIF_ZOOM": "16"})
    with srv.running():
        yield srv


def open_page(browser, url: str):  # noqa: F811
    context = browser.new_context(viewport={"width": 800, "height": 600})
    page = context.new_page()
    page.set_default_timeout(120_000)
    errors, tiles = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: tiles.append(r) if TILE.search(r.url) else None)
    page.goto(url)
    return context, page, errors, tiles


def scale_of(r) -> float:
    """IIIF pixels per tile pixel (below 1 past native size)."""
    region, w, h = TILE.search(r.url).groups()
    rw, rh = (W, H) if region == "full" else (int(v) for v in region.split(",")[2:])
    return rw / int(w) if w else rh / int(h)


def same_as_render(server: Server, r) -> bool:
    region, _, _ = TILE.search(r.url).groups()
    x, y, w, h = (0, 0, W, H) if region == "full" else (int(v) for v in region.split(","))
    tw, th = Image.open(io.BytesIO(r.body())).size
    ref = httpx.get(
        f"{server.url}/v1/models/wide/render",
        timeout=60,
        params={
            "width": tw,
            "height": th,
            "format": "jpeg",
            "viewport": f"{x / W!r},{y / H!r},{(x + w) / W!r},{(y + h) / H!r}",
        },
    )
    return ref.status_code == 200 and ref.content == r.body()


def wait_for_more(page, tiles, seen: int, below: float) -> list:
    for _ in range(600):
        if any(scale_of(r) < below for r in tiles[seen:]):
            break
        page.wait_for_timeout(100)
    return tiles[seen:]


def test_openseadragon_browses_a_block_model_from_the_whole_view_to_past_native(browser, blocks_server):  # noqa: F811
    context, page, errors, tiles = open_page(browser, f"{blocks_server.url}/iiif.html?id=wide")
    page.wait_for_function(
        "window.iiifViewer && iiifViewer.world.getItemCount() === 1 && iiifViewer.world.getItemAt(0).getFullyLoaded()"
    )
    levels = {scale_of(r) for r in tiles}  # at home: the whole view, then sharpened to the native level
    assert max(levels) >= 2 and min(levels) == 1, levels
    seen = len(tiles)  # 8 screen px per image px: the blocks rendered finer than their pixels
    page.evaluate(
        "(() => { const v = iiifViewer.viewport, t = iiifViewer.world.getItemAt(0);"
        "v.zoomTo(t.imageToViewportZoom(8), null, true); v.applyConstraints(true); })()"
    )
    past = wait_for_more(page, tiles, seen, 1)
    assert past and min(scale_of(r) for r in past) < 1, [r.url for r in past]
    assert all(r.status == 200 for r in tiles), [(r.url, r.status) for r in tiles if r.status != 200][:3]
    deep = [r for r in tiles if scale_of(r) == 1][:2] + [r for r in past if scale_of(r) < 1][:1]
    assert len(deep) == 3 and all(same_as_render(blocks_server, r) for r in deep)
    pixels = np.asarray(Image.open(io.BytesIO(page.screenshot())).convert("RGB"), np.float32)
    assert pixels.std() > 5 and errors == [], errors
    context.close()


def test_mirador_opens_a_block_model_and_a_zoom_fetches_tiles_from_its_blocks(browser, blocks_server):  # noqa: F811
    context, page, errors, tiles = open_page(browser, f"{blocks_server.url}/mirador.html?id=wide")
    page.wait_for_selector(".openseadragon-canvas canvas")
    for _ in range(600):
        if sum(r.status == 200 for r in tiles) >= 1:
            break
        page.wait_for_timeout(100)
    assert tiles, "Mirador asked for no tile"
    first, seen = min(scale_of(r) for r in tiles), len(tiles)
    box = page.locator(".openseadragon-canvas").bounding_box()
    page.mouse.move(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)
    for _ in range(8):
        page.mouse.wheel(0, -400)
        page.wait_for_timeout(300)
    deeper = [scale_of(r) for r in wait_for_more(page, tiles, seen, first)]
    assert deeper and min(deeper) < first, f"zooming fetched levels {sorted(set(deeper))} after {first}"
    assert all(r.status == 200 for r in tiles) and errors == [], errors
    context.close()
