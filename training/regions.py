"""A large image's pixels, a region or a reduced whole at a time, as the [h, w, 3] float32 in [0,1] a fit takes.

Only the pixels asked for become floating point: a block fit holds its crop, not the image."""

from __future__ import annotations

import numpy as np
from PIL import Image

from .errors import UsageError
from .images import fit_dims


def _rgb(im: Image.Image) -> Image.Image:
    if im.mode in ("RGBA", "LA") or (im.mode == "P" and "transparency" in im.info):
        im = im.convert("RGBA")
        white = Image.new("RGBA", im.size, (255, 255, 255, 255))
        return Image.alpha_composite(white, im).convert("RGB")
    return im.convert("RGB")


def _open(path: str) -> Image.Image:
    try:
        return Image.open(path)
    except (FileNotFoundError, IsADirectoryError):
        raise UsageError(f"cannot read image '{path}': not a file") from None
    except (OSError, Image.DecompressionBombError) as e:
        raise UsageError(f"cannot read image '{path}': {e.__class__.__name__}: {e}") from None


def image_size(path: str) -> tuple[int, int]:
    """(W, H) from the file's header."""
    with _open(path) as im:
        return im.size


def read_region(path: str, x: int, y: int, w: int, h: int) -> np.ndarray:
    """Pixels [y, y+h) × [x, x+w) of the image at `path`."""
    with _open(path) as im:
        if not (0 <= x and 0 <= y and w > 0 and h > 0 and x + w <= im.width and y + h <= im.height):
            raise UsageError(f"region {w}×{h} at ({x}, {y}) is outside the {im.width}×{im.height} image '{path}'")
        crop = _rgb(im.crop((x, y, x + w, y + h)))
        return np.asarray(crop, dtype=np.float32) / 255.0


def read_scaled(path: str, max_side: int) -> np.ndarray:
    """The whole image reduced (box filter, in its aspect) to at most `max_side` pixels on its longer side."""
    with _open(path) as im:
        dims = fit_dims(im.width, im.height, max_side, False, max_side * max_side)
        if im.format == "JPEG":
            im.draft("RGB", dims)  # decode at 1/2, 1/4 or 1/8 where that still covers dims
        small = _rgb(im).resize(dims, Image.BOX) if im.size != dims else _rgb(im)
        return np.asarray(small, dtype=np.float32) / 255.0


def _png(im: Image.Image) -> bytes:
    import io

    buf = io.BytesIO()
    im.save(buf, "PNG", compress_level=1)
    return buf.getvalue()


def region_png(path: str, x: int, y: int, w: int, h: int) -> bytes:
    """Pixels [y, y+h) × [x, x+w) as an 8-bit RGB PNG (a block's pixels for the worker that fits it)."""
    with _open(path) as im:
        return _png(_rgb(im.crop((x, y, x + w, y + h))))


def scaled_png(path: str, max_side: int) -> bytes:
    """`read_scaled`'s pixels as an 8-bit RGB PNG."""
    return _png(Image.fromarray(np.rint(read_scaled(path, max_side) * 255.0).astype(np.uint8)))
