"""/iiif.html: the image model in the vendored OpenSeadragon, in headless Chromium (Debian's /usr/bin/chromium
via Playwright) against the real server; tiles come over IIIF and must be the render route's own pixels."""

import io
import re

import httpx
import pytest
from PIL import Image

# Chromium, its flags and the module-scoped browser fixture are the viewer tests' (skips without Chromium).
from test_viewer import browser  # noqa: F401

from tests.servers import ROOT

TIMEOUT_MS = 120_000
TILE = re.compile(r"/iiif/3/cat/(full|\d+,\d+,\d+,\d+)/(\d*),(\d*)/0/default\.jpg$")
STATIC = ROOT / "service" / "static"


def fully_loaded(page):
    page.wait_for_function(
        "window.iiifViewer && iiifViewer.world.getItemCount() === 1 && iiifViewer.world.getItemAt(0).getFullyLoaded()"
    )


def canvas_stats(page) -> dict:
    return page.evaluate("""(() => {
        const c = iiifViewer.drawer.canvas, d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let n = 0, s = 0, s2 = 0;
        for (let i = 0; i < d.length; i += 4) { const v = d[i] + d[i + 1] + d[i + 2]; n++; s += v; s2 += v * v; }
        return {n, mean: s / n, std: Math.sqrt(s2 / n - (s / n) ** 2)};
    })()""")


def test_openseadragon_is_vendored_with_its_licence():
    vendor = STATIC / "vendor" / "openseadragon"
    assert (vendor / "openseadragon.min.js").read_text().startswith("//! openseadragon 6.1.1")
    assert "Redistribution and use in source and binary forms" in (vendor / "LICENSE.txt").read_text()
    html = (STATIC / "iiif.html").read_text()
    assert 'src="vendor/openseadragon/openseadragon.min.js"' in html and "//" not in html.split("<script")[1][:60]
    assert 'id="iiif-link"' in (STATIC / "index.html").read_text()


