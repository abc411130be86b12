"""The one PSNR convention (training.metrics, docs/training.md): capped at PSNR_CAP_DB, an exact fit included,
None for an MSE that is no number; so every PSNR written (metrics, events, records) is strict JSON."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest
import torch

from training.fit_image import evaluate
from training.metrics import MSE_FLOOR, PSNR_CAP_DB, psnr, psnr_from_mse


def test_an_mse_of_zero_gives_the_cap_not_infinity():
    assert PSNR_CAP_DB == 100.0 and MSE_FLOOR == pytest.approx(1e-10)
    for exact in (0.0, -0.0, 1e-30, MSE_FLOOR, -1e-18):  # -1e-18: a difference of sums rounded below 0
        assert psnr_from_mse(exact) == PSNR_CAP_DB
    assert psnr_from_mse(2e-10) == pytest.approx(96.99, abs=0.01) and psnr_from_mse(2e-10) < PSNR_CAP_DB
    assert psnr_from_mse(1e-3) == pytest.approx(30.0) and psnr_from_mse(1e-3 / 7, 3) == 38.451
    assert psnr_from_mse(np.float32(0.0)) == PSNR_CAP_DB


@pytest.mark.parametrize("mse", [math.nan, math.inf, -math.inf])
def test_an_mse_that_is_no_number_has_no_psnr(mse):
    assert psnr_from_mse(mse) is None and psnr_from_mse(mse, 3) is None


def test_psnr_of_images_follows_the_same_convention():
    img = np.random.default_rng(0).random((2, 3, 3)).astype(np.float32)
    assert psnr(img, img) == PSNR_CAP_DB and psnr(img[:0], img[:0]) is None
    assert psnr(img, img + 0.01) == pytest.approx(40.0, abs=1e-3)
    assert psnr(img, np.full_like(img, np.nan)) is None


class Constant(torch.nn.Module):
    """A model that renders one colour everywhere: an exact fit of a flat image."""

    def __init__(self, rgb):
        super().__init__()
        self.rgb = torch.tensor(rgb, dtype=torch.float32)

    def forward(self, coords):
        return self.rgb.expand(len(coords), 3)


@pytest.mark.parametrize("protocol", ["full", "paper"])
@pytest.mark.parametrize("shape", [(1, 1), (3, 2), (4, 4)])
def test_an_exact_fit_has_metrics_at_the_cap_that_are_strict_json(protocol, shape):
    img = np.ones((*shape, 3), np.float32)
    metrics, _ = evaluate(Constant([1.0, 1.0, 1.0]), img, protocol)
    assert metrics["train_psnr"] == metrics["full_psnr"] == PSNR_CAP_DB
    assert metrics.get("test_psnr", PSNR_CAP_DB) == PSNR_CAP_DB
    json.dumps(metrics, allow_nan=False)  # no Infinity: metadata.json and the job's record are standard JSON
