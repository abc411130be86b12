"""Native geometry, training half: `fit-image` fits the whole image at its native size and aspect (no crop unless
asked), records the grid [W, H] in metadata and in the ONNX metadata_props, and refuses bad grid options
with one line; tiny and extreme images are fitted, never a crash. Real CLI subprocesses, real onnxruntime."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from PIL import Image

from training.images import fit_dims, load_image, pixel_centres

ROOT = Path(__file__).resolve().parents[2]
GRID = ["--encoding", "grid", "--depth", "3", "--width", "16", "--lr", "1e-2", "--batch-size", "1024", "--no-progress"]


def run_cli(*args):
    return subprocess.run(
        [sys.executable, "-m", "training", *args], cwd=ROOT, capture_output=True, text=True, timeout=300
    )


def picture(tmp_path: Path, w: int, h: int, name: str = "pic.png") -> Path:
    yy, xx = np.mgrid[0:h, 0:w]
    rgb = np.stack([xx / max(w - 1, 1), yy / max(h - 1, 1), 0.5 + 0.4 * np.sin(xx / 3.0) * np.cos(yy / 5.0)], -1)
    path = tmp_path / name
    Image.fromarray((rgb * 255 + 0.5).astype(np.uint8)).save(path)
    return path


@pytest.mark.parametrize(
    "w, h, size, crop, want",
    [
        (2560, 1600, None, False, (2560, 1600)),  # native: no crop, no resize
        (2560, 1600, 512, False, (512, 320)),  # a cap on the longer side, aspect kept
        (1600, 2560, 512, False, (320, 512)),
        (300, 200, 512, False, (300, 200)),  # never upscaled
        (2560, 1600, 512, True, (512, 512)),  # the centre square only on request
        (6000, 5000, None, False, (5477, 4564)),  # over 25 MP: downscaled to the pixel limit
        (1, 20000, 512, False, (1, 512)),
    ],
)
def test_fit_dims(w, h, size, crop, want):
    assert fit_dims(w, h, size, crop) == want


def test_a_non_square_grid_fit_end_to_end_through_the_cli(tmp_path):
    image = picture(tmp_path, 60, 36)
    out = tmp_path / "repo" / "wide"
    r = run_cli("fit-image", "--image", str(image), *GRID, "--steps", "80", "--fp16-weights", "--out", str(out))
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [60, 36] and meta["source"]["original_size"] == [60, 36]
    assert "crop" not in meta["source"] and meta["encoding"]["image_size"] == [60, 36]
    assert meta["export"]["max_abs_diff_vs_torch"]["rgb"] <= 1e-5
    assert meta["metrics"]["full_psnr"] > 20 and meta["training"]["best_step"] >= 0
    session = ort.InferenceSession(str(out / "1" / "model.onnx"), providers=["CPUExecutionProvider"])
    props = session.get_modelmeta().custom_metadata_map
    assert (props["image_width"], props["image_height"]) == ("60", "36")
    # onnxruntime at the pixel centres reproduces the image the fit scored (within the parity gate of it)
    img, _ = load_image(str(image))
    rgb = session.run(["rgb"], {"coords": pixel_centres(36, 60).reshape(-1, 2)})[0].reshape(36, 60, 3)
    mse = float(np.mean((rgb - img) ** 2))
    assert abs(-10 * np.log10(mse) - meta["metrics"]["full_psnr"]) < 0.01
    with Image.open(out / "1" / "preview.png") as im:
        assert im.size == (60, 36)


def test_crop_fits_the_centre_square(tmp_path):
    out = tmp_path / "sq"
    r = run_cli(
        "fit-image", "--image", str(picture(tmp_path, 50, 30)), "--crop", *GRID, "--steps", "5", "--out", str(out)
    )
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [30, 30] and meta["source"]["crop"] == "centre square"


BAD_OPTIONS = {  # option and value → what the one line says
    "--grid-levels 0": "--grid-levels must be in 1..32",
    "--grid-features 0": "--grid-features must be in 1..16",
    "--grid-finest-features 17": "--grid-finest-features must be in 1..16 (or 0: derived)",
    "--grid-log2-table 40": "--grid-log2-table must be in 8..26",
    "--grid-finest 40000": "--grid-finest must be in 1..32768",
    "--grid-base 0": "--grid-base must be in 1..32768",
    "--grid-bytes-per-pixel nan": "--grid-bytes-per-pixel must be in",
    "--size 0": "--size",
}


@pytest.mark.parametrize("option", BAD_OPTIONS)
def test_bad_grid_options_are_one_line_exit_2_and_write_nothing(tmp_path, option):
    (tmp_path / "in").mkdir()
    image = picture(tmp_path / "in", 20, 10)
    out = tmp_path / "out" / "m"
    r = run_cli("fit-image", "--image", str(image), *GRID, "--steps", "1", *option.split(), "--out", str(out))
    assert r.returncode == 2, r.stderr
    assert len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert BAD_OPTIONS[option] in r.stderr
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("w, h", [(1, 1), (2, 3), (1, 300), (300, 1)])
def test_tiny_and_extreme_aspect_images_are_fitted(tmp_path, w, h):
    out = tmp_path / "m"
    r = run_cli("fit-image", "--image", str(picture(tmp_path, w, h)), *GRID, "--steps", "3", "--out", str(out))
    assert r.returncode == 0, r.stderr
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [w, h]
    assert np.isfinite(meta["metrics"]["full_psnr"])


def test_the_preview_keeps_the_aspect_within_its_longer_side(tmp_path):
    from training.fit_image import PREVIEW_SIDE
    from training.images import save_png

    save_png(np.zeros((10, 3000, 3), np.float32), tmp_path / "p.png", max_side=PREVIEW_SIDE)
    with Image.open(tmp_path / "p.png") as im:
        assert im.size == (PREVIEW_SIDE, 3)


@pytest.mark.parametrize("w, h", [(1, 1), (2, 3)])
def test_tiny_images_are_fitted_with_the_default_preset(tmp_path, w, h):
    """The preset's native luma level on one pixel: its rounding range is one value
    (training/encodings/grid_refit.py)."""
    from fitstore import PRESETS

    out = tmp_path / "m"
    r = run_cli(
        "fit-image",
        "--image",
        str(picture(tmp_path, w, h)),
        *PRESETS["grid"]["argv"],
        "--protocol",
        "full",
        "--steps",
        "3",
        "--no-progress",
        "--out",
        str(out),
    )
    assert r.returncode == 0, r.stderr[-2000:]
    assert "RuntimeWarning" not in r.stderr, r.stderr[-2000:]  # the rate control's codes of one value: not 0/0
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["source"]["size"] == [w, h] and np.isfinite(meta["metrics"]["full_psnr"])
    assert meta["export"]["tables"]["u8_tables"] == 8


def test_a_render_is_rounded_to_uint8_by_rows_as_in_one_pass(monkeypatch):
    """The preview's and an image's uint8 pixels a chunk of rows at a time (no float copies of a 25 MP render): the
    values of the one-pass rounding, out-of-range values clipped, for chunks that do and do not divide the rows."""
    from training import images

    rng = np.random.default_rng(0)
    render = rng.uniform(-0.2, 1.2, (37, 11, 3)).astype(np.float32)
    want = (np.clip(render, 0, 1) * 255 + 0.5).astype(np.uint8)
    for chunk in (1, 33, 50, 1 << 20):
        monkeypatch.setattr(images, "UINT8_CHUNK", chunk)
        assert np.array_equal(images._to_uint8(render), want)
    assert np.array_equal(images._to_uint8(render[0, 0]), want[0, 0])
