"""Helpers of the bigimage tests: the expected pixels, computed apart from bigimage."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def pillow_rgb(path: Path) -> np.ndarray:
    """The whole image decoded by Pillow, as the reference every region is compared with."""
    with Image.open(path) as im:
        return np.asarray(im.convert("RGB"))


def over_white(rgba: np.ndarray, peak: int) -> np.ndarray:
    """Alpha compositing over white, in floating point, then 8 bits: the expected value (±1 for rounding)."""
    colour, alpha = rgba[..., :-1].astype(np.float64), rgba[..., -1:].astype(np.float64) / peak
    out = colour * alpha + peak * (1 - alpha)
    out = np.rint(out * 255 / peak)
    return np.broadcast_to(out, (*out.shape[:2], 3)).astype(np.uint8)
