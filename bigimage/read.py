"""Pixels of a giant image as 8-bit RGB numpy arrays [h, w, 3], decoding as little as the format allows.

* TIFF (random access): only the tiles or strips a region covers are decoded; a pyramid's levels are read
  as they are stored.
* JPEG and PNG (sequential access): the decoder runs from the top of the image down to the region's last row
  and keeps a few rows at a time; nothing below the region is decoded, nothing above it kept. A progressive
  JPEG or an interlaced PNG cannot be decoded a part at a time: libvips decodes those whole.
* read_scaled shrinks while it decodes: a JPEG's DCT scaling (1/2, 1/4, 1/8), a TIFF's pyramid level, then a
  box filter and Lanczos 3 over the rows as they stream by.

Many regions of one JPEG or PNG each decode it again from the top: `to_tiled` writes it once as a tiled,
pyramidal BigTIFF whose regions then cost only their own tiles.
"""

from __future__ import annotations

import os
from collections.abc import Iterator

import numpy as np
import pyvips

from .errors import BigImageError, one_line
from .header import Header, check_size, levels, load, name, probe, sniff

ACCESS = {"jpeg": "sequential", "png": "sequential", "tiff": "random"}
# 16-bit to 8-bit as service/fits/upload.py scales: round(v × 255 / 65535), a table and no floating point
LUT16 = np.rint(np.arange(65536) / 257.0).astype(np.uint8).reshape(1, 65536)


def read_region(
    path: str | os.PathLike, x: int, y: int, w: int, h: int, *, level: int = 0, max_pixels: int | None = None
) -> np.ndarray:
    """The w×h pixels at (x, y), as uint8 [h, w, 3]. `level` (a pyramidal TIFF): 0 is the full image, and x, y,
    w, h are in that level's pixels. With `max_pixels`, TooManyPixels for a larger image (the whole image's
    size, from its header), before anything is decoded."""
    path = os.fspath(path)
    image = _open(path, level, max_pixels)
    if min(w, h) < 1 or min(x, y) < 0 or x + w > image.width or y + h > image.height:
        raise BigImageError(
            f"{name(path)}: the region {w}×{h} at ({x}, {y}) is not inside the image "
            f"({image.width}×{image.height}{f', level {level}' if level else ''})"
        )
    return _pixels(rgb8(image.crop(x, y, w, h), path), path)


def read_scaled(path: str | os.PathLike, max_side: int, *, max_pixels: int | None = None) -> np.ndarray:
    """The whole image, shrunk so that its longer side is `max_side` (never enlarged), as uint8 [h, w, 3]: a
    box filter then Lanczos 3 (libvips' resize), from the smallest pyramid level or JPEG DCT scale that is
    still at least `max_side`, with the rows streamed through."""
    path = os.fspath(path)
    if max_side < 1:
        raise BigImageError(f"{name(path)}: max_side must be at least 1, got {max_side}")
    fmt, _ = sniff(path)
    full = load(path, fmt, access=ACCESS[fmt])
    if max_pixels is not None:
        check_size(path, full.width, full.height, max_pixels)
    image = full
    if fmt == "jpeg":
        shrink = max((s for s in (1, 2, 4, 8) if max(full.width, full.height) / s >= max_side), default=1)
        image = load(path, fmt, access="sequential", shrink=shrink) if shrink > 1 else full
    elif fmt == "tiff":
        sizes = probe(path).levels
        level = max(i for i, (w, h) in enumerate(sizes) if max(w, h) >= max_side or i == 0)
        image = _level(path, level) if level else full
    scale = max_side / max(image.width, image.height)
    image = rgb8(image, path)
    if scale < 1:
        # the size the full image would have at max_side, whatever level or DCT scale it came from
        target = max(1, round(full.width * max_side / max(full.width, full.height)))
        target_h = max(1, round(full.height * max_side / max(full.width, full.height)))
        image = image.resize(target / image.width, vscale=target_h / image.height, kernel="lanczos3")
    return _pixels(image, path)


def strips(
    path: str | os.PathLike, rows: int, *, level: int = 0, max_pixels: int | None = None
) -> Iterator[tuple[int, np.ndarray]]:
    """(y, uint8 [rows, width, 3]) from the top of the image to its bottom, the last strip shorter: the whole
    image once, in the memory of a strip or two."""
    path = os.fspath(path)
    if rows < 1:
        raise BigImageError(f"{name(path)}: rows must be at least 1, got {rows}")
    image = _open(path, level, max_pixels)
    image = rgb8(image, path)
    for y in range(0, image.height, rows):
        yield y, _pixels(image.crop(0, y, image.width, min(rows, image.height - y)), path)


