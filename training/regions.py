"""A large image's pixels, a region or a reduced whole at a time (bigimage, through libvips), as the [h, w, 3]
float32 in [0,1] a fit takes, or as the 8-bit PNG a piece of a fit job carries.

Only the pixels asked for become floating point: a block fit holds its crop, not the image. A JPEG or PNG is
decoded from the top for every region read from it, so `tiled` converts it once to a tiled pyramidal TIFF that a
region of costs only its tiles (docs/benchmarks.md, bigimage)."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

import bigimage

from .errors import UsageError

MAX_PIXELS = 4_000_000_000  # what a blocked fit reads at most: four gigapixels


def _read(call, path, *args, **kwargs):
    try:
        return call(str(path), *args, max_pixels=MAX_PIXELS, **kwargs)
    except bigimage.BigImageError as e:
        raise UsageError(str(e)) from None


def image_size(path: str | Path) -> tuple[int, int]:
    """(W, H) from the file's header."""
    header = _read(bigimage.probe, path)
    return header.width, header.height


SMALL = 16_000_000  # pixels under which a block is cut straight from the file: decoding it from the top is cheap


def tiled(path: str | Path, into: Path) -> Path:
    """`path` itself when it is a TIFF or small, else a tiled pyramidal TIFF of it written to `into` (one decode;
    tiles of 512, or of the short side rounded down to 16 for a thin image: libtiff refuses tiles over the image)."""
    header = _read(bigimage.probe, path)
    if header.format == "tiff" or header.pixels < SMALL:
        return Path(path)
    tile = max(16, min(512, min(header.width, header.height) // 16 * 16))
    _read(bigimage.to_tiled, path, str(into), tile=tile)
    return into


def read_region(path: str | Path, x: int, y: int, w: int, h: int) -> np.ndarray:
    """Pixels [y, y+h) × [x, x+w) of the image at `path`."""
    return _read(bigimage.read_region, path, x, y, w, h).astype(np.float32) / 255.0


def read_scaled(path: str | Path, max_side: int) -> np.ndarray:
    """The whole image reduced in its aspect to at most `max_side` pixels on its longer side (never enlarged)."""
    return _read(bigimage.read_scaled, path, max_side).astype(np.float32) / 255.0


def _png(pixels: np.ndarray) -> bytes:
    buf = io.BytesIO()
    Image.fromarray(pixels).save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def region_png(path: str | Path, x: int, y: int, w: int, h: int) -> bytes:
    """Pixels [y, y+h) × [x, x+w) as an 8-bit RGB PNG (a block's pixels for the worker that fits it)."""
    return _png(_read(bigimage.read_region, path, x, y, w, h))


def scaled_png(path: str | Path, max_side: int) -> bytes:
    """`read_scaled`'s pixels as an 8-bit RGB PNG."""
    return _png(_read(bigimage.read_scaled, path, max_side))