def test_deep_zoom_loads_tiles_at_several_levels_and_zooms_into_the_render_routes_pixels(browser, iiif_server):
    context = browser.new_context(viewport={"width": 800, "height": 600})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors, tiles, infos = [], [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on(
        "response", lambda r: (tiles if TILE.search(r.url) else infos if r.url.endswith("/info.json") else []).append(r)
    )
    page.goto(f"{iiif_server.url}/iiif.html?id=cat")  # the non-square 2400×1500 model: four levels
    page.wait_for_function("document.querySelector('#osd').dataset.state === 'open'")
    fully_loaded(page)
    assert [r.status for r in infos] == [200]
    stats = canvas_stats(page)
    assert stats["std"] > 10, f"the canvas looks blank: {stats}"

    info = httpx.get(f"{iiif_server.url}/iiif/3/cat/info.json").json()
    W, H = info["width"], info["height"]
    assert (W, H) == (2400, 1500)
    box = page.evaluate(
        "(() => { const b = iiifViewer.world.getItemAt(0).getBounds(); return [b.width, b.height]; })()"
    )
    assert box[0] / box[1] == pytest.approx(2400 / 1500)  # OpenSeadragon lays it out at the native aspect

    def region(r):
        text = TILE.search(r.url).group(1)
        return (0, 0, W, H) if text == "full" else tuple(int(v) for v in text.split(","))

    def levels(responses):  # scale factors: region size / tile size
        out = set()
        for r in responses:
            (_, _, w, h), (sw, sh) = region(r), TILE.search(r.url).groups()[1:]
            out.add(round(w / int(sw)) if sw else round(h / int(sh)))
        return out

    first = levels(tiles)
    assert len(first) >= 2, f"tiles came from levels {first} only"
    seen = len(tiles)
    # Zoom to 1 screen pixel per IIIF pixel, the native size.
    page.evaluate(
        "(() => { const v = iiifViewer.viewport, t = iiifViewer.world.getItemAt(0);"
        "v.zoomTo(t.imageToViewportZoom(1.0), null, true); v.applyConstraints(true); })()"
    )
    for _ in range(600):  # OpenSeadragon asks for the new level on a later animation frame
        if len(tiles) > seen:
            break
        page.wait_for_timeout(100)
    fully_loaded(page)
    deeper = tiles[seen:]
    assert deeper and min(levels(deeper)) < min(first), f"zooming fetched {levels(deeper)} after {first}"
    assert float(page.locator("#osd").get_attribute("data-image-zoom")) == pytest.approx(1, rel=0.05)
    assert "screen px per image pixel" in page.locator("#readout").inner_text()
    assert canvas_stats(page)["std"] > 1
    # A deep tile is exactly what /v1/models/cat/render gives for the same region.
    for r in [t for t in deeper if t.status == 200][:2]:
        body = r.body()
        tw, th = Image.open(io.BytesIO(body)).size
        x, y, w, h = region(r)
        ref = httpx.get(
            f"{iiif_server.url}/v1/models/cat/render",
            timeout=60,
            params={
                "width": tw,
                "height": th,
                "format": "jpeg",
                "viewport": f"{x / W!r},{y / H!r},{(x + w) / W!r},{(y + h) / H!r}",
            },
        )
        assert ref.status_code == 200 and ref.content == body, r.url
    assert errors == []
    context.close()


UPSCALED = re.compile(r"/iiif/3/cat/(\d+),(\d+),(\d+),(\d+)/(?:\^|%5E)(\d+),(\d+)/0/default\.jpg$")


def zoom_to(page, image_zoom: float) -> None:
    """Zoom at once to `image_zoom` screen px per native IIIF px (the test page has device scale 1)."""
    page.evaluate(
        f"(() => {{ const v = iiifViewer.viewport, t = iiifViewer.world.getItemAt(0);"
        f"v.zoomTo(t.imageToViewportZoom({image_zoom}), null, true); v.applyConstraints(true); }})()"
    )


def test_zooming_past_native_asks_the_model_for_upscaled_tiles_and_the_readout_says_so(browser, iiif_server):
    info = httpx.get(f"{iiif_server.url}/iiif/3/cat/info.json").json()
    W, H = info["width"], info["height"]
    assert "sizeUpscaling" in info["extraFeatures"] and info["maxWidth"] >= 8 * W  # INR_IIIF_ZOOM=64
    context = browser.new_context(viewport={"width": 800, "height": 600})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    errors, upscaled = [], []
    page.on("pageerror", lambda e: errors.append(str(e)))
    page.on("response", lambda r: upscaled.append(r) if UPSCALED.search(r.url) else None)
    page.goto(f"{iiif_server.url}/iiif.html?id=cat")
    page.wait_for_function("document.querySelector('#osd').dataset.sharp >= 1")
    assert upscaled == [], "the whole image at its home zoom needs no tile past native"
    assert "past native" not in page.locator("#readout").inner_text()

    zoom_to(page, 2.0)  # 2 screen px per native image px
    page.wait_for_function("document.querySelector('#osd').dataset.sharp >= 2")
    osd = page.locator("#osd")
    assert float(osd.get_attribute("data-image-zoom")) == pytest.approx(2.0, rel=1e-3)
    assert osd.get_attribute("data-tile-scale") == "2"
    text = page.locator("#readout").inner_text()
    assert "2.00 screen px per image pixel" in text and "past native: tiles rendered by the model at 2× native" in text
    assert "magnified" not in text
    assert upscaled, "no tile past native was requested"
    for r in upscaled[:3]:
        x, y, w, h, sw, sh = (int(v) for v in UPSCALED.search(r.url).groups())
        assert r.status == 200, r.url
        assert (sw, sh) == (2 * w, 2 * h), r.url  # 2 tile px per native px
        body = r.body()
        assert Image.open(io.BytesIO(body)).size == (sw, sh)
        ref = httpx.get(
            f"{iiif_server.url}/v1/models/cat/render",
            timeout=60,
            params={
                "width": sw,
                "height": sh,
                "format": "jpeg",
                "viewport": f"{x / W!r},{y / H!r},{(x + w) / W!r},{(y + h) / H!r}",
            },
        )
        assert ref.status_code == 200 and ref.content == body, r.url  # the model's own pixels at 2×

    # The deepest zoom: 8 screen px per native px, drawn from 8× tiles (64² native px each), not magnified.
    seen = len(upscaled)
    page.evaluate(
        "(() => { const v = iiifViewer.viewport; v.zoomTo(v.getMaxZoom(), null, true); v.applyConstraints(true); })()"
    )
    page.wait_for_function("document.querySelector('#osd').dataset.sharp >= 3")
    assert float(osd.get_attribute("data-image-zoom")) == pytest.approx(8.0, rel=1e-3)
    assert osd.get_attribute("data-tile-scale") == "8"
    deep = [UPSCALED.search(r.url).groups() for r in upscaled[seen:]]
    scales = {int(sw) / int(w) for _, _, w, _, sw, _ in deep}  # OpenSeadragon may fill in from 4× first
    assert 8 in scales and scales <= {2, 4, 8}, scales
    assert all(r.status == 200 for r in upscaled[seen:])
    assert (
        "8.00 screen px per image pixel · past native: tiles rendered by the model at 8× native"
        in page.locator("#readout").inner_text()
    )
    assert page.locator("#message").inner_text() == "" and errors == []
    context.close()
