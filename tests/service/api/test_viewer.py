"""The viewer and digit pad at `/`, in headless Chromium (Debian's /usr/bin/chromium via Playwright),
against the real server from conftest.py."""

import math
import os
from pathlib import Path

import pytest

CHROMIUM = Path(os.environ.get("CHROMIUM", "/usr/bin/chromium"))
if not CHROMIUM.exists():
    pytest.skip(f"no Chromium at {CHROMIUM} (apt-get install chromium; or set CHROMIUM=path)", allow_module_level=True)
sync_api = pytest.importorskip("playwright.sync_api", reason="playwright is not installed (pip install playwright)")

ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-dev-shm-usage",
]
TIMEOUT_MS = 60_000


@pytest.fixture(scope="module")
def browser():
    with sync_api.sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=ARGS)
        yield b
        b.close()


class Page:
    """A page on the viewer, with the render requests it sent and the errors it raised."""

    def __init__(self, browser, url, scale=1, touch=False, size=(820, 560)):
        self.context = browser.new_context(
            viewport={"width": size[0], "height": size[1]}, device_scale_factor=scale, has_touch=touch
        )
        self.page = self.context.new_page()
        self.page.set_default_timeout(TIMEOUT_MS)
        self.renders, self.failed, self.errors = [], [], []
        self.page.on("request", self._request)
        self.page.on("requestfailed", lambda r: self.failed.append(r))
        self.page.on("pageerror", lambda e: self.errors.append(str(e)))
        self.page.goto(url)

    def _request(self, r):
        if r.method == "POST" and r.url.endswith("/render"):
            self.renders.append(r.post_data_json)

    def sharp(self, n):
        """Wait until the n-th sharp render is on the canvas."""
        self.page.wait_for_function(
            f"document.querySelector('#view').dataset.renders >= {n} && "
            "document.querySelector('#view').dataset.state === 'sharp'"
        )

    def canvas(self, js):
        return self.page.evaluate(f"(() => {{ const c = document.querySelector('#view'); return {js}; }})()")

    def close(self):
        self.context.close()

    def centre(self, selector):
        self.page.locator(selector).scroll_into_view_if_needed()
        box = self.page.locator(selector).bounding_box()
        return box["x"] + box["width"] / 2, box["y"] + box["height"] / 2


@pytest.fixture
def page(browser, server):
    p = Page(browser, server.url + "/")
    yield p
    assert p.errors == []
    p.close()


def sharp_requests(p):
    return [r for r in p.renders if "supersample" in r]


def test_the_page_lists_the_models_and_shows_the_image_models_metadata(page, model_repo):
    import json

    meta = json.loads((model_repo / "astronaut" / "1" / "metadata.json").read_text())
    p = page.page
    p.wait_for_selector("#panel dd")
    assert p.locator("#model option").all_text_contents() == ["astronaut"]
    assert p.locator("#digit-model option").all_text_contents() == ["digits"]
    panel = p.locator("#panel").inner_text()
    for text in (
        "gaussian",
        "32×32",
        f"{meta['metrics']['test_psnr']:.2f} dB",
        f"{meta['metrics']['ssim']:.4f}",
        f"{meta['architecture']['parameters']:,}",
    ):
        assert text in panel
    assert "not loaded: " in p.locator("#models-message").inner_text()  # the broken folders


def test_the_image_appears_on_the_canvas(page):
    page.sharp(1)
    stats = page.canvas("""(() => {
        const d = c.getContext('2d').getImageData(0, 0, c.width, c.height).data;
        let opaque = 0, sum = 0, sq = 0;
        for (let i = 0; i < d.length; i += 4) {
            if (d[i + 3] === 255) { opaque++; sum += d[i]; sq += d[i] * d[i]; }
        }
        const mean = sum / opaque;
        return {opaque: opaque / (d.length / 4), std: Math.sqrt(sq / opaque - mean * mean)};
    })()""")
    assert stats["opaque"] > 0.5 and stats["std"] > 5
    assert "px per image pixel" in page.page.locator("#readout").inner_text()
    # the viewer_sharp benchmark (bench/tiles.py) times the sharp view by the viewer's own mark, one per sharp render.
    marks = page.page.evaluate("performance.getEntriesByName('inr-sharp').map(m => m.detail.renders)")
    assert marks == list(range(1, int(page.canvas("c.dataset.renders")) + 1))


