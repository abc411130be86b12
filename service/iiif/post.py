"""After the render: quality (gray, bitonal) and the corners of a region rotated by a non-right angle.

The render route computes every pixel; this only recolours them. A request that needs it is rendered
losslessly (png) and encoded in the requested format here.
"""
from __future__ import annotations

import io

import numpy as np
from PIL import Image

from .plan import Plan, region_mask

BITONAL_THRESHOLD = 128
PIL_FORMATS = {"jpg": "JPEG", "png": "PNG", "webp": "WEBP"}


def needs_post(p: Plan) -> bool:
    return p.quality in ("gray", "bitonal") or p.mask_region


def finish(png: bytes, p: Plan, width: int, height: int, jpeg_quality: int) -> bytes:
    with Image.open(io.BytesIO(png)) as im:
        img = im.convert("RGBA" if im.mode in ("RGBA", "LA") else "RGB")
    if p.mask_region:
        inside = region_mask(p, width, height)
        arr = np.asarray(img).astype(np.float64)
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
    buf = io.BytesIO()
    fmt = PIL_FORMATS[p.format]
    if fmt == "JPEG":
        img.save(buf, fmt, quality=jpeg_quality)
    elif fmt == "WEBP":
        img.save(buf, fmt, quality=jpeg_quality)
    else:
        img.save(buf, fmt, compress_level=3)
    return buf.getvalue()
