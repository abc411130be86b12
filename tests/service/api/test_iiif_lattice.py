"""IIIF tiles of a dense grid model, rendered by the lattice kernel (service/engine/_latticekernel.c), against the
real server: regions and sizes at the image's edges (one pixel, one row, one column, clipped past the edge, 1 pixel
wide outputs) are the whole image's pixels where they are at native scale, have the size asked for elsewhere, and a
region outside the image is a 400 that leaves the server up. The kernel reads the render's axes at the tile's
offsets: an offset off by one, or a tile that ends past them, shows here as wrong pixels or an error.
"""

from __future__ import annotations

import io

import httpx
import numpy as np
import pytest
from PIL import Image

from service.engine import lattice as lattice_module
from tests.servers import Server
from tests.service.engine.test_lattice import H, W, grid_folder

NAME = "lattice"


@pytest.fixture(scope="module")
def iiif(tmp_path_factory):
    repo = tmp_path_factory.mktemp("iiif-lattice")
    runtime = grid_folder(repo, NAME, {"grid_table_bits": 8, "grid_finest_features": 1}, True)
    assert runtime.lattice is not None
    assert runtime.lattice.kernel is not None or lattice_module._latticekernel is None  # built where it can be
    # small tiles: a 150-wide render is cut into several rows of tiles, its last one short
    srv = Server(repo, env={"INR_RENDER_TILE_SAMPLES": "256", "INR_IIIF_ZOOM": "4"})
    with srv.running(), httpx.Client(base_url=srv.url, timeout=60.0) as c:
        yield c


def image(iiif, path: str) -> np.ndarray:
    r = iiif.get(f"/iiif/3/{NAME}/{path}")
    assert r.status_code == 200, r.text
    return np.asarray(Image.open(io.BytesIO(r.content)).convert("RGB")).astype(int)


@pytest.fixture(scope="module")
def whole(iiif):
    info = iiif.get(f"/iiif/3/{NAME}/info.json").json()
    assert (info["width"], info["height"]) == (W, H)
    return image(iiif, "full/max/0/default.png")


@pytest.mark.parametrize(
    "region, box",  # box: the pixels of the whole image the region shows (x0, y0, x1, y1)
    [
        ("0,0,1,1", (0, 0, 1, 1)),
        (f"{W - 1},{H - 1},1,1", (W - 1, H - 1, W, H)),
        (f"{W - 1},0,1,{H}", (W - 1, 0, W, H)),
        (f"0,{H - 1},{W},1", (0, H - 1, W, H)),
        (f"{W - 7},{H - 5},50,50", (W - 7, H - 5, W, H)),  # clipped at the image's edge
        ("13,17,101,67", (13, 17, 114, 84)),  # odd offsets and sizes: tiles that do not start at 0
    ],
)
def test_regions_at_native_scale_are_the_whole_images_pixels(iiif, whole, region, box):
    x0, y0, x1, y1 = box
    got = image(iiif, f"{region}/max/0/default.png")
    assert got.shape == (y1 - y0, x1 - x0, 3)
    assert np.abs(got - whole[y0:y1, x0:x1]).max() <= 1


@pytest.mark.parametrize(
    "region, size, shape",
    [
        ("full", "1,", (1, 1)),
        ("full", f"{W},1", (1, W)),
        ("full", f"1,{H}", (H, 1)),
        (f"{W - 1},{H - 1},1,1", "^3,", (3, 3)),
        ("square", "!7,7", (7, 7)),
        ("pct:99.5,99.5,0.5,0.5", "max", (1, 1)),
        (f"{W - 3},0,3,{H}", f"^{4 * 3},", (4 * H, 12)),
    ],
)
def test_odd_sizes_at_the_edges_render(iiif, region, size, shape):
    got = image(iiif, f"{region}/{size}/0/default.png")
    assert got.shape == (*shape, 3)


@pytest.mark.parametrize(
    "region, words",
    [(f"{W},{H},10,10", "region"), (f"{W},0,1,1", "region"), ("0,0,0,5", "region"), ("-1,0,5,5", "region")],
)
def test_regions_outside_the_image_are_refused(iiif, whole, region, words):
    r = iiif.get(f"/iiif/3/{NAME}/{region}/max/0/default.png")
    assert r.status_code == 400 and words in r.json()["error"].lower(), r.text
    assert np.array_equal(image(iiif, "full/max/0/default.png"), whole)  # the server stays up, its tiles unchanged
