"""Affine transforms of the unit square, in 3×3 homogeneous matrices.

Coordinates are (x, y) in [0,1]², x right, y down (docs/model-repository.md): x across the
model's W pixels, y down its H pixels, so a non-square model's unit square is W×H pixels.

Parameter form: how the *image* moves. Rotate counter-clockwise on screen by
`rotate` degrees about `center`, then scale by (sx, sy) about `center`, then
translate by (tx, ty). Rotation and scaling act in square pixels, so they are
conjugated by D = diag(W, H) (taken as diag(1, H/W), the same map, exact for a
square model); `center` and `translate` stay in normalised model units:

    F = T(t) · T(c) · D⁻¹ · S(sx, sy) · R(θ) · D · T(−c)

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


Size = tuple[int, int] | None  # the model's native (W, H); None = square


def pixel_scale(size: Size) -> np.ndarray:
    """D = diag(1, H/W): normalised model units → square pixel units (in units of W pixels); identity when square."""
    if size is None or size[0] == size[1]:
        return np.eye(3)
    return scaling(1.0, size[1] / size[0])


def pixel_unscale(size: Size) -> np.ndarray:
    """D⁻¹ = diag(1, W/H)."""
    if size is None or size[0] == size[1]:
        return np.eye(3)
    return scaling(1.0, size[0] / size[1])


def forward(
    rotate: float = 0.0,
    scale: tuple[float, float] = (1.0, 1.0),
    translate: tuple[float, float] = (0.0, 0.0),
    center: tuple[float, float] = (0.5, 0.5),
    size: Size = None,
) -> np.ndarray:
    """The 3×3 matrix that moves the image: rotate about center, then scale about center (both in square
    pixels of a `size` = (W, H) model), then translate."""
    cx, cy = center
    return (
        translation(*translate)
        @ translation(cx, cy)
        @ pixel_unscale(size)
        @ scaling(*scale)
        @ rotation(rotate)
        @ pixel_scale(size)
        @ translation(-cx, -cy)
    )


def sampling_matrix(
    rotate: float = 0.0,
    scale: tuple[float, float] = (1.0, 1.0),
    translate: tuple[float, float] = (0.0, 0.0),
    center: tuple[float, float] = (0.5, 0.5),
    matrix: list[list[float]] | None = None,
    size: Size = None,
) -> np.ndarray:
    """The 2×3 matrix from output coordinates to the model's coordinates (`matrix`: as given, raw)."""
    if matrix is not None:
        return np.asarray(matrix, dtype=np.float64).reshape(2, 3)
    return inverse(rotate, scale, translate, center, size)[:2]


def inverse(
    rotate: float = 0.0,
    scale: tuple[float, float] = (1.0, 1.0),
    translate: tuple[float, float] = (0.0, 0.0),
    center: tuple[float, float] = (0.5, 0.5),
    size: Size = None,
) -> np.ndarray:
    """F⁻¹ = T(c) · D⁻¹ · R(−θ) · S(1/sx, 1/sy) · D · T(−c) · T(−t), composed exactly rather than by
    matrix inversion."""
    (sx, sy), (cx, cy), (tx, ty) = scale, center, translate
    if not all(MIN_SCALE <= abs(s) <= MAX_SCALE for s in (sx, sy)):
        raise ValueError(f"scale must be non-zero, between {MIN_SCALE:g} and {MAX_SCALE:g} in magnitude")
    return (
        translation(cx, cy)
        @ pixel_unscale(size)
        @ rotation(-rotate)
        @ scaling(1 / sx, 1 / sy)
        @ pixel_scale(size)
        @ translation(-cx, -cy)
        @ translation(-tx, -ty)
    )


def quarter_turns(rotate: float) -> int:
    """The rotation's nearest quarter turn, 0–3 (counter-clockwise); a tie (45°, 135°, …) turns up, as
    JavaScript's Math.round (the viewer, service/static/camera.js, computes the same)."""
    return math.floor(rotate / 90.0 + 0.5) % 4


def render_frame(viewport: tuple[float, float, float, float], rotate: float, size: Size):
    """The frame a render's output pixels span, in normalised model coordinates (docs: the render frame).

    The viewport is read in the normalised coordinates of the image turned by the rotation's nearest quarter
    turn: for an odd quarter turn a W×H model shows an image H pixels wide and W tall, so viewport x spans H
    pixels (H/W model units) and y spans W pixels (W/H), about the image centre (0.5, 0.5). One affine map, so
    the frames of a render's tiles are the tiles of its frame. Even turns and square models: the viewport."""
    if size is None or size[0] == size[1] or quarter_turns(rotate) % 2 == 0:
        return tuple(viewport)
    (w, h), (x0, y0, x1, y1) = size, viewport
    fx, fy = h / w, w / h
    return (0.5 + (x0 - 0.5) * fx, 0.5 + (y0 - 0.5) * fy, 0.5 + (x1 - 0.5) * fx, 0.5 + (y1 - 0.5) * fy)


def apply(m: np.ndarray, coords: np.ndarray) -> np.ndarray:
    """Map [..., 2] coordinates through a 2×3 matrix; float64 in, float64 out."""
    return coords @ m[:, :2].T + m[:, 2]


def is_identity(m: np.ndarray) -> bool:
    return bool(np.array_equal(m, np.eye(3)[:2]))


DEFAULT_SIDE = 256  # a render that names neither width nor height: this many pixels on its longer side


def frame_pixels(
    width: int | None, height: int | None, frame, size: Size, default: int = DEFAULT_SIDE
) -> tuple[int, int]:
    """A render's width and height, the missing ones following the frame's aspect in model pixels (the
    native aspect for the whole image, turned for odd quarter turns): only `width` → height =
    round(width · aspect⁻¹); only `height` likewise; neither → `default` on the longer side."""
    if width is not None and height is not None:
        return width, height
    w, h = size or (1, 1)
    ex, ey = (frame[2] - frame[0]) * w, (frame[3] - frame[1]) * h
    if width is None and height is None:
        if ex >= ey:
            width = default
        else:
            height = default
    if height is None:
        return width, _side(width * ey / ex)
    return _side(height * ex / ey), height


def _side(value: float) -> int:
    """A derived side in pixels, at least 1; an overflowing one (a vanishing viewport) stays a finite int that
    the size limit refuses."""
    return max(1, round(min(value, 1e12)))
