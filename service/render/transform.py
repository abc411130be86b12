"""Affine transforms of the unit square, in 3×3 homogeneous matrices.

Coordinates are (x, y) in [0,1]², x right, y down (docs/model-repository.md).

Parameter form: how the *image* moves. Rotate counter-clockwise on screen by
`rotate` degrees about `center`, then scale by (sx, sy) about `center`, then
translate by (tx, ty):

    F = T(t) · T(c) · S(sx, sy) · R(θ) · T(−c)

A rendered pixel at q shows the model at the inverse-mapped point F⁻¹ q.
Because y points down, a counter-clockwise turn on screen maps (1, 0) to
(cos θ, −sin θ):  R(θ) = [[cos θ, sin θ], [−sin θ, cos θ]].

Matrix form: a 2×3 matrix M = [[a, b, c], [d, e, f]] applied directly to the query
coordinates, as in the seed blog: the model is sampled at M · (x, y, 1).
"""
from __future__ import annotations

import math

import numpy as np

MIN_SCALE, MAX_SCALE = 1e-9, 1e9  # beyond these the inverse map loses all precision or overflows


def rotation(degrees: float) -> np.ndarray:
    """Counter-clockwise on screen (y down). Exact for multiples of 90°."""
    t = math.radians(degrees)
    c, s = round(math.cos(t), 15), round(math.sin(t), 15)
    return np.array([[c, s, 0.0], [-s, c, 0.0], [0.0, 0.0, 1.0]])


def scaling(sx: float, sy: float) -> np.ndarray:
    return np.diag([float(sx), float(sy), 1.0])


def translation(tx: float, ty: float) -> np.ndarray:
    return np.array([[1.0, 0.0, tx], [0.0, 1.0, ty], [0.0, 0.0, 1.0]])


def forward(rotate: float = 0.0, scale: tuple[float, float] = (1.0, 1.0),
            translate: tuple[float, float] = (0.0, 0.0), center: tuple[float, float] = (0.5, 0.5)) -> np.ndarray:
    """The 3×3 matrix that moves the image: rotate about center, then scale about center, then translate."""
    cx, cy = center
    return (translation(*translate) @ translation(cx, cy) @ scaling(*scale) @ rotation(rotate)
            @ translation(-cx, -cy))


def sampling_matrix(rotate: float = 0.0, scale: tuple[float, float] = (1.0, 1.0),
                    translate: tuple[float, float] = (0.0, 0.0), center: tuple[float, float] = (0.5, 0.5),
                    matrix: list[list[float]] | None = None) -> np.ndarray:
    """The 2×3 matrix from output coordinates to the model's coordinates."""
    if matrix is not None:
        return np.asarray(matrix, dtype=np.float64).reshape(2, 3)
    return inverse(rotate, scale, translate, center)[:2]


def inverse(rotate: float = 0.0, scale: tuple[float, float] = (1.0, 1.0),
            translate: tuple[float, float] = (0.0, 0.0), center: tuple[float, float] = (0.5, 0.5)) -> np.ndarray:
    """F⁻¹ = T(c) · R(−θ) · S(1/sx, 1/sy) · T(−c) · T(−t), composed exactly rather than by matrix inversion."""
    (sx, sy), (cx, cy), (tx, ty) = scale, center, translate
    if not all(MIN_SCALE <= abs(s) <= MAX_SCALE for s in (sx, sy)):
        raise ValueError(f"scale must be non-zero, between {MIN_SCALE:g} and {MAX_SCALE:g} in magnitude")
    return (translation(cx, cy) @ rotation(-rotate) @ scaling(1 / sx, 1 / sy) @ translation(-cx, -cy)
            @ translation(-tx, -ty))


def apply(m: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Map [..., 2] coordinates through a 2×3 matrix; float64 in, float64 out."""
    return coords @ m[:, :2].T + m[:, 2]


def is_identity(m: np.ndarray) -> bool:
    return bool(np.array_equal(m, np.eye(3)[:2]))
