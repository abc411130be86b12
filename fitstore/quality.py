"""The PSNR a job's record shows (docs/fits.md, "Records"): while it fits, its training PSNR (the pixels it trains on,
from the loss); once it succeeded, the model's PSNR over all pixels (`metrics.full_psnr`), whichever way it was fitted
(one model, or blocks, where it is the bound of the blocks' weighted errors)."""

from __future__ import annotations

import math

PSNR_CAP_DB = 100.0  # training.metrics' convention: an exact fit reads 100 dB, not infinity (JSON has none)


def number(v) -> bool:
    return isinstance(v, (int, float)) and not isinstance(v, bool) and math.isfinite(v)


def psnr_of(mse: float) -> float | None:
    """PSNR in dB of a mean squared error of values in [0, 1], as training.metrics.psnr_from_mse writes it, to 3
    decimals; None for no number."""
    if not number(mse) or mse < 0:
        return None
    return PSNR_CAP_DB if mse <= 10 ** (-PSNR_CAP_DB / 10) else round(min(PSNR_CAP_DB, -10.0 * math.log10(mse)), 3)


def settle(rec: dict) -> dict:
    """A succeeded record's `psnr` and `ssim` from its metrics (the model's over all pixels), where they have them."""
    m = rec.get("metrics") if isinstance(rec.get("metrics"), dict) else {}
    if rec.get("state") == "succeeded" and number(m.get("full_psnr")):
        rec["psnr"] = m["full_psnr"]
    if rec.get("state") == "succeeded" and number(m.get("ssim")):
        rec["ssim"] = m["ssim"]
    return rec
