"""IIIF request parsing and its translation into a render request (service/api/iiif/params.py, plan.py)."""

import numpy as np
import pytest

from service.api.iiif.info import Identifier, image_size, info_document, max_size, scale_factors
from service.api.iiif.params import ImageRequest, Region, Rotation, Size
from service.api.iiif.plan import plan, region_mask
from service.errors import BadInput, NotImplementedFeature

AREA, SIDE = 16_777_216, 65_536


def size_of(size, region="full", w=1000, h=1000, area=AREA):
    return Size.parse(size).resolve(Region.parse(region).resolve(w, h), area, SIDE)


@pytest.mark.parametrize(
    "size, want",
    [
        ("max", (1000, 1000)),
        ("^max", (4096, 4096)),
        ("600,", (600, 600)),
        (",450", (450, 450)),
        ("300,200", (300, 200)),
        ("!500,300", (300, 300)),
        ("pct:50", (500, 500)),
        ("^pct:200", (2000, 2000)),
        ("^1500,", (1500, 1500)),
        ("^,1200", (1200, 1200)),
        ("^!2000,500", (500, 500)),
        ("^!2000,3000", (2000, 2000)),
        ("^300,200", (300, 200)),
    ],
)
def test_sizes(size, want):
    assert size_of(size) == want


def test_max_stays_inside_max_area():
    assert size_of("max", area=250_000) == (500, 500)
    w, h = size_of("^max", "0,0,1000,500", area=1_000_000)
    assert w * h <= 1_000_000 and abs(w / h - 2) < 0.01


@pytest.mark.parametrize(
    "size, words",
    [
        ("1200,", r"upscaling needs the \^"),
        ("pct:101", r"upscaling needs the \^"),
        ("!2000,3000", r"upscaling needs the \^"),
        ("0,", "at least 1"),
        (",0", "at least 1"),
        ("pct:0", "zero"),
        ("!0,0", "zero"),
        ("^5000,5000", "maxArea"),
        ("abc", "is not max"),
        ("full", "is not max"),
        ("!100,", "needs both"),
        ("-5,", "is not max"),
        ("1e3,", "is not max"),
    ],
)
def test_bad_sizes(size, words):
    with pytest.raises(BadInput, match=words):
        size_of(size, area=1_000_000 if words == "maxArea" else AREA)


@pytest.mark.parametrize(
    "region, want",
    [
        ("full", (0, 0, 1000, 500)),
        ("square", (250, 0, 500, 500)),
        ("10,20,30,40", (10, 20, 30, 40)),
        ("pct:10,10,50,50", (100, 50, 500, 250)),
        ("900,400,500,500", (900, 400, 100, 100)),
        ("pct:50,0,100,100", (500, 0, 500, 500)),
    ],
)
def test_regions(region, want):
    b = Region.parse(region).resolve(1000, 500)
    assert (b.x, b.y, b.w, b.h) == pytest.approx(want)


@pytest.mark.parametrize(
    "region, words",
    [
        ("1000,0,10,10", "entirely outside"),
        ("0,500,10,10", "entirely outside"),
        ("pct:100,0,10,10", "outside"),
        ("pct:101,0,10,10", "outside"),
        ("0,0,0,10", "zero"),
        ("pct:0,0,0,0", "zero"),
        ("1,2,3", "is not full"),
        ("-1,0,10,10", "is not full"),
        ("pct:a,0,1,1", "is not full"),
    ],
)
def test_bad_regions(region, words):
    with pytest.raises(BadInput, match=words):
        Region.parse(region).resolve(1000, 500)


@pytest.mark.parametrize(
    "text, degrees, mirror",
    [
        ("0", 0, False),
        ("90", 90, False),
        ("!180", 180, True),
        ("22.5", 22.5, False),
        ("360", 0, False),
        ("!0", 0, True),
    ],
)
def test_rotations(text, degrees, mirror):
    r = Rotation.parse(text)
    assert (r.degrees, r.mirror) == (degrees, mirror)


@pytest.mark.parametrize("text", ["abc", "400", "360.5", "-90", "!!90", "90deg", ""])
def test_bad_rotations(text):
    with pytest.raises(BadInput, match="rotation"):
        Rotation.parse(text)


