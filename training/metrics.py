"""Image quality metrics."""
from __future__ import annotations

import math

import numpy as np


def psnr(pred: np.ndarray, target: np.ndarray) -> float:
    """Peak signal-to-noise ratio in dB for values in [0,1]."""
    mse = float(np.mean((np.asarray(pred, np.float64) - np.asarray(target, np.float64)) ** 2))
    return float("inf") if mse == 0 else -10.0 * math.log10(mse)


def psnr_from_mse(mse: float) -> float:
    return float("inf") if mse <= 0 else -10.0 * math.log10(mse)


def ssim(pred: np.ndarray, target: np.ndarray) -> float:
    """SSIM of two [H, W, 3] images in [0,1] (skimage, data_range=1)."""
    from skimage.metrics import structural_similarity
    return float(structural_similarity(pred, target, channel_axis=-1, data_range=1.0))
