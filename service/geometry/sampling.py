"""Sampling an image model at points: coordinates through the 2×3 sampling matrix (service/geometry/transform.py),
and what is shown where a sample falls outside the unit square.

`background`, after the transform:
  - `extrapolate` (default): whatever the network computes there;
  - `transparent`: alpha 0 (png and webp only), partial alpha along the edge;
  - a colour: `white`, `#808080`, `#f00`, … (any CSS colour Pillow knows), blended along the edge.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from PIL import ImageColor

from .transform import apply


@dataclass(frozen=True)
class Background:
    mode: str  # extrapolate | transparent | colour
    rgb: tuple[float, float, float] = (0.0, 0.0, 0.0)

    @classmethod
    def parse(cls, text: str) -> "Background":
        text = text.strip()
        if text.lower() in ("extrapolate", "transparent"):
            return cls(text.lower())
        try:
            rgb = ImageColor.getrgb(text)[:3]
        except ValueError:
            raise ValueError(
                f"background must be 'extrapolate', 'transparent' or a colour such as 'white' "
                f"or '#ff8800', got '{text}'"
            ) from None
        return cls("colour", tuple(c / 255.0 for c in rgb))


FLOAT32_LIMIT = 1e30  # beyond this the network's float32 arithmetic overflows to Inf/NaN


def model_coords(matrix: np.ndarray, points: np.ndarray) -> np.ndarray:
    """Map output points through the 2×3 matrix, refusing results the float32 model cannot take."""
    src = apply(matrix, points)
    if not np.all(np.abs(src) < FLOAT32_LIMIT):
        raise ValueError(
            f"coordinates after the transform reach {np.abs(src).max():.3g}; they must stay "
            f"below {FLOAT32_LIMIT:g} in magnitude"
        )
    return src


def inside_unit_square(points: np.ndarray) -> np.ndarray:
    return np.all((points >= 0.0) & (points <= 1.0), axis=-1)


def fill_points(rgb: np.ndarray, src: np.ndarray, background: Background) -> np.ndarray:
    """Clip model output [N, 3] to [0,1] and paint a background colour where `src` is outside [0,1]²."""
    rgb = np.clip(np.nan_to_num(rgb, nan=0.0), 0.0, 1.0)
    if background.mode == "colour":
        rgb[~inside_unit_square(src)] = background.rgb
    return rgb
