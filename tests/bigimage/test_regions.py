"""bigimage's readers on real files, written here by Pillow and by libvips: a region equals the same region of
the whole image as Pillow decodes it (exactly, for the lossless formats); pyramids, BigTIFF, 16-bit, grey and
alpha; read_scaled, strips and to_tiled."""

from __future__ import annotations

import numpy as np
import pytest
import pyvips
from PIL import Image

from bigimage import probe, read_region, read_scaled, strips, to_tiled
from tests.bigimage.images import over_white, pillow_rgb

REGION = (37, 61, 300, 200)  # x, y, w, h: across tile and strip boundaries, not aligned to anything


def vips(a: np.ndarray, interpretation: str) -> pyvips.Image:
    return pyvips.Image.new_from_array(a, interpretation=interpretation)


def write(fmt: str, path, a: np.ndarray):
    """The photo in one format, by the library a user's file would most likely come from."""
    if fmt == "png":
        Image.fromarray(a).save(path)
    elif fmt == "jpeg":
        Image.fromarray(a).save(path, quality=90)
    elif fmt == "png-interlaced":  # Adam7, which Pillow does not write
        vips(a, "srgb").pngsave(str(path), interlace=True)
    elif fmt == "jpeg-progressive":
        Image.fromarray(a).save(path, "JPEG", quality=90, progressive=True)
    elif fmt == "tiff-strips":
        Image.fromarray(a).save(path, "TIFF", compression="tiff_adobe_deflate")
    elif fmt == "tiff-tiled":
        vips(a, "srgb").tiffsave(str(path), tile=True, tile_width=64, tile_height=64, compression="lzw")
    elif fmt == "bigtiff":
        vips(a, "srgb").tiffsave(str(path), tile=True, tile_width=128, tile_height=64, bigtiff=True)


@pytest.mark.parametrize(
    "fmt", ["png", "png-interlaced", "jpeg", "jpeg-progressive", "tiff-strips", "tiff-tiled", "bigtiff"]
)
def test_a_region_is_the_same_region_of_the_whole_image(tmp_path, photo, fmt):
    path = tmp_path / f"photo.{fmt}"
    write(fmt, path, photo)
    header = probe(path)
    want_format = fmt.split("-")[0].replace("big", "")
    assert (header.format, header.width, header.height, header.bands) == (want_format, 700, 500, 3)
    assert header.interlaced == (fmt in ("png-interlaced", "jpeg-progressive"))  # decoded whole: memory ∝ pixels
    assert header.bigtiff == (fmt == "bigtiff")
    assert header.tile == ({"tiff-tiled": (64, 64), "bigtiff": (128, 64)}.get(fmt))
    x, y, w, h = REGION
    got = read_region(path, x, y, w, h)
    assert got.shape == (h, w, 3) and got.dtype == np.uint8
    want = pillow_rgb(path)[y : y + h, x : x + w]
    if fmt.startswith("jpeg"):  # both libjpeg-turbo, same upsampling: equal but for a rare ±1 of the IDCT
        assert np.abs(got.astype(int) - want).max() <= 1
    else:
        np.testing.assert_array_equal(got, want)
        np.testing.assert_array_equal(got, photo[y : y + h, x : x + w])


