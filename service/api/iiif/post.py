"""After the samples, before the one encode: quality (gray, bitonal) and the corners of a region
rotated by a non-right angle, as operations on the rendered pixel array (service/render/service.py)."""

from __future__ import annotations

from functools import partial

import numpy as np
from PIL import Image

from .plan import Plan, region_mask

BITONAL_THRESHOLD = 128


def needs_post(p: Plan) -> bool:
    return p.quality in ("gray", "bitonal") or p.mask_region


def key(p: Plan) -> str:
    """What `finish` does to the pixels, for the render's cache key and ETag ('' when nothing)."""
    return f"iiif:{p.quality}:{'mask' if p.mask_region else ''}:{p.format}" if needs_post(p) else ""


def finisher(p: Plan, width: int, height: int):
    return partial(finish, p=p, width=width, height=height) if needs_post(p) else None


def finish(pixels: np.ndarray, p: Plan, width: int, height: int) -> Image.Image:
    """[H, W, 3|4] uint8 → the image to encode, in the mode the IIIF quality and format call for."""
    img = Image.fromarray(pixels, "RGBA" if pixels.shape[-1] == 4 else "RGB")
    if p.mask_region:
        inside = region_mask(p, width, height)
        arr = pixels.astype(np.float64)
        if arr.shape[-1] == 4:
            arr[..., 3] *= inside
        else:  # jpg has no alpha: the corners are white, as the render's background is
            arr = arr * inside[..., None] + 255.0 * (1.0 - inside[..., None])
        img = Image.fromarray(np.rint(arr).astype(np.uint8), img.mode)
    alpha = img.getchannel("A") if img.mode == "RGBA" else None
    if p.quality in ("gray", "bitonal"):
        img = img.convert("L")
        if p.quality == "bitonal":
            img = img.point(lambda v: 255 if v >= BITONAL_THRESHOLD else 0)
        if alpha is not None:
            img = Image.merge("LA", (img, alpha))
            if p.format == "webp":
                img = img.convert("RGBA")
        elif p.quality == "bitonal" and p.format == "png":
            img = img.convert("1")
    return img
