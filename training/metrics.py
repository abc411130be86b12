"""Image quality metrics."""

from __future__ import annotations

import math

import numpy as np

CHUNK = 1 << 20  # values per chunk: the error of a 25 MP image is summed without float64 copies of it
SSIM_WIN = 7  # skimage's window: an image with a side under 7 pixels has no SSIM
SSIM_STRIP = 1024  # rows per strip for images over SSIM_WHOLE pixels
SSIM_WHOLE = 4_000_000
# The one convention of every PSNR this project writes (fit records, progress events, metadata.json, the viewer;
# docs/training.md): PSNR is capped at PSNR_CAP_DB. An MSE at or below MSE_FLOOR, an exact fit included (a 1×1
# upload, a flat image: the loss reaches 0), reads PSNR_CAP_DB instead of infinity, which is not JSON. 100 dB is
# an RMS error of 1e-5, under 1/390 of an 8-bit level: at or above it a fit is exact to 8 bits. An MSE that is no
# number (nan: a diverged step; no pixels) has no PSNR: None, written as null.
PSNR_CAP_DB = 100.0
MSE_FLOOR = 10 ** (-PSNR_CAP_DB / 10)


def sse(pred: np.ndarray, target: np.ndarray) -> float:
    """Sum of squared differences, in float64, a chunk of rows at a time (views in, no whole-image copies)."""
    pred, target = np.asarray(pred), np.asarray(target)
    rows = max(1, CHUNK // max(1, pred[0].size)) if pred.ndim > 1 and len(pred) else CHUNK
    total = 0.0
    for i in range(0, len(pred), rows):
        d = (pred[i : i + rows].astype(np.float64) - target[i : i + rows]).reshape(-1)
        total += float(np.dot(d, d))
    return total


def psnr(pred: np.ndarray, target: np.ndarray, ndigits: int | None = None) -> float | None:
    """Peak signal-to-noise ratio in dB for values in [0,1], by psnr_from_mse's convention."""
    n = np.asarray(pred).size
    return None if n == 0 else psnr_from_mse(sse(pred, target) / n, ndigits)


def psnr_from_mse(mse: float, ndigits: int | None = None) -> float | None:
    """PSNR in dB of a mean squared error of values in [0,1]: at most PSNR_CAP_DB (an MSE at or below MSE_FLOOR,
    0 included, gives the cap), None for an MSE that is not finite; rounded to `ndigits` when given. Always a
    finite float or None, so it can be written as JSON."""
    mse = float(mse)
    if not math.isfinite(mse):
        return None
    db = PSNR_CAP_DB if mse <= MSE_FLOOR else min(PSNR_CAP_DB, -10.0 * math.log10(mse))
    return db if ndigits is None else round(db, ndigits)


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