def test_qualities_and_formats():
    assert ImageRequest.parse("full", "max", "0", "gray.webp").quality == "gray"
    with pytest.raises(BadInput, match="quality 'sepia'"):
        ImageRequest.parse("full", "max", "0", "sepia.jpg")
    with pytest.raises(NotImplementedFeature, match="format 'gif'"):
        ImageRequest.parse("full", "max", "0", "default.gif")
    with pytest.raises(BadInput, match="format 'bmpx'"):
        ImageRequest.parse("full", "max", "0", "default.bmpx")
    with pytest.raises(BadInput, match="needs a format"):
        ImageRequest.parse("full", "max", "0", "default")


@pytest.mark.parametrize(
    "text, words",
    [
        ("a" * 10_000, "10000 characters"),
        ("a%2Fb".replace("%2F", "/"), "slash"),
        ("../astronaut", "slash"),
        ("..", "'..'"),
        ("astronaut@x", "version"),
    ],
)
def test_bad_identifiers(text, words):
    with pytest.raises(BadInput, match=words):
        Identifier.parse(text)


def test_identifiers():
    assert Identifier.parse("astronaut@2") == Identifier("astronaut", 2)
    assert str(Identifier.parse("astronaut")) == "astronaut"


def test_the_plain_request_is_the_region_as_viewport_without_a_transform():
    p = plan(ImageRequest.parse("100,200,300,400", "150,", "0", "default.jpg"), 1000, 1000, AREA, SIDE)
    assert p.render.transform is None
    assert p.render.viewport == pytest.approx((0.1, 0.2, 0.4, 0.6))
    assert (p.render.width, p.render.height, p.render.format) == (150, 200, "jpeg")
    assert p.canonical(1000, 1000) == "100,200,300,400/150,200"


def _model_point(p, u, v):
    return p.matrix @ np.array([u, v, 1.0])


@pytest.mark.parametrize("seed", range(4))
def test_an_upright_tile_is_planned_as_the_frames_would_plan_it(seed):
    """Rotation 0 takes a short road (no 3×3 products); it plans what the frames plan for a full turn (360)."""
    rng = np.random.default_rng(seed)
    width, height = int(rng.integers(300, 40000)), int(rng.integers(300, 40000))
    for _ in range(50):
        x, y = int(rng.integers(0, width - 2)), int(rng.integers(0, height - 2))
        w, h = int(rng.integers(1, width - x + 1)), int(rng.integers(1, height - y + 1))
        size = str(rng.choice(["max", "^max", f"{max(1, w // 3)},", f"^{w * 2},", "pct:50"]))
        args = (width, height, 10**8, (2 * width, 2 * height))
        region = f"{x},{y},{w},{h}"
        try:
            short = plan(ImageRequest.parse(region, size, "0", "default.jpg"), *args)
        except BadInput:  # over maxArea: the frames refuse it too
            with pytest.raises(BadInput):
                plan(ImageRequest.parse(region, size, "360", "default.jpg"), *args)
            continue
        frames = plan(ImageRequest.parse(region, size, "360", "default.jpg"), *args)
        assert (short.box, short.size, short.out, short.mask_region) == (frames.box, frames.size, frames.out, False)
        np.testing.assert_allclose(short.render.viewport, frames.render.viewport, rtol=0, atol=1e-12)
        assert short.render.transform is None and (short.matrix == np.eye(3)).all()


def test_rotation_and_mirroring_map_output_corners_to_the_right_image_corners():
    # 90° clockwise: the output's top-left shows the image's bottom-left (x=0, y=1).
    p = plan(ImageRequest.parse("full", "max", "90", "default.png"), 1000, 500, AREA, SIDE)
    x0, y0, x1, y1 = p.render.viewport
    assert (p.render.width, p.render.height) == (500, 1000)
    assert _model_point(p, x0, y0)[:2] == pytest.approx([0, 1])
    # mirrored: the output's top-left is the image's top-right.
    p = plan(ImageRequest.parse("full", "max", "!0", "default.png"), 1000, 500, AREA, SIDE)
    x0, y0, x1, y1 = p.render.viewport
    assert _model_point(p, x0, y0)[:2] == pytest.approx([1, 0])
    assert p.canonical(1000, 500) == "full/max"