def test_the_render_has_the_canvas_device_pixel_size_and_a_quarter_size_preview_first(browser, server):
    p = Page(browser, server.url + "/", scale=2)
    try:
        p.sharp(1)
        w, h, css_w = p.canvas("[c.width, c.height, c.clientWidth]")
        assert w == round(css_w * 2)
        preview, sharp = p.renders[-2], p.renders[-1]
        assert (sharp["width"], sharp["height"]) == (w, h)
        assert (preview["width"], preview["height"]) == (math.ceil(w / 4), math.ceil(h / 4))
        assert preview["viewport"] == sharp["viewport"]
    finally:
        p.close()


def test_a_canvas_over_a_million_pixels_is_rendered_in_strips_that_stack_into_the_view(browser, server):
    p = Page(browser, server.url + "/", size=(1700, 1100))
    try:
        p.sharp(1)
        w, h = p.canvas("[c.width, c.height]")
        assert w * h > 1_000_000  # one request this size would pass the test server's limit
        preview = next(r for r in p.renders if "supersample" not in r)
        parts = sharp_requests(p)
        assert len(parts) >= 2 and all(r["width"] == w and r["width"] * r["height"] <= 1_000_000 for r in parts)
        assert sum(r["height"] for r in parts) == h
        x0, y0, x1, y1 = preview["viewport"]
        edges = sorted((r["viewport"][1], r["viewport"][3]) for r in parts)
        assert edges[0][0] == pytest.approx(y0) and edges[-1][1] == pytest.approx(y1)
        assert all(a[1] == pytest.approx(b[0]) for a, b in zip(edges, edges[1:]))
        assert all((r["viewport"][0], r["viewport"][2]) == (x0, x1) for r in parts)
        bottom = p.canvas(
            "Array.from(c.getContext('2d').getImageData(c.width * 0.4, c.height - 1, c.width * 0.2, 1).data)"
        )  # the middle of the bottom row, inside the unit square
        assert min(bottom[3::4]) == 255  # the last strip arrived
        assert p.errors == []
    finally:
        p.close()


def test_zooming_in_renders_the_new_viewport_at_full_resolution(page):
    page.sharp(1)
    before = sharp_requests(page)[-1]
    x, y = page.centre("#view")
    page.page.mouse.move(x, y)
    for _ in range(4):
        page.page.mouse.wheel(0, -600)  # each step zooms by e^0.9
    page.sharp(2)
    after = sharp_requests(page)[-1]
    zoom = float(page.canvas("c.dataset.zoom"))
    assert zoom > 16
    span = lambda r: r["viewport"][2] - r["viewport"][0]  # noqa: E731
    assert span(after) == pytest.approx(span(before) / zoom, rel=0.01)
    assert (after["width"], after["height"]) == (before["width"], before["height"])
    mid = lambda r, i: (r["viewport"][i] + r["viewport"][i + 2]) / 2  # noqa: E731
    assert (mid(after, 0), mid(after, 1)) == pytest.approx((0.5, 0.5), abs=0.01)  # zoomed about the centre


def test_a_two_finger_pinch_zooms_about_the_fingers_and_renders_the_new_viewport(browser, server):
    p = Page(browser, server.url + "/", touch=True)
    try:
        p.sharp(1)
        x, y = p.centre("#view")
        cdp = p.context.new_cdp_session(p.page)

        def touch(kind, half_gap):
            points = [{"x": x - half_gap, "y": y, "id": 1}, {"x": x + half_gap, "y": y, "id": 2}]
            cdp.send("Input.dispatchTouchEvent", {"type": kind, "touchPoints": [] if kind == "touchEnd" else points})

        touch("touchStart", 40)
        for half_gap in range(50, 121, 10):
            touch("touchMove", half_gap)
        touch("touchEnd", 0)
        p.sharp(2)
        assert float(p.canvas("c.dataset.zoom")) == pytest.approx(3.0)  # fingers 80 px → 240 px apart
        before, after = sharp_requests(p)[0]["viewport"], sharp_requests(p)[-1]["viewport"]
        assert after[2] - after[0] == pytest.approx((before[2] - before[0]) / 3)
        assert p.errors == []
    finally:
        p.close()


