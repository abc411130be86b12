"""The viewer on a non-square model, in headless Chromium against the real server: it opens at the
native aspect (square image pixels on screen, the whole image fitted), each canvas pixel shows the model where
an independent computation of the camera puts it (turned, too), and the readout counts px per image pixel."""

import pytest
from test_viewer import Page, browser, sharp_requests  # noqa: F401  (Chromium, its flags, the browser fixture)

from tests.geometry import H, W, make_nonsquare_model
from tests.servers import Server

PAGE = (820, 560)  # CSS pixels of the page; device scale 1


@pytest.fixture(scope="module")
def geo_server(tmp_path_factory):
    repo = tmp_path_factory.mktemp("viewer-geometry")
    make_nonsquare_model(repo / "cat")
    srv = Server(repo)
    with srv.running():
        yield srv


def expected_points(c, zoom, rotation, points):
    """Model coordinates under canvas pixels, from the camera's definition (camera.js header) written out
    again: centre (0.5, 0.5), s = min(Wc/ax, Hc/ay)·zoom canvas px per square unit of max(W, H) image px."""
    import math

    ax, ay = W / max(W, H), H / max(W, H)
    s = min(c["width"] / ax, c["height"] / ay) * zoom
    t = math.radians(rotation)
    out = []
    for px, py in points:
        vx, vy = (px + 0.5 - c["width"] / 2) / s, (py + 0.5 - c["height"] / 2) / s
        out.append([0.5 + (math.cos(t) * vx - math.sin(t) * vy) / ax, 0.5 + (math.sin(t) * vx + math.cos(t) * vy) / ay])
    return out, s


def canvas_rgb(page, points):
    return page.page.evaluate(
        """(points) => {
        const c = document.querySelector('#view'), ctx = c.getContext('2d');
        return points.map(([x, y]) => Array.from(ctx.getImageData(x, y, 1, 1).data.slice(0, 3)));
    }""",
        points,
    )


def check_pixels(page, server, rotation, offsets):
    import httpx

    c = page.canvas("({width: c.width, height: c.height, zoom: Number(c.dataset.zoom)})")
    points = [[int(c["width"] * (0.5 + fx)), int(c["height"] * (0.5 + fy))] for fx, fy in offsets]
    coords, s = expected_points(c, c["zoom"], rotation, points)
    assert all(0.02 < v < 0.98 for xy in coords for v in xy), coords  # inside the image: no extrapolation
    rgb = httpx.post(f"{server.url}/v1/models/cat/query", json={"coords": coords}).json()["rgb"]
    for got, want in zip(canvas_rgb(page, points), rgb):
        assert got == pytest.approx([255 * min(max(v, 0), 1) for v in want], abs=2)
    return c, s


def test_the_viewer_opens_a_non_square_model_at_its_native_aspect(browser, geo_server):  # noqa: F811
    page = Page(browser, geo_server.url + "/?model=cat", size=PAGE)
    try:
        page.sharp(1)
        c, s = check_pixels(page, geo_server, 0, [(-0.4, -0.2), (0, 0), (0.3, 0.15), (0.45, -0.22)])
        # the whole image fits the canvas at its native aspect: one side spans the canvas, the other fits in it
        drawn = (s * W / max(W, H), s * H / max(W, H))
        assert drawn[0] <= c["width"] + 1e-6 and drawn[1] <= c["height"] + 1e-6
        assert max(drawn[0] / c["width"], drawn[1] / c["height"]) == pytest.approx(1)
        assert drawn[0] / drawn[1] == pytest.approx(W / H)
        x0, y0, x1, y1 = sharp_requests(page)[-1]["viewport"]
        assert (x1 - x0) * W / c["width"] == pytest.approx((y1 - y0) * H / c["height"])  # square image pixels
        per_pixel = s / max(W, H)
        label = f"{per_pixel:.{2 if per_pixel < 10 else 1}f} px per image pixel"
        assert label in page.page.locator("#readout").inner_text()
        page.page.locator("#rotation").fill("90")
        page.sharp(2)
        assert sharp_requests(page)[-1]["transform"] == {"rotate": 90, "center": [0.5, 0.5]}
        check_pixels(page, geo_server, 90, [(-0.1, -0.4), (0, 0), (0.15, 0.3), (-0.15, 0.1)])
        page.page.locator("#rotation").fill("30")
        page.sharp(3)
        check_pixels(page, geo_server, 30, [(-0.2, -0.15), (0, 0), (0.2, 0.2)])
        assert page.errors == []
    finally:
        page.close()