def test_non_right_angles_get_a_transparent_bounding_box_and_a_region_mask():
    p = plan(ImageRequest.parse("100,100,200,200", "max", "45", "default.png"), 1000, 1000, AREA, SIDE)
    assert (p.render.width, p.render.height) == (283, 283)
    assert p.render.background == "transparent" and p.mask_region
    mask = region_mask(p, 1000, 1000)
    assert mask[141, 141] == 1 and mask[0, 0] == 0 and mask[0, 141] == 1
    assert plan(ImageRequest.parse("full", "max", "30", "default.jpg"), 10, 10, AREA, SIDE).render.background == "white"


def test_image_size_rule_and_info():
    assert image_size({"source": {"size": [256, 256]}}) == (256, 256)  # the native size, no virtual zoom
    assert image_size({"source": {"size": [2560, 1600]}}) == (2560, 1600)
    assert image_size({"source": {"size": [128, 128], "native_size": [1000, 1000]}}) == (1000, 1000)
    assert image_size({}) == (256, 256)  # no size recorded: square
    assert max_size(2560, 1600, 16) == (40960, 25600) and max_size(8000, 10, 16) == (65536, 160)
    assert scale_factors(4096, 4096) == [1, 2, 4, 8] and scale_factors(1000, 1000) == [1, 2]
    assert scale_factors(2560, 1600) == [1, 2, 4, 8]
    doc = info_document("http://h/iiif/3/x", 1000, 1000, 250_000)
    assert doc["sizes"] == [{"width": 500, "height": 500}] and (doc["maxWidth"], doc["maxHeight"]) == (1000, 1000)
    doc = info_document("http://h/iiif/3/x", 2560, 1600, 16_777_216, zoom=4)
    assert (doc["width"], doc["height"], doc["maxWidth"], doc["maxHeight"]) == (2560, 1600, 10240, 6400)
    assert "sizeUpscaling" in doc["extraFeatures"]


def test_upscaled_sizes_stop_at_max_width_and_height():
    box = Region.parse("full").resolve(2560, 1600)
    assert Size.parse("^max").resolve(box, 10**9, (10240, 6400)) == (10240, 6400)
    assert Size.parse("^5120,").resolve(box, 10**9, (10240, 6400)) == (5120, 3200)
    with pytest.raises(BadInput, match="maxWidth and maxHeight are 10240 and 6400"):
        Size.parse("^12000,").resolve(box, 10**9, (10240, 6400))


def test_the_iiif_test_image_is_the_validators_colour_table():
    from iiif_validator.validator import ValidationInfo

    from training.images import iiif_test_image, load_image

    table = ValidationInfo().colorInfo
    img = iiif_test_image()
    assert img.shape == (1000, 1000, 3)
    for x, y in ((0, 0), (3, 7), (9, 2)):
        assert tuple(img[y * 100 + 50, x * 100 + 50]) == table[x][y]  # column x, row y
    small, source = load_image("iiif-test", 128)
    assert source["native_size"] == [1000, 1000]
    # area-averaged: the pixels inside a square keep its colour exactly (no ringing along the edges)
    assert np.abs(small[2:10, 2:10] * 255 - np.array(table[0][0])).max() < 0.5


def test_the_iiif_test_image_carries_its_own_training_defaults():
    import argparse

    from training.cli_image import add_image_options, fit_config

    p = argparse.ArgumentParser()
    add_image_options(p)
    cfg = fit_config(p.parse_args(["--image", "iiif-test", "--size", "128", "--protocol", "full"]))
    assert (cfg.model.width, cfg.model.encoding.features, cfg.model.encoding.scale, cfg.steps) == (128, 128, 14.0, 2000)
    cfg = fit_config(p.parse_args(["--image", "iiif-test", "--width", "64", "--steps", "10"]))
    assert (cfg.model.width, cfg.steps) == (64, 10)
    assert fit_config(p.parse_args(["--image", "astronaut"])).model.width == 256
