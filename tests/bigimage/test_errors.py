"""bigimage refuses clearly: a decompression bomb before anything is decoded, truncated and corrupt files, files
that are not images, regions and levels outside the image, sample types it does not convert. Every message is
one line naming the file."""

from __future__ import annotations

import resource
import struct
import time
import zlib

import numpy as np
import pytest
import pyvips
from PIL import Image

from bigimage import BigImageError, TooManyPixels, check_pixels, probe, read_region, read_scaled, strips, to_tiled


def chunk(kind: bytes, data: bytes) -> bytes:
    return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", zlib.crc32(kind + data))


def bomb(path, width=100_000, height=100_000) -> None:
    """A PNG whose header declares width×height RGB pixels, in ~100 bytes: an IHDR, a sliver of IDAT, IEND."""
    ihdr = struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0)
    idat = zlib.compress(b"\x00" * 64)
    path.write_bytes(b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", ihdr) + chunk(b"IDAT", idat) + chunk(b"IEND", b""))


def one_line_naming(error: BigImageError, filename: str) -> str:
    message = str(error)
    assert "\n" not in message and message.startswith(f"{filename}: "), message
    return message


def test_a_png_bomb_is_refused_from_its_header(tmp_path):
    bomb(tmp_path / "bomb.png")
    assert (tmp_path / "bomb.png").stat().st_size < 200
    peak, t0 = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, time.perf_counter()
    with pytest.raises(TooManyPixels) as e:
        probe(tmp_path / "bomb.png", max_pixels=100_000_000)
    message = one_line_naming(e.value, "bomb.png")
    assert "100000×100000 = 10,000,000,000 pixels" in message and "limit of 100,000,000" in message
    assert (e.value.pixels, e.value.limit) == (10**10, 10**8)
    header = probe(tmp_path / "bomb.png")  # the header alone is fine to read
    with pytest.raises(TooManyPixels):
        check_pixels(header, 10**9)
    for read in (
        lambda p: read_region(p, 0, 0, 16, 16, max_pixels=10**9),
        lambda p: read_scaled(p, 256, max_pixels=10**9),
        lambda p: next(strips(p, 16, max_pixels=10**9)),
        lambda p: to_tiled(p, tmp_path / "out.tif", max_pixels=10**9),
    ):
        with pytest.raises(TooManyPixels):
            read(tmp_path / "bomb.png")
    # 30 GB of RGB were never allocated: not a MiB more than the process had already used at its peak
    assert resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - peak < 50 * 1024
    assert time.perf_counter() - t0 < 5
    check_pixels(header, 10**10)  # at the limit: allowed


def test_a_bomb_that_is_decoded_anyway_fails_as_truncated(tmp_path):
    bomb(tmp_path / "bomb.png", 4000, 4000)  # within the limit, but its IDAT holds one row
    with pytest.raises(BigImageError) as e:
        read_region(tmp_path / "bomb.png", 0, 3000, 16, 16)
    assert "damaged or truncated" in one_line_naming(e.value, "bomb.png")


@pytest.mark.parametrize("writer", ["pillow", "libvips"])
def test_a_truncated_tiff_is_refused(tmp_path, photo, writer):
    path = tmp_path / "cut.tif"
    if writer == "pillow":  # the IFD first, then the strips: the header reads, the pixels do not
        Image.fromarray(photo).save(path)
    else:  # libvips writes its IFD after the tiles: cut, the file has no directory left
        pyvips.Image.new_from_array(photo).tiffsave(str(path), tile=True, tile_width=64, tile_height=64)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(BigImageError) as e:
        if writer == "pillow":
            assert probe(path).height == 500
        read_region(path, 0, 400, 64, 64)
    message = one_line_naming(e.value, "cut.tif")
    if writer == "pillow":
        assert "damaged or truncated, decoding failed (" in message
    else:
        assert "not a readable TIFF (" in message and "Failed to read directory" in message


@pytest.mark.parametrize("fmt", ["JPEG", "PNG"])
def test_truncated_jpeg_and_png_are_refused_not_greyed(tmp_path, photo, fmt):
    path = tmp_path / f"cut.{fmt.lower()}"
    Image.fromarray(photo).save(path, fmt)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    probe(path)  # the header is whole
    read_region(path, 0, 0, 64, 16)  # so are the first rows
    with pytest.raises(BigImageError) as e:
        read_region(path, 0, 436, 64, 64)
    assert "damaged or truncated" in one_line_naming(e.value, path.name)


def test_corrupt_files_are_refused(tmp_path, photo):
    Image.fromarray(photo).save(tmp_path / "photo.png")
    data = bytearray((tmp_path / "photo.png").read_bytes())
    data[16:20] = b"\xff\xff\xff\xff"  # the IHDR's width: its CRC no longer matches
    (tmp_path / "crc.png").write_bytes(bytes(data))
    with pytest.raises(BigImageError) as e:
        read_region(tmp_path / "crc.png", 0, 0, 8, 8)
    one_line_naming(e.value, "crc.png")
    tiff = pyvips.Image.new_from_array(photo)
    tiff.tiffsave(str(tmp_path / "garbled.tif"), tile=True, tile_width=64, tile_height=64, compression="deflate")
    data = bytearray((tmp_path / "garbled.tif").read_bytes())
    data[5000:9000] = bytes(range(200)) * 20  # garbage in the first tiles' deflate streams
    (tmp_path / "garbled.tif").write_bytes(bytes(data))
    with pytest.raises(BigImageError) as e:
        read_region(tmp_path / "garbled.tif", 0, 0, 128, 128)
    assert "decoding failed (tiff2vips: Decoding error at scanline" in one_line_naming(e.value, "garbled.tif")
    Image.fromarray(photo).save(tmp_path / "photo.jpg")
    data = bytearray((tmp_path / "photo.jpg").read_bytes())
    at = data.find(b"\xff\xc4") + 4  # inside the first Huffman table
    data[at : at + 24] = b"\xff" * 24
    (tmp_path / "tables.jpg").write_bytes(bytes(data))
    with pytest.raises(BigImageError) as e:
        probe(tmp_path / "tables.jpg")
    assert "not a readable JPEG (VipsJpeg: Bogus Huffman table definition)" in one_line_naming(e.value, "tables.jpg")


def test_what_is_not_a_jpeg_png_or_tiff_is_refused_before_libvips_sees_it(tmp_path):
    (tmp_path / "drawing.svg").write_text('<svg xmlns="http://www.w3.org/2000/svg" width="9" height="9"/>')
    (tmp_path / "empty.png").write_bytes(b"")
    Image.new("RGB", (8, 8)).save(tmp_path / "photo.webp")
    cases = {
        "drawing.svg": "not a JPEG, PNG or TIFF (the file starts with 3c 73 76 67",
        "empty.png": "the file is empty",
        "photo.webp": "not a JPEG, PNG or TIFF",
        "missing.tif": "cannot be read (No such file or directory)",
    }
    for name, words in cases.items():
        with pytest.raises(BigImageError) as e:
            probe(tmp_path / name)
        assert words in one_line_naming(e.value, name)


def test_regions_and_levels_outside_the_image_are_refused(tmp_path, photo):
    Image.fromarray(photo).save(tmp_path / "photo.png")
    path = tmp_path / "photo.png"
    for region in ((-1, 0, 10, 10), (0, -5, 10, 10), (600, 0, 101, 10), (0, 400, 10, 101), (0, 0, 0, 10)):
        with pytest.raises(BigImageError) as e:
            read_region(path, *region)
        assert "is not inside the image (700×500)" in one_line_naming(e.value, "photo.png")
    with pytest.raises(BigImageError, match="a PNG has no pyramid; level 1 was asked for"):
        read_region(path, 0, 0, 8, 8, level=1)
    pyvips.Image.new_from_array(photo).tiffsave(str(tmp_path / "p.tif"), tile=True, pyramid=True, tile_width=64)
    levels = len(probe(tmp_path / "p.tif").levels)
    with pytest.raises(BigImageError, match=f"the file has levels 0 … {levels - 1}"):
        read_region(tmp_path / "p.tif", 0, 0, 8, 8, level=levels)
    with pytest.raises(BigImageError, match=r"is not inside the image \(350×250, level 1\)"):
        read_region(tmp_path / "p.tif", 300, 0, 64, 64, level=1)
    with pytest.raises(BigImageError, match="rows must be at least 1"):
        next(strips(path, 0))
    with pytest.raises(BigImageError, match="max_side must be at least 1"):
        read_scaled(path, 0)


def test_float_samples_are_reported_and_refused(tmp_path):
    pyvips.Image.new_from_array(np.zeros((16, 16), np.float32)).tiffsave(str(tmp_path / "float.tif"))
    assert probe(tmp_path / "float.tif").dtype == "float32"
    with pytest.raises(BigImageError, match="float samples are not supported; 8- and 16-bit integer images only"):
        read_region(tmp_path / "float.tif", 0, 0, 8, 8)
