"""Separable renders: the first stage's sines per tile row and column, the body graph per pixel.

An image model whose metadata.json has a `separable` entry ships a body graph (features → rgb) and its first
stage, loaded with the version (service/engine/separable.py): feature k is sin(P[k]·x + φ[k]). A render samples x =
M·(x_n, y_m, 1) on a grid of columns x_n
and rows y_m (viewport, supersampling and the transform all keep it affine), so

    P[k]·x + φ[k] = x_n·a_k + (y_m·b_k + g_k),   a = P·M₀, b = P·M₁, g = P·M₂ + φ
    sin(u + v) = sin u · cos v + cos u · sin v

The tables sin/cos(u) per column and sin/cos(v) per row are computed in float64 — correct to an ulp
at any argument, so no float32 range-reduction error grows with |x|·|P| — and only the combine,
two multiplies and an add per feature and sample, runs in float32 (error ≤ ~2.5e-7).
"""

from __future__ import annotations

from typing import Callable

import numpy as np

from ..engine.separable import FirstStage, SeparableBody
from .tiling import Tile, grid_axes


def _pairs(stage: FirstStage) -> bool:
    """Features in (cos q, sin q) pairs: equal P, phases π/2 apart (the exporter's Gaussian,
    positional and basic features). float32's π/2 is 4.4e-8 off; that much is tolerated."""
    P, ph = stage.P, stage.phase
    return (
        P.shape[0] % 2 == 0
        and np.array_equal(P[0::2], P[1::2])
        and bool(np.all(np.abs(ph[0::2] - ph[1::2] - np.pi / 2) <= 1e-6))
    )


def _cis(angles: np.ndarray) -> np.ndarray:
    """e^{i·angles} as complex64, from float64 sines and cosines."""
    z = np.empty(angles.shape, np.complex64)
    z.real, z.imag = np.cos(angles), np.sin(angles)
    return z


class GridFeatures:
    """The first stage's features on one render's sample grid, tile by tile.

    sin(u + v) is Im(e^{iu}·e^{iv}): one complex64 multiply per feature and sample, a single
    vectorised numpy pass (the real form's two products and a sum cost 3-5× more in temporaries).
    Paired features (cos q, sin q) are the real and imaginary parts of one product: its float32 view
    is the body's input, with no copy.
    """

    def __init__(self, stage: FirstStage, matrix: np.ndarray):
        m = np.asarray(matrix, np.float64)
        self.paired = _pairs(stage)
        P, phase = (stage.P[1::2], stage.phase[1::2]) if self.paired else (stage.P, stage.phase)
        self.a = P @ m[:, 0]  # per unit of x
        self.b = P @ m[:, 1]  # per unit of y
        self.g = P @ m[:, 2] + phase
        self._rows: tuple | None = None  # the last tile row's table (row-major tiles share it)

    def _row_table(self, ys: np.ndarray, key: tuple) -> np.ndarray:
        rows = self._rows  # one read: another thread may swap in another tile row's table
        if rows is None or rows[0] != key:
            rows = self._rows = (key, _cis(ys[:, None] * self.b + self.g))
        return rows[1]

    def tile(self, xs: np.ndarray, ys: np.ndarray, key: tuple) -> np.ndarray:
        """[len(ys)·len(xs), F] float32 features, row-major like the tile's samples."""
        zc = _cis(xs[:, None] * self.a)  # [c, F'] per column
        zr = self._row_table(ys, key)  # [r, F'] per row
        z = np.multiply(zr[:, None, :], zc[None, :, :]).reshape(len(ys) * len(xs), -1)
        return z.view(np.float32) if self.paired else np.ascontiguousarray(z.imag)


def separable_sampler(
    body: SeparableBody, spec, run: Callable[[np.ndarray], np.ndarray] | None = None
) -> Callable[[Tile], np.ndarray]:
    """Samples of a tile of `spec` (imaging.RenderSpec) through the first stage's tables and the body;
    `run` (default `body.run`) runs the body graph — the service passes ModelRuntime.predict_features."""
    grid = GridFeatures(body.stage, spec.matrix)
    run = run or body.run

    def sample(t: Tile) -> np.ndarray:
        xs, ys = grid_axes(t, spec.width, spec.height, spec.supersample, spec.viewport)
        return run(grid.tile(xs, ys, (t.y0, t.y1)))

    return sample
