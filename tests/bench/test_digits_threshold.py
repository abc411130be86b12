"""bench.digits threshold, small: on the glyph fixture against drawn shapes, a detector and a classifier trained by
the CLI, the threshold's cost at each share; a larger share never rejects fewer. Timing is never asserted."""

import json

import numpy as np

from bench import digits as bench_digits
from tests.training.digits.conftest import render_glyphs, write_split
from tests.training.digits.test_digits_reject import shapes
from training.cli import main as training


def test_each_share_gives_a_threshold_its_costs_on_validation(tmp_path):
    digits, items = tmp_path / "digits", tmp_path / "items"
    digits.mkdir(), items.mkdir()
    write_split(digits, "train", *render_glyphs(40, seed=1))
    write_split(digits, "test", *render_glyphs(5, seed=2))
    for split, seed in (("train", 3), ("test", 4)):
        write_split(items, split, shapes(300, seed), np.zeros(300, np.uint8))
    det, clf = tmp_path / "det.pt", tmp_path / "clf.pt"
    assert (
        training(
            [
                "fit-digit-detector",
                "--data-dir",
                str(digits),
                "--outliers-dir",
                str(items),
                "--epochs",
                "2",
                "--generated",
                "40",
                "--items-held-out",
                "100",
                "--checkpoint",
                str(det),
            ]
        )
        == 0
    )
    assert (
        training(
            [
                "fit-digits",
                "--data-dir",
                str(digits),
                "--epochs",
                "2",
                "--hidden",
                "16",
                "--no-progress",
                "--checkpoint",
                str(clf),
            ]
        )
        == 0
    )
    argv = ["--data-dir", str(digits), "--items-dir", str(items), "--detector", str(det), "--checkpoint", str(clf)]
    result = bench_digits.main(["threshold", *argv, "--generated", "30", "--out-dir", str(tmp_path)])
    assert json.loads((tmp_path / "digits_threshold.json").read_text())["rows"] == result["rows"]
    rows = result["rows"]
    assert [r["max_false_rejection"] for r in rows] == list(bench_digits.SHARES)
    assert all(
        r["classify_accuracy"] <= result["val_accuracy"] and r["digits_rejected"] <= r["max_false_rejection"]
        for r in rows
    )
    assert [r["threshold"] for r in rows] == sorted(r["threshold"] for r in rows)  # never fewer rejected
    assert all(r["items_rejected"] > 0.5 and r["blank_rejected"] == 1.0 for r in rows)
