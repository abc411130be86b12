"""Image quality metrics."""

from __future__ import annotations

import math

import numpy as np

CHUNK = 1 << 20  # values per chunk: the error of a 25 MP image is summed without float64 copies of it
SSIM_WIN = 7  # skimage's window: an image with a side under 7 pixels has no SSIM
SSIM_STRIP = 1024  # rows per strip for images over SSIM_WHOLE pixels
SSIM_WHOLE = 4_000_000


def sse(pred: np.ndarray, target: np.ndarray) -> float:
    """Sum of squared differences, in float64, a chunk of rows at a time (views in, no whole-image copies)."""
    pred, target = np.asarray(pred), np.asarray(target)
    rows = max(1, CHUNK // max(1, pred[0].size)) if pred.ndim > 1 and len(pred) else CHUNK
    total = 0.0
    for i in range(0, len(pred), rows):
        d = (pred[i : i + rows].astype(np.float64) - target[i : i + rows]).reshape(-1)
        total += float(np.dot(d, d))
    return total


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB for values in [0,1]."""
    n = np.asarray(pred).size
    return float("nan") if n == 0 else psnr_from_mse(sse(pred, target) / n)


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else -10.0 * math.log10(mse)


def ssim(pred: np.ndarray, target: np.ndarray) -> float | None:
    """SSIM of two [H, W, 3] images in [0,1] (skimage, data_range=1); None for an image with a side under 7
    pixels. Over SSIM_WHOLE pixels, the row-weighted mean over strips of SSIM_STRIP rows (bounded memory;
    each strip drops its own 3 border rows, so it differs from the whole image's SSIM in the 4th digit)."""
    from skimage.metrics import structural_similarity

    h, w = pred.shape[:2]
    if min(h, w) < SSIM_WIN:
        return None
    if h * w <= SSIM_WHOLE:
        return float(structural_similarity(pred, target, channel_axis=-1, data_range=1.0))
    starts = [s for s in range(0, h, SSIM_STRIP) if h - s >= SSIM_WIN]
    parts = [
        (
            min(h, s + SSIM_STRIP) - s,
            structural_similarity(
                pred[s : s + SSIM_STRIP], target[s : s + SSIM_STRIP], channel_axis=-1, data_range=1.0
            ),
        )
        for s in starts
    ]
    return float(sum(n * v for n, v in parts) / sum(n for n, _ in parts))
