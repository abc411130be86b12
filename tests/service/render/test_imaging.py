"""Rendering maths with an analytic image f(x, y) = (x, y, 0.5): tiles, supersampling, fills, encoding."""

import io

import numpy as np
import pytest
from PIL import Image

from service.geometry.sampling import Background, fill_points
from service.geometry.transform import sampling_matrix
from service.render.imaging import RenderSpec, encode, render


def ramp(points: np.ndarray) -> np.ndarray:
    return np.concatenate([points, np.full((len(points), 1), 0.5, np.float32)], axis=1)


def spec(**kw) -> RenderSpec:
    return RenderSpec(**{"width": 20, "height": 12, "matrix": sampling_matrix(), **kw})


def test_render_is_the_same_whatever_the_tile_size():
    s = spec(supersample=2, matrix=sampling_matrix(rotate=30))
    assert np.array_equal(render(ramp, s, tile_samples=16), render(ramp, s, tile_samples=1 << 16))


def test_render_samples_pixel_centres():
    img = render(ramp, spec(), 4096)
    assert img[0, 0, 0] == round(255 * 0.5 / 20) and img[-1, -1, 1] == round(255 * 11.5 / 12)


def test_supersampling_a_linear_image_changes_nothing():
    assert np.abs(render(ramp, spec(supersample=4), 4096).astype(int) - render(ramp, spec(), 4096)).max() <= 1


def test_colour_background_fills_outside_the_unit_square():
    img = render(ramp, spec(viewport=(1.5, 0.0, 2.0, 1.0), background=Background.parse("#ff0000")), 4096)
    assert np.all(img == [255, 0, 0])


def test_transparent_background_gives_partial_alpha_on_the_edge():
    # viewport [0.5, 1.5] wide, 2 pixels: the left pixel straddles x = 1 with 4×4 samples
    s = spec(
        width=2, height=1, viewport=(0.75, 0.0, 1.25, 1.0), supersample=4, background=Background.parse("transparent")
    )
    img = render(ramp, s, 4096)
    assert img.shape == (1, 2, 4)
    assert img[0, 0, 3] == 255 and img[0, 1, 3] == 0
    s = spec(width=1, height=1, viewport=(0.5, 0.0, 1.5, 1.0), supersample=4, background=s.background)
    assert render(ramp, s, 4096)[0, 0, 3] == round(255 * 0.5)


def test_extrapolate_keeps_the_network_values_outside():
    img = render(ramp, spec(width=1, height=1, viewport=(1.0, 0.0, 1.2, 1.0)), 4096)
    assert img[0, 0, 0] == 255  # clipped network output, not a fill


def test_fill_points_paints_only_outside_points():
    src = np.array([[0.5, 0.5], [1.5, 0.5]])
    rgb = fill_points(ramp(src.astype(np.float32)), src, Background.parse("white"))
    assert np.allclose(rgb[1], 1.0) and np.allclose(rgb[0], [0.5, 0.5, 0.5])


@pytest.mark.parametrize("text", ["nope", "#12", "rgb(1,2)"])
def test_unknown_background_is_refused_with_the_choices(text):
    with pytest.raises(ValueError, match="extrapolate"):
        Background.parse(text)


@pytest.mark.parametrize("fmt,pil", [("png", "PNG"), ("jpeg", "JPEG"), ("webp", "WEBP")])
def test_encode_writes_the_requested_format(fmt, pil):
    pixels = render(ramp, spec(), 4096)
    img = Image.open(io.BytesIO(encode(pixels, fmt)))
    assert img.format == pil and img.size == (20, 12)


def test_png_is_lossless():
    pixels = render(ramp, spec(background=Background("transparent")), 4096)
    assert np.array_equal(np.asarray(Image.open(io.BytesIO(encode(pixels, "png")))), pixels)
