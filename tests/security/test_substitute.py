"""Class 3, the substitute read at full size (docs/security.md, "The substitute"). `thumb` is a 32×32 image model
whose substitute is 16 px on its long side. The secure answer: a request finer than the substitute on either axis is
refused, and every answer a substitute-only caller gets is a function of one fixed 16×16 raster, so shifting the
region by sub-pixel offsets and interleaving many small answers rebuilds nothing finer than that raster."""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
from PIL import Image

SIDE, SUB = 32, 16


def png(r: httpx.Response) -> np.ndarray:
    assert r.status_code == 200, r.text
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB")).astype(np.float64)


def bilinear(raster: np.ndarray, box: tuple[float, float, float, float], size: tuple[int, int]) -> np.ndarray:
    """What a region of the image at a size is, made from the raster alone (pixel centres, edges clamped)."""
    x, y, w, h = box
    sw, sh = size
    scale = raster.shape[1] / SIDE
    fx = np.clip((x + (np.arange(sw) + 0.5) * w / sw) * scale - 0.5, 0, raster.shape[1] - 1)
    fy = np.clip((y + (np.arange(sh) + 0.5) * h / sh) * scale - 0.5, 0, raster.shape[0] - 1)
    x0, y0 = np.floor(fx).astype(int), np.floor(fy).astype(int)
    x1, y1 = np.minimum(x0 + 1, raster.shape[1] - 1), np.minimum(y0 + 1, raster.shape[0] - 1)
    ax, ay = (fx - x0)[None, :, None], (fy - y0)[:, None, None]
    top = raster[y0][:, x0] * (1 - ax) + raster[y0][:, x1] * ax
    bottom = raster[y1][:, x0] * (1 - ax) + raster[y1][:, x1] * ax
    return top * (1 - ay) + bottom * ay


@pytest.mark.parametrize("size", ["16,32", "32,16", "!32,32", "^32,32", "pct:100"])
def test_a_request_finer_than_the_substitute_on_either_axis_is_refused(stack, size):
    r = httpx.get(f"{stack.open_url}/iiif/3/thumb/full/{size}/0/default.png")
    assert r.status_code == 401, (size, r.status_code)  # `max` is the substitute's size: test_small_holes.py


def test_every_substitute_answer_is_made_from_one_fixed_raster(stack):
    raster = png(httpx.get(f"{stack.open_url}/iiif/3/thumb/full/{SUB},{SUB}/0/default.png"))
    # regions shifted by sub-pixel steps (pct:), each at the substitute's scale or coarser: the attack of the issue
    for x, y, w, h, sw, sh in [
        (0, 0, 16, 16, 8, 8),
        (0.3, 0.7, 16, 16, 8, 8),
        (1.1, 0.4, 16, 16, 8, 8),
        (3, 5, 20, 17, 10, 8),
        (10.5, 2.25, 12, 12, 6, 6),
        (0, 0, 32, 32, 12, 7),
    ]:
        region = f"pct:{x / SIDE * 100:.6f},{y / SIDE * 100:.6f},{w / SIDE * 100:.6f},{h / SIDE * 100:.6f}"
        got = png(httpx.get(f"{stack.open_url}/iiif/3/thumb/{region}/{sw},{sh}/0/default.png"))
        assert got.shape[:2] == (sh, sw)
        box = (x, y, min(w, SIDE - x), min(h, SIDE - y))  # cropped at the image's edges, as IIIF says
        assert np.abs(got - bilinear(raster, box, (sw, sh))).max() <= 1.0, (x, y, w, h)
    mirrored = png(httpx.get(f"{stack.open_url}/iiif/3/thumb/full/{SUB},{SUB}/!0/default.png"))
    assert np.abs(mirrored - raster[:, ::-1]).max() <= 1.0


def test_the_substitute_is_a_low_pass_image_not_the_networks_samples(stack):
    """The raster averages 4×4 samples a pixel: it differs from the network's point samples at the same size, which a
    reader with the scope gets at the same URL."""
    url = f"{stack.open_url}/iiif/3/thumb/full/{SUB},{SUB}/0/default.png"
    substitute, native = png(httpx.get(url)), png(httpx.get(url, headers=stack.auth("admin")))
    assert np.abs(substitute - native).mean() > 0.5


def test_the_substitute_cannot_be_rendered_past_through_v1_or_a_pinned_version(stack):
    assert httpx.get(f"{stack.open_url}/v1/models/thumb/render?width=32").status_code == 401
    assert httpx.get(f"{stack.open_url}/iiif/3/thumb@1/full/32,32/0/default.png").status_code == 401
    assert png(httpx.get(f"{stack.open_url}/iiif/3/thumb@1/full/16,16/0/default.png")).shape[:2] == (16, 16)
