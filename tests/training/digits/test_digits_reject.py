"""Calibration (temperature, ECE), what is not a digit (generated pages and letters), the detector and its
threshold chosen on validation, and an export that ships both: fit-digit-detector and export-digits
--calibrate --detector on the rendered-glyph fixture against drawn shapes."""

from __future__ import annotations

import json

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image, ImageDraw

from tests.training.digits.test_digits_cli import assert_one_line_error, run_cli
from training.cli import main
from training.digits import calibrate, outliers
from training.digits.idx import write_idx
from training.digits.reject import load_detector


def shapes(n: int, seed: int) -> np.ndarray:
    """Filled ellipses and boxes of random size and place: not digits."""
    rng = np.random.default_rng(seed)
    out = np.empty((n, 28, 28), np.uint8)
    for i in range(n):
        im = Image.new("L", (28, 28))
        x0, y0 = rng.integers(0, 10, 2)
        x1, y1 = rng.integers(18, 28, 2)
        draw = ImageDraw.Draw(im)
        (draw.ellipse if i % 2 else draw.rectangle)(
            (int(x0), int(y0), int(x1), int(y1)), fill=int(rng.integers(90, 256))
        )
        out[i] = np.asarray(im)
    return out


@pytest.fixture(scope="module")
def items_dir(tmp_path_factory):
    d = tmp_path_factory.mktemp("items")
    for stem, n, seed in (("train", 400, 5), ("t10k", 100, 6)):
        write_idx(d / f"{stem}-images-idx3-ubyte.gz", shapes(n, seed))
        write_idx(d / f"{stem}-labels-idx1-ubyte.gz", np.zeros(n, np.uint8))
    return d


def test_pages_and_letters_are_what_they_say_and_differ_by_seed():
    assert not outliers.pages("blank", 3, 0).any()
    solid = outliers.pages("solid", 5, 0)
    assert all(len(np.unique(p)) == 1 and p[0, 0] >= 16 for p in solid)
    assert len(np.unique(outliers.pages("noise", 1, 0))) > 100
    salt = outliers.pages("salt", 4, 0)
    assert set(np.unique(salt)) == {0, 255}
    a, b = outliers.letters(20, 1), outliers.letters(20, 2)
    assert a.shape == (20, 28, 28) and (a > 128).sum(axis=(1, 2)).min() > 10  # ink on every letter
    assert np.array_equal(a, outliers.letters(20, 1)) and not np.array_equal(a, b)
    drawn = outliers.strokes(12, 3)
    assert drawn.shape == (12, 28, 28) and np.array_equal(drawn, outliers.strokes(12, 3))
    rows, cols = np.nonzero(drawn[0] > 0)
    assert max(np.ptp(rows), np.ptp(cols)) <= 21  # made MNIST-like: the ink's longer side 20 px
    assert set(outliers.synthetic(2, 0)) == {*outliers.PAGES, "letters", "strokes"}
    with pytest.raises(ValueError, match="unknown page kind"):
        outliers.pages("stripes", 1, 0)


def test_temperature_scaling_finds_the_temperature_that_made_logits_overconfident():
    rng = np.random.default_rng(0)
    true = rng.normal(0, 2, (4000, 10))
    labels = np.array([rng.choice(10, p=p) for p in calibrate.softmax(true)])
    hot = 3.0 * true  # overconfident by T = 3
    t = calibrate.fit_temperature(hot, labels)
    assert t == pytest.approx(3.0, rel=0.1)
    rep = calibrate.report(hot, labels, t)
    assert rep["nll"] < rep["nll_before"] and rep["ece"] < 0.03 < rep["ece_before"]
    assert calibrate.ece(np.eye(10)[labels], labels) == 0.0  # right and certain: no gap


def test_detector_and_calibrated_export_ship_is_digit_and_a_threshold_chosen_on_validation(
    glyph_dir, items_dir, tmp_path, capsys
):
    det = tmp_path / "det.pt"
    base = ["--data-dir", str(glyph_dir), "--outliers-dir", str(items_dir)]
    rc, err = run_cli(
        [
            "fit-digit-detector",
            *base,
            "--checkpoint",
            str(det),
            "--epochs",
            "3",
            "--generated",
            "60",
            "--items-held-out",
            "100",
            "--max-false-rejection",
            "0.02",
        ],
        capsys,
    )
    assert rc == 0, err
    detector, info = load_detector(det)
    val = info["validation"]["rates"]
    assert val["digits_rejected"] <= 0.02 and val["items_rejected"] > 0.9 and val["blank_rejected"] == 1.0
    ckpt = tmp_path / "clf.pt"
    assert (
        main(
            [
                "fit-digits",
                "--data-dir",
                str(glyph_dir),
                "--epochs",
                "2",
                "--hidden",
                "16",
                "--no-progress",
                "--checkpoint",
                str(ckpt),
            ]
        )
        == 0
    )
    out = tmp_path / "model"
    rc, err = run_cli(
        ["export-digits", *base, "--checkpoint", str(ckpt), "--calibrate", "--detector", str(det), "--out", str(out)],
        capsys,
    )
    assert rc == 0, err
    meta = json.loads((out / "1" / "metadata.json").read_text())
    cal, rej = meta["calibration"], meta["rejection"]
    assert cal["temperature"] > 0 and cal["validation"]["nll"] <= cal["validation"]["nll_before"] + 1e-6
    assert (
        0 <= cal["test"]["ece"] <= 1
        and rej["output"] == "is_digit"
        and rej["threshold"] == pytest.approx(info["threshold"], abs=1e-6)
    )
    assert set(rej["test"]) >= {"digits_rejected", "items_rejected", "letters_rejected", "noise_rejected"}
    assert "is_digit" in (out / "config.pbtxt").read_text()
    sess = ort.InferenceSession(str(out / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    x = np.stack([np.zeros((1, 28, 28)), np.full((1, 28, 28), 0.5)]).astype(np.float32)
    logits, probs, is_digit = sess.run(["logits", "probabilities", "is_digit"], {"images": x})
    assert is_digit.shape == (2, 1) and (is_digit < rej["threshold"]).all()  # blank and solid pages
    z = logits - logits.max(axis=1, keepdims=True)  # the logits are the calibrated ones: softmax of them
    assert np.allclose(np.exp(z) / np.exp(z).sum(axis=1, keepdims=True), probs, atol=1e-5)


def test_detector_bad_input_is_one_line(glyph_dir, items_dir, tmp_path, capsys):
    det = tmp_path / "det.pt"
    base = ["fit-digit-detector", "--data-dir", str(glyph_dir), "--checkpoint", str(det)]
    rc, err = run_cli([*base, "--outliers-dir", str(items_dir)], capsys)  # 400 items, 10,000 held out
    assert_one_line_error(rc, err, "more than 10000 training images")
    rc, err = run_cli([*base, "--outliers-dir", str(items_dir), "--max-false-rejection", "0.7"], capsys)
    assert_one_line_error(rc, err, "--max-false-rejection")
    assert not det.exists()
    bad = tmp_path / "bad.pt"
    bad.write_bytes(b"no")
    rc, err = run_cli(
        [
            "export-digits",
            "--data-dir",
            str(glyph_dir),
            "--checkpoint",
            str(bad),
            "--detector",
            str(bad),
            "--out",
            str(tmp_path / "m"),
        ],
        capsys,
    )
    assert_one_line_error(rc, err)
    assert not (tmp_path / "m").exists()