def test_a_newer_view_cancels_the_render_still_in_flight(page):
    page.sharp(1)
    held = []

    def hold_first_sharp(route):
        if "supersample" in (route.request.post_data_json or {}) and not held:
            held.append(route)  # never answered: stays in flight until the page aborts it
        else:
            route.continue_()

    page.page.route("**/render", hold_first_sharp)
    page.page.click("#zoom-in")
    page.page.wait_for_function("document.querySelector('#view').dataset.state === 'preview'")
    for _ in range(200):  # the route handler runs while Playwright waits
        if held:
            break
        page.page.wait_for_timeout(25)
    assert len(held) == 1
    page.page.click("#zoom-in")
    page.sharp(2)
    assert any(r.url.endswith("/render") for r in page.failed)
    assert sharp_requests(page)[-1]["viewport"] != held[0].request.post_data_json["viewport"]


def test_the_rotation_slider_asks_for_a_rotated_render_about_the_view_centre(page):
    page.sharp(1)
    page.page.locator("#rotation").fill("90")
    page.sharp(2)
    assert sharp_requests(page)[-1]["transform"] == {"rotate": 90, "center": [0.5, 0.5]}
    assert "90°" in page.page.locator("#readout").inner_text()


def test_dragging_pans_the_viewport(page):
    page.sharp(1)
    page.page.click("#zoom-in")
    page.sharp(2)
    before = sharp_requests(page)[-1]["viewport"]
    x, y = page.centre("#view")
    page.page.mouse.move(x, y)
    page.page.mouse.down()
    page.page.mouse.move(x - 60, y, steps=4)
    page.page.mouse.up()
    page.sharp(3)
    after = sharp_requests(page)[-1]["viewport"]
    assert after[0] > before[0] and after[2] > before[2]  # dragged left: the view moved right
    assert after[1] == pytest.approx(before[1])


def test_a_drawn_stroke_gets_a_prediction_as_a_bar_chart(page):
    p = page.page
    p.wait_for_selector("#digit-model option", state="attached")
    x, y = page.centre("#pad")
    p.mouse.move(x + 5, y - 55)
    p.mouse.down()
    p.mouse.move(x, y + 55, steps=10)  # one vertical stroke: a "1"
    p.mouse.up()
    p.wait_for_selector("#pad[data-state=classified], #pad[data-state=error]", state="attached")
    assert p.locator("#pad").get_attribute("data-state") == "classified", p.locator("#pad-message").inner_text()
    assert p.locator("#chart").get_attribute("data-label") == "1"
    widths = p.locator("#chart .bar").evaluate_all("bars => bars.map(b => parseFloat(b.style.width))")
    assert len(widths) == 10 and sum(widths) == pytest.approx(100, abs=0.5) and max(widths) == widths[1]
    assert "looks like a 1" in p.locator("#pad-message").inner_text()


def test_each_canvas_pixel_shows_the_model_at_the_point_the_camera_maps_it_to(page, server):
    """camera.js and the service agree on the viewport and rotation conventions: the colour on the
    canvas at pixel P equals /query at modelPointAt(P)."""
    import httpx

    page.sharp(1)
    page.page.click("#zoom-in")
    page.page.locator("#rotation").fill("30")
    page.sharp(2)
    samples = page.page.evaluate("""async () => {
        const camera = await import('./camera.js');
        const c = document.querySelector('#view');
        const cam = {cx: 0.5, cy: 0.5, zoom: Number(c.dataset.zoom), rotation: 30};
        const ctx = c.getContext('2d');
        return [[0.2, 0.3], [0.5, 0.5], [0.8, 0.65], [0.35, 0.9]].map(([fx, fy]) => {
            const px = Math.floor(fx * c.width), py = Math.floor(fy * c.height);
            const rgb = Array.from(ctx.getImageData(px, py, 1, 1).data.slice(0, 3));
            return {rgb, at: camera.modelPointAt(cam, c.width, c.height, px + 0.5, py + 0.5)};
        });
    }""")
    rgb = httpx.post(f"{server.url}/v1/models/astronaut/query", json={"coords": [s["at"] for s in samples]}).json()[
        "rgb"
    ]
    for s, expected in zip(samples, rgb):
        assert s["rgb"] == pytest.approx([255 * min(max(v, 0), 1) for v in expected], abs=2)