def to_tiled(
    path: str | os.PathLike,
    dst: str | os.PathLike,
    *,
    tile: int = 512,
    pyramid: bool = True,
    compression: str = "deflate",
    level: int = 1,
    max_pixels: int | None = None,
) -> Header:
    """The image, as the 8-bit RGB the readers return, written to `dst` as a tiled BigTIFF (a pyramid of
    halvings unless `pyramid` is False), streamed in one pass; then every region of it costs only its own tiles.
    Lossless by default: deflate at `level` 1, the fastest (100 MP: 6 s and 291 MiB, against 18 s and 192 MiB at
    zlib's default 6; docs/benchmarks.md, bigimage); compression="jpeg" is lossy, "none" the fastest of all.
    Written beside `dst` and renamed, so that `dst` is whole or absent. Returns dst's header."""
    path, dst = os.fspath(path), os.fspath(dst)
    image = _open(path, 0, max_pixels)
    part = f"{dst}.part"
    try:
        rgb8(image, path).tiffsave(
            part,
            tile=True,
            tile_width=tile,
            tile_height=tile,
            pyramid=pyramid,
            bigtiff=True,
            compression=compression,
            predictor="horizontal",
            **({"level": level} if compression == "deflate" else {}),
        )
        os.replace(part, dst)
    except pyvips.Error as e:
        raise BigImageError(f"{name(path)}: could not be written as {name(dst)} ({one_line(str(e))})") from None
    finally:
        if os.path.exists(part):
            os.remove(part)
    return probe(dst)


def rgb8(image: pyvips.Image, path: str) -> pyvips.Image:
    """A libvips image (nothing decoded yet) as 8-bit sRGB, three bands: CMYK converted, alpha composited over
    white at the stored depth, 16-bit scaled by 255/65535, grey repeated. Lazy, like every libvips operation:
    each tile is converted when it is decoded."""
    if image.format not in ("uchar", "ushort"):
        raise BigImageError(
            f"{name(path)}: {image.format} samples are not supported; 8- and 16-bit integer images only"
        )
    if image.interpretation == "cmyk":
        image = image.colourspace("srgb")
    if image.hasalpha():
        peak = 65535 if image.format == "ushort" else 255
        image = image.flatten(background=[peak] * (image.bands - 1), max_alpha=peak)
    if image.format == "ushort":
        image = image.maplut(pyvips.Image.new_from_array(LUT16))
    if image.bands < 3:
        image = image[0].bandjoin([image[0], image[0]])
    elif image.bands > 3:
        image = image.extract_band(0, n=3)
    return image.cast("uchar").copy(interpretation="srgb")


def _open(path: str, level: int, max_pixels: int | None) -> pyvips.Image:
    """The image (its header read, nothing decoded) at `level`, after the pixel limit."""
    fmt, _ = sniff(path)
    image = load(path, fmt, access=ACCESS[fmt])
    if max_pixels is not None:
        check_size(path, image.width, image.height, max_pixels)
    if level:
        if fmt != "tiff":
            raise BigImageError(f"{name(path)}: a {fmt.upper()} has no pyramid; level {level} was asked for")
        image = _level(path, level)
    return image


def _level(path: str, level: int) -> pyvips.Image:
    first = load(path, "tiff")
    fields = set(first.get_fields())
    subifds = first.get("n-subifds") if "n-subifds" in fields else 0
    found = levels(path, first, subifds, first.get("n-pages") if "n-pages" in fields else 1)
    if not 0 <= level < len(found):
        raise BigImageError(
            f"{name(path)}: level {level} was asked for; the file has levels 0 … {len(found) - 1}"
            if len(found) > 1
            else f"{name(path)}: level {level} was asked for; the file has no pyramid, only level 0"
        )
    return load(path, "tiff", subifd=level - 1) if subifds else load(path, "tiff", page=level)


def _pixels(image: pyvips.Image, path: str) -> np.ndarray:
    """Decode: the only place pixels are computed; a damaged file fails here."""
    try:
        return np.asarray(image.numpy(), dtype=np.uint8).reshape(image.height, image.width, 3)
    except pyvips.Error as e:
        raise BigImageError(f"{name(path)}: damaged or truncated, decoding failed ({one_line(str(e))})") from None
