"""A restricted image's substitute (IIIF Auth 2.0; docs/access.md), bounded by information, not by request shape.

The substitute is one fixed raster per model version: the whole image rendered once at `access_substitute` pixels on
its long side, each pixel the mean of SUPERSAMPLE² samples of the network (a low-pass image). Every IIIF image
request of a caller who may see only the substitute is answered from that raster (region, size, rotation and
mirroring as one affine map, bilinear between its pixels), never from the network: however the region is shifted,
scaled or interleaved, what comes back is a function of those W×H pixels, so nothing finer can be rebuilt from
many small answers (docs/security.md, "The substitute").
"""

from __future__ import annotations

import hashlib
import io
import math
import threading
from collections import OrderedDict

import numpy as np
from fastapi import Request
from fastapi.responses import Response
from PIL import Image

from ...errors import AccessDenied, TooLarge
from ...geometry.sampling import Background
from ...render.cache import etag_matches
from ...render.imaging import MEDIA_TYPES, RenderSpec, encode
from ...render.service import RenderJob
from ...render.tiling import Tile, grid_axes
from . import post
from .plan import JPEG_QUALITY, Plan

SUPERSAMPLE = 4  # samples per pixel on each axis: the raster is the mean of 16 samples a pixel
BUDGET = 64 << 20  # bytes of rasters kept in memory per process (least recently used go)
_rasters: OrderedDict[tuple, np.ndarray] = OrderedDict()
_lock = threading.Lock()


def dims(width: int, height: int, long_side: int) -> tuple[int, int]:
    """The raster's size: the image's aspect, `long_side` pixels on its longer side (never more than the image)."""
    scale = min(1.0, long_side / max(width, height))
    return max(1, round(width * scale)), max(1, round(height * scale))


def check_scale(p: Plan, width: int, height: int, refused) -> None:
    """401/403 for a request finer than the substitute on either axis (a pixel of rounding allowed), as info.json's
    maxWidth and maxHeight say."""
    limit = refused.substitute / max(width, height)
    sw, sh = p.size
    if sw > p.box.w * limit * (1 + 1e-9) + 1 or sh > p.box.h * limit * (1 + 1e-9) + 1:
        raise AccessDenied(
            refused.status,
            f"{refused.reason}; without it, only the substitute is public: the whole image at most "
            f"{refused.substitute} pixels on its long side",
        )


def max_side(box, width: int, height: int, long_side: int) -> tuple[int, int]:
    """(maxWidth, maxHeight) of `max` for a region of the image, for a caller who may see only the substitute: the
    region at the substitute's scale, as info.json's maxWidth and maxHeight say for the whole image."""
    limit = min(1.0, long_side / max(width, height))
    rw, rh = box.pixels
    return max(1, math.floor(rw * limit)), max(1, math.floor(rh * limit))


async def raster(request: Request, model, width: int, height: int, long_side: int) -> np.ndarray:
    """[h, w, 3] uint8: the substitute of this model version, rendered once and kept (BUDGET)."""
    key = (model.name, model.version, model.record.onnx_sha256 if model.record else "", long_side)
    with _lock:
        if key in _rasters:
            _rasters.move_to_end(key)
            return _rasters[key]
    settings = request.app.state.settings
    w, h = dims(width, height, long_side)
    room = settings.max_render_pixels // (w * h)
    if room < 1:
        raise TooLarge(
            f"the substitute of model '{model.name}' ({w}×{h}) is more than INR_MAX_RENDER_PIXELS "
            f"({settings.max_render_pixels}); lower its access_substitute"
        )
    ss = max(1, min(SUPERSAMPLE, settings.max_supersample, math.isqrt(room)))
    spec = RenderSpec(
        width=w,
        height=h,
        matrix=np.eye(3)[:2],
        viewport=(0.0, 0.0, 1.0, 1.0),
        supersample=ss,
        background=Background.parse("extrapolate"),
    )
    rendered = await request.app.state.renderer.render(model, RenderJob(spec, "png"), cache_control="private")
    pixels = np.asarray(Image.open(io.BytesIO(rendered.body)).convert("RGB"))
    with _lock:
        _rasters[key] = pixels
        while sum(a.nbytes for a in _rasters.values()) > BUDGET and len(_rasters) > 1:
            _rasters.popitem(last=False)
    return pixels


def sample(pixels: np.ndarray, p: Plan) -> np.ndarray:
    """The plan's output pixels from the raster: each output pixel centre through the plan's matrix to image
    coordinates, bilinear between the raster's pixel centres (clamped at its edges); outside the image, the plan's
    background (transparent, or white for jpg) as the network's render would show it."""
    ow, oh = p.out
    rh, rw = pixels.shape[:2]
    gx, gy = np.meshgrid(*grid_axes(Tile(0, oh, 0, ow), ow, oh, 1, p.render.viewport))
    m = p.matrix
    mx = m[0, 0] * gx + m[0, 1] * gy + m[0, 2]
    my = m[1, 0] * gx + m[1, 1] * gy + m[1, 2]
    fx = np.clip(mx * rw - 0.5, 0, rw - 1)
    fy = np.clip(my * rh - 0.5, 0, rh - 1)
    x0, y0 = np.floor(fx).astype(int), np.floor(fy).astype(int)
    x1, y1 = np.minimum(x0 + 1, rw - 1), np.minimum(y0 + 1, rh - 1)
    ax, ay = (fx - x0)[..., None], (fy - y0)[..., None]
    src = pixels.astype(np.float64)
    top = src[y0, x0] * (1 - ax) + src[y0, x1] * ax
    bottom = src[y1, x0] * (1 - ax) + src[y1, x1] * ax
    rgb = top * (1 - ay) + bottom * ay
    inside = ((mx >= 0) & (mx <= 1) & (my >= 0) & (my <= 1))[..., None]
    if p.render.background == "transparent":
        return np.rint(np.concatenate([rgb, 255.0 * inside], -1)).astype(np.uint8)
    if p.render.background == "white":
        rgb = np.where(inside, rgb, 255.0)
    return np.rint(rgb).astype(np.uint8)


async def answer(request: Request, model, p: Plan, width: int, height: int, refused, caching: str, link: str):
    """The IIIF image of plan `p` made from the substitute: 200 (or 304 for its ETag), never the network's pixels."""
    check_scale(p, width, height, refused)
    sha = model.record.onnx_sha256 if model.record else ""
    canonical = f"{p.canonical(width, height)}|{p.render.viewport}|{p.matrix.tolist()}|{p.quality}|{p.format}"
    digest = hashlib.sha256(f"substitute|{sha}|{refused.substitute}|{canonical}".encode()).hexdigest()
    headers = {"ETag": f'"{digest[:32]}"', "Cache-Control": caching, "Link": link}
    if etag_matches(request.headers.get("if-none-match"), headers["ETag"]):
        return Response(status_code=304, headers=headers)
    pixels = sample(await raster(request, model, width, height, refused.substitute), p)
    finish = post.finisher(p, width, height)
    body = encode(finish(pixels) if finish else pixels, p.render.format, JPEG_QUALITY)
    return Response(body, media_type=MEDIA_TYPES[p.render.format], headers=headers)