@pytest.mark.parametrize("subifd", [False, True], ids=["pages", "subifds"])
def test_a_pyramidal_tiff_reports_its_levels_and_reads_each(tmp_path, photo, subifd):
    path = tmp_path / "pyramid.tif"
    vips(photo, "srgb").tiffsave(str(path), tile=True, tile_width=64, tile_height=64, pyramid=True, subifd=subifd)
    header = probe(path)
    assert header.pyramid and header.levels[:3] == ((700, 500), (350, 250), (175, 125))
    for (w, h), (w2, h2) in zip(header.levels, header.levels[1:]):
        assert (w2, h2) == (w // 2, h // 2)
    assert header.pages == (1 if subifd else len(header.levels))
    np.testing.assert_array_equal(read_region(path, *REGION), photo[61:261, 37:337])
    # level 1 is libvips' 2×2 box average of level 0
    box = photo[:500, :700].reshape(250, 2, 350, 2, 3).astype(float).mean(axis=(1, 3))
    level1 = read_region(path, 10, 20, 300, 200, level=1)
    assert np.abs(level1.astype(float) - box[20:220, 10:310]).max() <= 1
    if not subifd:  # Pillow reads a page pyramid's levels as frames
        with Image.open(path) as im:
            im.seek(1)
            np.testing.assert_array_equal(level1, np.asarray(im.convert("RGB"))[20:220, 10:310])
    # read_scaled starts from the smallest level still large enough: level 2 (175 wide) for 150
    small = read_scaled(path, 150)
    assert small.shape == (107, 150, 3)
    ref = np.asarray(Image.fromarray(photo).resize((150, 107), Image.LANCZOS), dtype=float)
    assert np.abs(small - ref).mean() < 3


def test_16_bit_is_scaled_by_255_over_65535_and_rounded(tmp_path, photo):
    rng = np.random.default_rng(1)
    a16 = (photo.astype(np.uint16) * 257 + rng.integers(0, 257, photo.shape)).astype(np.uint16)
    want = np.rint(a16 / 257.0).astype(np.uint8)
    vips(a16, "rgb16").pngsave(str(tmp_path / "rgb16.png"), bitdepth=16)
    vips(a16, "rgb16").tiffsave(str(tmp_path / "rgb16.tif"), tile=True, tile_width=64, tile_height=64)
    Image.fromarray(a16[..., 0]).save(tmp_path / "grey16.png")  # Pillow's I;16
    x, y, w, h = REGION
    for name in ("rgb16.png", "rgb16.tif"):
        header = probe(tmp_path / name)
        assert (header.bits_per_sample, header.dtype) == (16, "uint16")
        np.testing.assert_array_equal(read_region(tmp_path / name, *REGION), want[y : y + h, x : x + w])
    grey = read_region(tmp_path / "grey16.png", *REGION)
    assert probe(tmp_path / "grey16.png").bands == 1
    np.testing.assert_array_equal(grey, np.repeat(want[y : y + h, x : x + w, :1], 3, axis=2))


def test_grey_and_bilevel_are_repeated_into_three_bands(tmp_path, photo):
    grey = np.asarray(Image.fromarray(photo).convert("L"))
    Image.fromarray(grey).save(tmp_path / "grey.png")
    Image.fromarray(grey).convert("1").save(tmp_path / "bilevel.tif", compression="group4")
    x, y, w, h = REGION
    got = read_region(tmp_path / "grey.png", *REGION)
    np.testing.assert_array_equal(got, np.repeat(grey[y : y + h, x : x + w, None], 3, axis=2))
    assert probe(tmp_path / "bilevel.tif").bits_per_sample == 1
    np.testing.assert_array_equal(
        read_region(tmp_path / "bilevel.tif", *REGION), pillow_rgb(tmp_path / "bilevel.tif")[y : y + h, x : x + w]
    )


def test_alpha_is_composited_over_white(tmp_path, photo):
    rng = np.random.default_rng(2)
    alpha = rng.integers(0, 256, photo.shape[:2], dtype=np.uint8)
    rgba = np.dstack([photo, alpha])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    Image.fromarray(np.dstack([photo[..., 1], alpha]), "LA").save(tmp_path / "la.png")
    a16 = rgba.astype(np.uint16) * 257
    vips(a16, "rgb16").tiffsave(str(tmp_path / "rgba16.tif"), tile=True, tile_width=64, tile_height=64)
    x, y, w, h = REGION
    cases = {
        "rgba.png": over_white(rgba, 255),
        "la.png": over_white(np.dstack([photo[..., 1], alpha]), 255),
        "rgba16.tif": over_white(a16, 65535),
    }
    for name, want in cases.items():
        assert probe(tmp_path / name).alpha
        got = read_region(tmp_path / name, *REGION).astype(int)
        assert np.abs(got - want[y : y + h, x : x + w]).max() <= 1, name
    # and as the fit uploads composite it (service/fits/upload.py: Pillow's alpha_composite over white)
    with Image.open(tmp_path / "rgba.png") as im:
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        pillow = np.asarray(Image.alpha_composite(white, im.convert("RGBA")).convert("RGB"))
    assert np.abs(read_region(tmp_path / "rgba.png", *REGION).astype(int) - pillow[y : y + h, x : x + w]).max() <= 1


def test_strips_cover_the_image_once(tmp_path, photo):
    Image.fromarray(photo).save(tmp_path / "photo.png")
    write("tiff-tiled", tmp_path / "photo.tif", photo)
    for name in ("photo.png", "photo.tif"):
        got = list(strips(tmp_path / name, 96))
        assert [y for y, _ in got] == list(range(0, 500, 96))
        assert got[-1][1].shape == (500 - 480, 700, 3)
        np.testing.assert_array_equal(np.concatenate([s for _, s in got]), photo)


def test_read_scaled_shrinks_a_jpeg_on_load_and_never_enlarges(tmp_path, photo):
    big = np.asarray(Image.fromarray(photo).resize((2100, 1500), Image.LANCZOS))
    Image.fromarray(big).save(tmp_path / "big.jpg", quality=95)
    small = read_scaled(tmp_path / "big.jpg", 350)  # 1/4 DCT scale (525×375), then Lanczos to 350
    assert small.shape == (250, 350, 3)
    ref = np.asarray(Image.open(tmp_path / "big.jpg").convert("RGB").resize((350, 250), Image.LANCZOS), dtype=float)
    assert np.abs(small - ref).mean() < 2
    Image.fromarray(photo).save(tmp_path / "photo.png")
    np.testing.assert_array_equal(read_scaled(tmp_path / "photo.png", 5000), photo)


def test_to_tiled_writes_the_rgb_image_as_a_tiled_pyramid(tmp_path, photo):
    rgba = np.dstack([photo, np.full(photo.shape[:2], 128, np.uint8)])
    Image.fromarray(rgba, "RGBA").save(tmp_path / "rgba.png")
    header = to_tiled(tmp_path / "rgba.png", tmp_path / "tiled.tif", tile=128)
    assert (header.tile, header.bigtiff, header.bands, header.levels[1]) == ((128, 128), True, 3, (350, 250))
    assert not (tmp_path / "tiled.tif.part").exists()
    np.testing.assert_array_equal(
        read_region(tmp_path / "tiled.tif", *REGION), read_region(tmp_path / "rgba.png", *REGION)
    )


def test_orientation_is_reported_not_applied(tmp_path, photo):
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90° clockwise to view
    Image.fromarray(photo).save(tmp_path / "turned.jpg", exif=exif, quality=95)
    header = probe(tmp_path / "turned.jpg")
    assert (header.orientation, header.width, header.height) == (6, 700, 500)
    assert read_region(tmp_path / "turned.jpg", 0, 0, 700, 500).shape == (500, 700, 3)


def test_the_format_comes_from_the_bytes_not_the_name(tmp_path, photo):
    Image.fromarray(photo).save(tmp_path / "photo.png", format="JPEG")
    assert probe(tmp_path / "photo.png").format == "jpeg"


def test_cmyk_is_converted_to_rgb(tmp_path, photo):
    Image.fromarray(photo).convert("CMYK").save(tmp_path / "cmyk.jpg", quality=95)
    assert probe(tmp_path / "cmyk.jpg").colourspace == "cmyk"
    got = read_region(tmp_path / "cmyk.jpg", *REGION)
    assert got.shape == (200, 300, 3)
    # libvips converts through an ICC profile, Pillow naively: the same picture, not the same numbers
    assert np.abs(got.astype(float) - photo[61:261, 37:337]).mean() < 40
