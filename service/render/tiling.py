"""Tiles of a render, so that memory stays bounded whatever the output size.

A render of W×H pixels with k×k supersampling is a grid of (W·k)×(H·k) samples,
averaged in k×k blocks. Tiles are rectangles of output pixels whose samples fit
in `max_samples`; each tile is sampled, run through the model and reduced on its own.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Iterator

import numpy as np


@dataclass(frozen=True)
class Tile:
    y0: int
    y1: int
    x0: int
    x1: int


def tiles(height: int, width: int, supersample: int, max_samples: int) -> Iterator[Tile]:
    """Cover the height×width pixels with tiles of at most `max_samples` samples each, row-major."""
    per_pixel = supersample * supersample
    if per_pixel > max_samples:
        raise ValueError(f"one pixel needs {per_pixel} samples, more than a tile's {max_samples}")
    # Near-square tiles: a separable render computes sines per tile row and column, (rows + cols)·F
    # of them, so a square tile needs the fewest; a short image gets wide tiles.
    pixels = max_samples // per_pixel
    cols = min(width, max(math.isqrt(pixels), -(-pixels // height)))
    rows = max(1, min(height, pixels // cols))
    for y0 in range(0, height, rows):
        for x0 in range(0, width, cols):
            yield Tile(y0, min(y0 + rows, height), x0, min(x0 + cols, width))


def grid_axes(
    tile: Tile,
    width: int,
    height: int,
    supersample: int,
    viewport: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0),
) -> tuple[np.ndarray, np.ndarray]:
    """The pixel-centre sample grid, the one definition of it: a tile's sample columns x and rows y, float64.

    Sample (a, b) of pixel (i, j) sits at ((j + (b+½)/k)/W, (i + (a+½)/k)/H) within the
    viewport; with k = 1 these are the pixel centres ((j+½)/W, (i+½)/H).
    """
    k = supersample
    vx0, vy0, vx1, vy1 = viewport
    xs = vx0 + (np.arange(tile.x0 * k, tile.x1 * k) + 0.5) / (width * k) * (vx1 - vx0)
    ys = vy0 + (np.arange(tile.y0 * k, tile.y1 * k) + 0.5) / (height * k) * (vy1 - vy0)
    return xs, ys


def sample_coords(
    tile: Tile,
    width: int,
    height: int,
    supersample: int,
    viewport: tuple[float, float, float, float] = (0.0, 0.0, 1.0, 1.0),
) -> np.ndarray:
    """[rows·k, cols·k, 2] float64 sample points (x, y) of a tile (`grid_axes`, meshed)."""
    gx, gy = np.meshgrid(*grid_axes(tile, width, height, supersample, viewport))
    return np.stack([gx, gy], axis=-1)


def block_mean(samples: np.ndarray, supersample: int) -> np.ndarray:
    """Average [rows·k, cols·k, C] samples in k×k blocks → [rows, cols, C]."""
    k = supersample
    if k == 1:
        return samples
    h, w, c = samples.shape
    return samples.reshape(h // k, k, w // k, k, c).mean(axis=(1, 3))
