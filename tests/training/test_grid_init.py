"""The pyramid start (training/encodings/grid_init.py) and 8-bit tables (grid_quant.py) of grid models,
on a real photo (scikit-image's chelsea) and through onnxruntime."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import onnx
import pytest
import torch

from training.encodings import EncodingConfig, grid_init
from training.encodings.grid import MultiresGrid
from training.encodings.grid_init import linear_head, pyramid_init
from training.encodings.grid_quant import round_tables_8bit, store_tables_8bit
from training.export import check_parity, export_onnx
from training.fit_image import predict
from training.image_models import ImageINR, ImageModelConfig
from training.images import load_image, pixel_centres
from training.metrics import psnr


@pytest.fixture(scope="module")
def chelsea() -> np.ndarray:
    img, _ = load_image("chelsea", 120, False, 10**6)  # 120×80, its native aspect
    return img


def grid_model(img: np.ndarray, depth: int = 2, width: int = 32, model: str = "mlp", **enc) -> ImageINR:
    h, w = img.shape[:2]
    return ImageINR(
        ImageModelConfig(
            model=model, depth=depth, width=width, encoding=EncodingConfig(name="grid", image_size=[w, h], **enc)
        )
    )


def render(model: ImageINR, img: np.ndarray) -> np.ndarray:
    h, w = img.shape[:2]
    return predict(model, pixel_centres(h, w).reshape(-1, 2), torch.device("cpu")).reshape(h, w, 3)


def test_the_head_becomes_an_exact_linear_map_of_the_features():
    body = ImageINR(
        ImageModelConfig(
            depth=3, width=40, encoding=EncodingConfig(name="grid", image_size=[20, 10], grid_levels=4, grid_features=2)
        )
    ).body
    last = linear_head(body, 8)
    m = torch.randn(3, 8)
    with torch.no_grad():
        last[:, :8], last[:, 8:16] = m, -m
    f = torch.randn(50, 8) * 5
    assert torch.allclose(body(f), f @ m.t(), atol=1e-5)


@pytest.mark.parametrize("model,depth,width", [("sinekan", 2, 32), ("mlp", 2, 16), ("mlp", 1, 64)])
def test_a_head_that_cannot_be_linear_keeps_its_random_start(chelsea, model, depth, width):
    m = grid_model(chelsea, depth, width, model)
    before = {k: v.clone() for k, v in m.state_dict().items()}
    assert pyramid_init(m, chelsea, "full") is None
    assert all(torch.equal(before[k], v) for k, v in m.state_dict().items())


def test_the_model_starts_as_the_photo_at_its_grid_resolution(chelsea):
    """Step 0 after the pyramid start is close to the photo; the random start is grey."""
    m = grid_model(chelsea, grid_finest=60, grid_bytes_per_pixel=16)  # every level dense, the finest at half size
    grey = psnr(render(m, chelsea), chelsea)
    assert pyramid_init(m, chelsea, "full") is not None
    start = psnr(render(m, chelsea), chelsea)
    assert grey < 18 and start > grey + 8, (grey, start)
    finer = grid_model(chelsea, grid_finest=120, grid_bytes_per_pixel=16)
    pyramid_init(finer, chelsea, "full")
    assert psnr(render(finer, chelsea), chelsea) > start + 3  # native cells hold more of it


def test_each_level_is_back_projected_until_its_reading_fits_better(chelsea, monkeypatch):
    """The area average alone, one back-projection step, and the shipped count: each start is closer to the photo,
    with the finest cells 0.74× the pixels as the preset's 8-bit tables have them (cells not aligned with pixels,
    where the area average is furthest from the least-squares cells)."""
    starts = []
    for steps in (0, 1, grid_init.BACKPROJECTIONS):
        monkeypatch.setattr(grid_init, "BACKPROJECTIONS", steps)
        m = grid_model(chelsea, grid_finest=88, grid_bytes_per_pixel=16)
        pyramid_init(m, chelsea, "full")
        starts.append(psnr(render(m, chelsea), chelsea))
    assert starts[0] + 0.5 < starts[1] < starts[2] - 0.5, starts


def test_the_paper_protocol_starts_from_the_training_pixels_only(chelsea):
    """Pixels off the [::2, ::2] lattice do not change the start."""
    other = chelsea.copy()
    other[1::2, :] = 0
    other[:, 1::2] = 1
    a, b = grid_model(chelsea), grid_model(chelsea)
    pyramid_init(a, chelsea, "paper")
    pyramid_init(b, other, "paper")
    assert all(torch.equal(x, y) for x, y in zip(a.state_dict().values(), b.state_dict().values()))


def test_8_bit_tables_cost_little_and_are_stored_as_uint8_with_parity(chelsea):
    m = grid_model(chelsea, grid_table_bits=8)
    pyramid_init(m, chelsea, "full")
    before = psnr(render(m, chelsea), chelsea)
    round_tables_8bit(m)
    after = psnr(render(m, chelsea), chelsea)
    assert before - after < 0.5, (before, after)
    for t in m.encoding.tables:  # 256 values or fewer per channel
        assert all(len(torch.unique(t[:, c])) <= 256 for c in range(t.shape[1]))
    plain = export_onnx(m, torch.rand(8, 2), "coords", ["rgb"])
    small, report = store_tables_8bit(plain, m)
    assert report["u8_tables"] == len(m.encoding.tables)
    u8 = [i for i in onnx.load_from_string(small).graph.initializer if i.data_type == onnx.TensorProto.UINT8]
    assert sum(int(np.prod(i.dims)) for i in u8) == m.encoding.entries()
    assert len(plain) - len(small) >= 2.5 * m.encoding.entries()  # a byte per entry instead of four (+ scales)
    probe = np.random.default_rng(0).random((2048, 2), dtype=np.float32) * 1.4 - 0.2
    check_parity(m, small, probe, "coords", ["rgb"], atol=1e-5)


def test_8_bit_tables_buy_twice_the_cells_within_the_same_bytes():
    cfg = dict(name="grid", image_size=[2000, 1500], grid_levels=8, grid_features=2, grid_bytes_per_pixel=1.45)
    half, byte = MultiresGrid(EncodingConfig(**cfg)), MultiresGrid(EncodingConfig(**cfg, grid_table_bits=8))
    assert half.entries() * 2 <= 1.45 * 2000 * 1500 and byte.entries() <= 1.45 * 2000 * 1500
    assert byte.entries() > 1.8 * half.entries()


def test_fit_image_refuses_other_table_bits_and_writes_nothing(tmp_path):
    out = tmp_path / "m"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            "chelsea",
            "--encoding",
            "grid",
            "--grid-table-bits",
            "12",
            "--steps",
            "1",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 2 and "--grid-table-bits must be one of 8, 16, got 12" in r.stderr
    assert not out.exists()


def test_fit_image_writes_an_8_bit_grid_model_that_matches_its_metadata(tmp_path):
    out = tmp_path / "m"
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "training",
            "fit-image",
            "--image",
            "chelsea",
            "--size",
            "96",
            "--protocol",
            "full",
            "--encoding",
            "grid",
            "--depth",
            "2",
            "--width",
            "32",
            "--grid-table-bits",
            "8",
            "--fp16-weights",
            "--steps",
            "20",
            "--lr",
            "2e-3",
            "--batch-size",
            "4096",
            "--no-progress",
            "--out",
            str(out),
        ],
        capture_output=True,
        text=True,
    )
    assert r.returncode == 0, r.stderr[-2000:]
    meta = json.loads((out / "1" / "metadata.json").read_text())
    assert meta["export"]["tables"]["u8_tables"] == 8 and meta["export"]["max_abs_diff_vs_torch"]["rgb"] <= 1e-5
    assert meta["architecture"]["encoding"]["grid_table_bits"] == 8
    assert meta["metrics"]["full_psnr"] > 25 and meta["training"]["init_seconds"] > 0
