"""Tiled renders of an image model: the samples of each tile, the background outside the unit square
(service/geometry/sampling.py) blended along the edge, supersamples averaged, and the encoded image."""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Callable

import numpy as np
from PIL import Image

from ..geometry.sampling import Background, inside_unit_square, model_coords
from ..geometry.transform import apply
from .tiling import Tile, block_mean, grid_axes, sample_coords, tiles

Predict = Callable[[np.ndarray], np.ndarray]  # [N, 2] float32 → [N, 3]
MEDIA_TYPES = {"png": "image/png", "jpeg": "image/jpeg", "webp": "image/webp"}
# zlib level of rendered PNGs. On a photo-like 512² tile level 1 takes about 0.6× the time of level 3 for
# about 3 % more bytes (docs/benchmarks.md, grid_render): at a 70 ms tile budget the encoder is a large share.
PNG_COMPRESS_LEVEL = 1


@dataclass(frozen=True)
class RenderSpec:
    width: int
    height: int
    matrix: np.ndarray  # 2×3, output → model coordinates
    viewport: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0)
    supersample: int = 1
    background: Background = Background("extrapolate")

    @property
    def channels(self) -> int:
        return 4 if self.background.mode == "transparent" else 3


def check_render_coords(spec: "RenderSpec") -> None:
    """An affine map takes its extremes at the viewport's corners: check those before rendering."""
    x0, y0, x1, y1 = spec.viewport
    model_coords(spec.matrix, np.array([[x0, y0], [x1, y0], [x0, y1], [x1, y1]], dtype=np.float64))


Sampler = Callable[[Tile], np.ndarray]  # a tile → its samples' rgb, [rows·k·cols·k, 3]


def tile_points(spec: RenderSpec, t: Tile) -> np.ndarray:
    """The model's input for a tile: `apply(spec.matrix, sample_coords(…))` as float32 [N, 2], computed per row
    and column and broadcast (the same float64 sums, without [rows, cols, 2] float64 intermediates)."""
    xs, ys = grid_axes(t, spec.width, spec.height, spec.supersample, spec.viewport)
    (a, b, c), (d, e, f) = spec.matrix
    points = np.empty((len(ys), len(xs), 2), np.float32)
    points[..., 0] = a * xs[None, :] + b * ys[:, None] + c
    points[..., 1] = d * xs[None, :] + e * ys[:, None] + f
    return points.reshape(-1, 2)


def plain_sampler(predict: Predict, spec: RenderSpec) -> Sampler:
    """Samples of a tile through the whole coords → rgb model."""
    return lambda t: predict(tile_points(spec, t))


def render_tile(spec: RenderSpec, t: Tile, rgb: np.ndarray, out: np.ndarray) -> None:
    """Clip a tile's sampled rgb, paint the background, average the supersamples, write into `out`."""
    k = spec.supersample
    rgb = np.fmax(rgb, 0.0)  # NaN → 0 (fmax ignores it), −inf → 0
    np.fmin(rgb, 1.0, out=rgb)  # +inf → 1
    rgb = rgb.reshape((t.y1 - t.y0) * k, (t.x1 - t.x0) * k, 3)
    src = None
    if spec.background.mode != "extrapolate":
        src = apply(spec.matrix, sample_coords(t, spec.width, spec.height, k, spec.viewport))
    pixels = _fill(rgb, src, spec.background, k)  # rgb itself, or a new array
    np.multiply(pixels, 255.0, out=pixels)
    out[t.y0 : t.y1, t.x0 : t.x1] = np.rint(pixels, out=pixels)


def new_image(spec: RenderSpec) -> np.ndarray:
    return np.empty((spec.height, spec.width, spec.channels), np.uint8)


def render(predict: Predict, spec: RenderSpec, tile_samples: int, sampler: Sampler | None = None) -> np.ndarray:
    """[H, W, 3 or 4] uint8, computed tile by tile in this thread: at most `tile_samples` model
    samples in memory. (The service renders through service/render/scheduler.py, same tiles.)"""
    sample = sampler or plain_sampler(predict, spec)
    out = new_image(spec)
    for t in tiles(spec.height, spec.width, spec.supersample, tile_samples):
        render_tile(spec, t, sample(t), out)
    return out


def _fill(rgb: np.ndarray, src: np.ndarray | None, background: Background, k: int) -> np.ndarray:
    """Apply the background to samples outside the unit square, then average k×k blocks."""
    if background.mode == "extrapolate":
        return block_mean(rgb, k)
    inside = inside_unit_square(src)[..., None].astype(np.float64)
    if background.mode == "colour":
        return block_mean(rgb * inside + np.asarray(background.rgb) * (1.0 - inside), k)
    alpha = block_mean(inside, k)
    colour = block_mean(rgb * inside, k) / np.maximum(alpha, 1e-12)  # un-premultiplied: no dark fringe
    return np.concatenate([np.clip(colour, 0.0, 1.0), alpha], axis=-1)


def encode(pixels: np.ndarray | Image.Image, fmt: str, quality: int = 90) -> bytes:
    """PNG, JPEG or WebP bytes of an [H, W, 3|4] uint8 array (or of an image in any mode the format takes)."""
    img = (
        pixels
        if isinstance(pixels, Image.Image)
        else Image.fromarray(pixels, "RGBA" if pixels.shape[-1] == 4 else "RGB")
    )
    buf = io.BytesIO()
    if fmt == "png":
        img.save(buf, "PNG", compress_level=PNG_COMPRESS_LEVEL)
    elif fmt == "jpeg":
        img.save(buf, "JPEG", quality=quality)
    elif fmt == "webp":
        img.save(buf, "WEBP", quality=quality, lossless=quality >= 100)
    else:
        raise ValueError(f"unknown format '{fmt}'; valid: {', '.join(MEDIA_TYPES)}")
    return buf.getvalue()
