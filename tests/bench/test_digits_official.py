"""bench.digits official, small: a digits model with a detector through the real server, its numbers and the file it
writes. The model is the shipped one; the data the first digits of mnist-10k and drawn shapes as the other images.
Timing is never asserted."""

import json

import numpy as np
import pytest

from bench import digits
from tests.servers import ROOT
from tests.training.digits.conftest import write_split
from tests.training.digits.test_digits_reject import shapes

MNIST10K = ROOT.parent / "shared" / "data" / "mnist-10k"


@pytest.mark.skipif(not MNIST10K.exists(), reason=f"no MNIST-10k at {MNIST10K}")
def test_the_shipped_model_through_the_service_on_a_few_digits_and_shapes(tmp_path):
    items = tmp_path / "items"
    items.mkdir()
    for split, seed in (("train", 1), ("test", 2)):
        write_split(items, split, shapes(40, seed), np.zeros(40, np.uint8))
    argv = ["--data-dir", str(MNIST10K), "--items-dir", str(items), "--limit", "300", "--generated", "20"]
    result = digits.main(["official", *argv, "--out-dir", str(tmp_path)])
    saved = json.loads((tmp_path / "digits_official.json").read_text())
    assert saved["digits"] == 300 and saved["v2_accuracy"] == result["v2_accuracy"] >= 0.97
    assert saved["v1_accuracy"] >= 0.97 and saved["v1_null"] <= 0.02 and 0 <= saved["test_ece"] < 0.05
    assert saved["blank_null"] == saved["solid_null"] == saved["noise_null"] == 1.0
    assert saved["fashion_mnist_test_count"] == 40 and saved["strokes_count"] == 20
    assert saved["cpu_one_thread"]["us_per_digit_b1"] > 0
    rows = saved["classification_extension"]
    assert len(rows) == 8 and all(r[0].split(":")[1] != "-1" for r in rows[:4])
