"""A non-square model's geometry in the render path: transforms in square pixels, the render frame,
the default size, and the IIIF plan, on an analytic image model (a function of the coordinates) rendered by
the real render code (service/api/v1/render.py `job_of` → service/render/imaging.py)."""

import numpy as np
import pytest

from service.api.iiif.params import ImageRequest
from service.api.iiif.plan import plan
from service.api.schemas import RenderRequest
from service.api.v1.render import job_of
from service.errors import TooLarge
from service.geometry import transform as tf
from service.render.imaging import render

SIZE = (2560, 1600)  # W × H: the photo


def analytic(coords: np.ndarray) -> np.ndarray:
    """rgb at [N, 2] float32 coordinates: detail at the pixel scale of a 2560×1600 image, different per axis."""
    x, y = coords[:, 0].astype(np.float64), coords[:, 1].astype(np.float64)
    r = 0.5 + 0.5 * np.sin(2 * np.pi * (37.3 * x + 11.1 * y) + 0.3)
    g = 0.5 + 0.5 * np.cos(2 * np.pi * (5.7 * x * x - 23.9 * y))
    b = np.clip(x * 0.7 + y * 0.2, 0.0, 1.0)
    return np.stack([r, g, b], axis=1).astype(np.float32)


def draw(size=SIZE, **fields) -> np.ndarray:
    job = job_of(RenderRequest.model_validate(fields), size)
    return render(analytic, job.spec, 1 << 18)


def psnr(a: np.ndarray, b: np.ndarray) -> float:
    mse = np.mean((a.astype(np.float64) - b.astype(np.float64)) ** 2)
    return float("inf") if mse == 0 else 10 * np.log10(255.0**2 / mse)


def test_square_models_get_exactly_the_unit_square_transforms():
    for params in (
        {"rotate": 30, "scale": (1.5, 0.5), "translate": (0.1, -0.2), "center": (0.3, 0.6)},
        {"rotate": 90},
        {},
    ):
        plain = tf.sampling_matrix(**params)
        assert np.array_equal(tf.sampling_matrix(**params, size=(512, 512)), plain)
        assert np.array_equal(tf.sampling_matrix(**params, size=None), plain)
    assert tf.render_frame((0.0, 0.2, 0.5, 0.4), 90, (64, 64)) == (0.0, 0.2, 0.5, 0.4)


def test_rotation_acts_in_square_pixels():
    """A 90° turn of a 2560×1600 model about its centre maps pixel offsets to pixel offsets, not unit offsets."""
    m = tf.forward(rotate=90, size=SIZE)
    # 100 pixels right of the centre turns (counter-clockwise on screen, y down) to 100 pixels up
    x, y, _ = m @ np.array([0.5 + 100 / 2560, 0.5, 1.0])
    assert (x * 2560, y * 1600) == pytest.approx((1280, 800 - 100))
    inv = tf.sampling_matrix(rotate=37, scale=(1.3, 0.7), translate=(0.05, 0.1), center=(0.4, 0.6), size=SIZE)
    fwd = tf.forward(rotate=37, scale=(1.3, 0.7), translate=(0.05, 0.1), center=(0.4, 0.6), size=SIZE)
    pts = np.random.default_rng(0).random((20, 2))
    assert np.allclose(tf.apply(inv, tf.apply(fwd[:2], pts)), pts)
    assert np.array_equal(
        tf.sampling_matrix(matrix=[[0, 1, 0], [1, 0, 0]], size=SIZE), np.array([[0, 1, 0], [1, 0, 0]], float)
    )  # the matrix form stays raw


@pytest.fixture(scope="module")
def plain():
    return draw(width=2560, height=1600)


def test_rotate_90_render_of_a_non_square_model_is_np_rot90_of_the_plain_render(plain):
    turned = draw(width=1600, height=2560, transform={"rotate": 90})
    assert turned.shape == (2560, 1600, 3) and psnr(turned, np.rot90(plain)) >= 100
    small = draw(width=640, height=400)
    for rotate, k in ((-90, 3), (270, 3), (180, 2), (450, 1)):
        w, h = (400, 640) if k % 2 else (640, 400)
        assert psnr(draw(width=w, height=h, transform={"rotate": rotate}), np.rot90(small, k)) >= 100, rotate


def test_rotate_90_of_a_region_is_the_turned_region():
    """The viewport is read in the turned image's coordinates, so tiles of a turned render are the turned render's
    tiles (inr_client fetches large renders as tiles of the viewport)."""
    whole = draw(width=400, height=640, transform={"rotate": 90})
    top = draw(width=400, height=320, viewport=[0, 0, 1, 0.5], transform={"rotate": 90})
    bottom_right = draw(width=200, height=320, viewport=[0.5, 0.5, 1, 1], transform={"rotate": 90})
    assert psnr(top, whole[:320]) >= 100 and psnr(bottom_right, whole[320:, 200:]) >= 100


def test_a_one_pixel_translate_is_an_exact_shift(plain):
    right = draw(width=2560, height=1600, transform={"translate": [1 / 2560, 0]})
    down = draw(width=2560, height=1600, transform={"translate": [0, 1 / 1600]})
    assert np.array_equal(right[:, 1:], plain[:, :-1]) and np.array_equal(down[1:], plain[:-1])


def test_a_missing_side_follows_the_native_aspect():
    assert job_of(RenderRequest(width=1280), SIZE).spec.height == 800
    assert job_of(RenderRequest(height=400), SIZE).spec.width == 640
    assert (job_of(RenderRequest(), SIZE).spec.width, job_of(RenderRequest(), SIZE).spec.height) == (256, 160)
    turned = job_of(RenderRequest.model_validate({"width": 800, "transform": {"rotate": 90}}), SIZE).spec
    assert (turned.width, turned.height) == (800, 1280)
    region = job_of(RenderRequest.model_validate({"width": 100, "viewport": [0, 0, 0.5, 1]}), SIZE).spec
    assert region.height == 125  # 1280×1600 model pixels
    square = job_of(RenderRequest(width=300), None).spec
    assert (square.width, square.height) == (300, 300)
    assert (job_of(RenderRequest(), (32, 32)).spec.width, job_of(RenderRequest(), (32, 32)).spec.height) == (256, 256)
    with pytest.raises(TooLarge, match="limited to 65536"):
        job_of(RenderRequest(width=60000), (100, 10000))
    with pytest.raises(TooLarge, match="give both width and height"):
        job_of(RenderRequest.model_validate({"width": 10, "viewport": [0, 0, 5e-324, 1]}), SIZE)


def test_iiif_rotates_a_non_square_image_in_its_pixels():
    p = plan(ImageRequest.parse("full", "max", "90", "default.png"), 2560, 1600, 1 << 24, 65536)
    assert (p.render.width, p.render.height) == (1600, 2560)
    plain = plan(ImageRequest.parse("full", "max", "0", "default.png"), 2560, 1600, 1 << 24, 65536)
    a, b = render(analytic, plain.render.spec(), 1 << 18), render(analytic, p.render.spec(), 1 << 18)
    assert psnr(b, np.rot90(a, -1)) >= 100  # IIIF turns clockwise
