"""MNIST-style preprocessing of uploads, and checks of JSON pixel arrays."""

import io

import numpy as np
import pytest
from PIL import Image

from service.engine.preprocess import centre_by_mass, crop_to_ink, decode, fit_box, images_from_json, mnist_like
from service.errors import BadInput, TooLarge
from tests.servers import draw_digit, png_bytes


def test_dark_on_light_and_light_on_dark_drawings_give_the_same_input():
    dark = mnist_like(draw_digit(4, ink=(20, 20, 20), paper=(250, 250, 250)))
    light = mnist_like(draw_digit(4, ink=(250, 250, 250), paper=(20, 20, 20)))
    assert np.abs(dark - light).max() < 0.05


def test_upload_becomes_white_digit_on_black_in_28_by_28():
    x = mnist_like(draw_digit(2))
    assert x.shape == (28, 28) and x.dtype == np.float32
    assert x.min() == 0.0 and x.max() == pytest.approx(1.0, abs=0.05)
    assert x[0].max() == 0 and x[:, 0].max() == 0  # black border


def test_ink_is_scaled_so_its_longest_side_is_20_pixels():
    x = mnist_like(draw_digit(1, size=400, font_size=300))  # tall and thin
    rows = np.flatnonzero(x.max(axis=1) > 0.2)
    assert 19 <= rows[-1] - rows[0] + 1 <= 21


def test_centre_of_mass_lands_in_the_middle():
    x = mnist_like(draw_digit(7, offset=(60, -50)))
    ys, xs = np.indices(x.shape)
    assert abs((ys * x).sum() / x.sum() - 13.5) <= 0.75
    assert abs((xs * x).sum() / x.sum() - 13.5) <= 0.75


def test_position_and_size_of_the_drawing_do_not_matter():
    a = mnist_like(draw_digit(3, size=200))
    b = mnist_like(draw_digit(3, size=600, font_size=450, stroke=18, offset=(-80, 70)))
    assert np.abs(a - b).mean() < 0.06


def test_transparent_canvas_with_dark_strokes_is_read_as_ink():
    img = draw_digit(5, ink=(0, 0, 0), paper=(255, 255, 255)).convert("L")
    rgba = Image.new("RGBA", img.size, (0, 0, 0, 0))
    rgba.putalpha(Image.eval(img, lambda v: 255 - v))  # black strokes, transparent elsewhere
    assert np.abs(mnist_like(rgba) - mnist_like(img)).max() < 0.1


def test_16_bit_greyscale_png_reads_like_8_bit():
    grey = draw_digit(6).convert("L")
    deep = Image.fromarray(np.asarray(grey).astype(np.uint16) * 257)
    reread = decode(png_bytes(deep), "deep.png", 10**6)
    assert reread.mode.startswith("I") and np.abs(mnist_like(reread) - mnist_like(grey)).max() < 0.01


def test_jpeg_exif_orientation_is_applied():
    upright = draw_digit(7)
    exif = Image.Exif()
    exif[0x0112] = 6  # stored turned; viewers rotate it 90° clockwise to show it upright
    buf = io.BytesIO()
    upright.rotate(90, expand=True).save(buf, "JPEG", exif=exif.tobytes(), quality=95)
    img = decode(buf.getvalue(), "phone.jpg", 10**6)
    assert np.abs(mnist_like(img) - mnist_like(upright)).mean() < 0.03


def test_blank_image_is_refused():
    with pytest.raises(BadInput, match="no visible digit"):
        mnist_like(Image.new("RGB", (50, 50), (255, 255, 255)), "blank.png")


def test_centre_by_mass_shifts_by_whole_pixels_and_clips_what_falls_outside():
    ink = np.zeros((20, 20))
    ink[0, 0], ink[19, 19] = 10.0, 1.0  # centre of mass at (1.73, 1.73) → shift by 12
    out = centre_by_mass(ink)
    assert out[12, 12] == 10.0 and out.sum() == 10.0


def test_fit_box_keeps_the_aspect_ratio():
    assert fit_box(np.ones((40, 10))).shape == (20, 5)


def test_crop_to_ink_finds_the_bounding_box():
    ink = np.zeros((10, 10))
    ink[2:5, 3:8] = 1.0
    assert crop_to_ink(ink).shape == (3, 5)


@pytest.mark.parametrize("fmt", ["PNG", "JPEG"])
def test_png_and_jpeg_decode(fmt):
    assert decode(png_bytes(draw_digit(0), fmt), "x", 10**6).size == (200, 200)


def test_other_formats_are_refused_by_name():
    with pytest.raises(BadInput, match="GIF; send PNG or JPEG"):
        decode(png_bytes(draw_digit(0), "GIF"), "d.gif", 10**6)


@pytest.mark.parametrize("data", [b"", b"not an image", png_bytes(draw_digit(0))[:100]])
def test_unreadable_or_truncated_files_are_refused(data):
    with pytest.raises(BadInput, match="'d.png'"):
        decode(data, "d.png", 10**6)


def test_images_over_the_pixel_limit_are_refused_before_decoding():
    with pytest.raises(TooLarge, match="200×200"):
        decode(png_bytes(draw_digit(0)), "big.png", 10_000)


def test_json_images_accept_nested_and_flat():
    a = np.random.default_rng(0).random((28, 28))
    x = images_from_json([a.tolist(), a.ravel().tolist()], 8)
    assert x.shape == (2, 1, 28, 28) and np.allclose(x[0], x[1])


@pytest.mark.parametrize(
    "images,message",
    [
        ([], "non-empty"),
        ([[0.5] * 783], r"images\[0\] has shape \[783\]"),
        ([[[0.5] * 28] * 27], r"shape \[27, 28\]"),
        ([[0.5] * 784, [[0.1] * 28] * 28 + [[0.1]]], r"images\[1\] must be numbers"),
        ([[float("nan")] * 784], "NaN or Inf"),
        ([[2.0] * 784], r"values in \[2, 2\]"),
        ([["a"] * 784], "must be numbers"),
    ],
)
def test_json_images_with_bad_shapes_or_values_are_refused(images, message):
    with pytest.raises(BadInput, match=message):
        images_from_json(images, 8)


def test_json_images_over_the_limit_are_refused():
    with pytest.raises(TooLarge, match="limit of 2"):
        images_from_json([[0.0] * 784] * 3, 2)
