"""Pure parts of the client: the tile plan, tile viewports, the streaming PNG writer, the atomic sink."""

import io

import numpy as np
import pytest
from PIL import Image

from inr_client.calls import ClientError
from inr_client.output import ImageFileSink
from inr_client.tiles import PngWriter, join_band, plan, tile_side, tile_viewport


def centres(viewport, width, height):
    x0, y0, x1, y1 = viewport
    xs = x0 + (np.arange(width) + 0.5) * (x1 - x0) / width
    ys = y0 + (np.arange(height) + 0.5) * (y1 - y0) / height
    return xs, ys


def test_plan_covers_every_pixel_exactly_once():
    cover = np.zeros((700, 1030), int)
    bands = plan(1030, 700, 256)
    for band in bands:
        assert len({t.height for t in band}) == 1
        for t in band:
            cover[t.y : t.y + t.height, t.x : t.x + t.width] += 1
    assert (cover == 1).all()
    assert [len(b) for b in bands] == [5, 5, 5]


def test_tile_viewports_have_the_pixel_centres_of_the_big_render():
    width, height, viewport = 37, 23, [0.1, -0.2, 0.9, 1.3]
    xs, ys = centres(viewport, width, height)
    for band in plan(width, height, 10):
        for t in band:
            txs, tys = centres(tile_viewport(t, width, height, viewport), t.width, t.height)
            np.testing.assert_allclose(txs, xs[t.x : t.x + t.width], atol=1e-12)
            np.testing.assert_allclose(tys, ys[t.y : t.y + t.height], atol=1e-12)


def test_tile_viewport_defaults_to_the_unit_square():
    (t,) = plan(8, 8, 8)[0]
    assert tile_viewport(t, 8, 8, None) == [0.0, 0.0, 1.0, 1.0]


def test_tile_side_shrinks_so_supersampled_tiles_fit_the_sample_budget():
    assert tile_side(1, 1 << 22, 1024) == 1024
    assert tile_side(4, 1 << 22, 1024) == 512
    assert tile_side(16, 1000, 1024) == 1


@pytest.mark.parametrize("channels", [3, 4])
def test_png_writer_streams_bands_into_a_png_equal_to_the_array(channels):
    rng = np.random.default_rng(0)
    image = rng.integers(0, 256, (45, 33, channels), dtype=np.uint8)
    buf = io.BytesIO()
    writer = PngWriter(buf, 33, 45, channels)
    for y in range(0, 45, 16):
        writer.write(image[y : y + 16])
    writer.close()
    decoded = np.asarray(Image.open(io.BytesIO(buf.getvalue())))
    np.testing.assert_array_equal(decoded, image)


def test_png_writer_refuses_a_band_of_the_wrong_width_and_an_unfinished_image():
    writer = PngWriter(io.BytesIO(), 10, 4)
    with pytest.raises(ValueError, match="does not fit"):
        writer.write(np.zeros((2, 9, 3), np.uint8))
    writer.write(np.zeros((2, 10, 3), np.uint8))
    with pytest.raises(ValueError, match="2 of 4 rows"):
        writer.close()


def test_join_band_gives_opaque_alpha_to_rgb_tiles_next_to_rgba_tiles():
    band = join_band([np.zeros((2, 3, 3), np.uint8), np.zeros((2, 2, 4), np.uint8)])
    assert band.shape == (2, 5, 4)
    assert (band[:, :3, 3] == 255).all()


def test_image_sink_leaves_no_file_when_the_render_fails(tmp_path):
    out = tmp_path / "big.png"
    with pytest.raises(RuntimeError):
        with ImageFileSink(out, 4, 4) as sink:
            sink.add(np.zeros((2, 4, 3), np.uint8))
            raise RuntimeError("tile 2 failed")
    assert list(tmp_path.iterdir()) == []


@pytest.mark.parametrize("suffix", [".png", ".jpg", ".webp"])
def test_image_sink_writes_the_format_its_suffix_names(tmp_path, suffix):
    out = tmp_path / f"img{suffix}"
    with ImageFileSink(out, 6, 4) as sink:
        sink.add(np.full((4, 6, 3), 200, np.uint8))
    with Image.open(out) as img:
        assert img.size == (6, 4)
        assert img.format == {".png": "PNG", ".jpg": "JPEG", ".webp": "WEBP"}[suffix]
    assert sorted(p.name for p in tmp_path.iterdir()) == [out.name]


@pytest.mark.parametrize("name, problem", [("x.gif", "must end in"), ("missing/x.png", "does not exist")])
def test_image_sink_refuses_bad_output_paths_before_any_work(tmp_path, name, problem):
    with pytest.raises(ClientError, match=problem):
        ImageFileSink(tmp_path / name, 4, 4)
