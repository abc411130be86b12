"""A finest level on the native pixels (training/encodings/grid.py `native_ladder`) and its refit through the
rounding of everything else (training/encodings/grid_refit.py), on a real photo (scikit-image's chelsea)."""

from __future__ import annotations

import copy

import numpy as np
import onnx
import pytest
import torch

from training.encodings import EncodingConfig
from training.encodings.grid import MultiresGrid, level_sizes
from training.encodings.grid_init import BASIS, pyramid_init, slot_channel
from training.encodings.grid_quant import round_tables_8bit, store_tables_8bit
from training.encodings.grid_refit import finish_native, refit_native
from training.errors import UsageError
from training.export import check_parity, export_onnx
from training.fit_image import predict, split_pixels
from training.fp16 import round_weights_fp16
from training.image_models import ImageINR, ImageModelConfig
from training.images import load_image, pixel_centres
from training.metrics import psnr

LUMA = dict(grid_table_bits=8, grid_finest_features=1)


@pytest.fixture(scope="module")
def chelsea() -> np.ndarray:
    img, _ = load_image("chelsea", 120, False, 10**6)  # 120×80, its native aspect
    return img


def grid_model(img: np.ndarray, **enc) -> ImageINR:
    h, w = img.shape[:2]
    return ImageINR(
        ImageModelConfig(depth=2, width=32, encoding=EncodingConfig(name="grid", image_size=[w, h], **enc))
    ).eval()


def render(model: ImageINR, img: np.ndarray) -> np.ndarray:
    h, w = img.shape[:2]
    return predict(model, pixel_centres(h, w).reshape(-1, 2), torch.device("cpu")).reshape(h, w, 3)


def cfg(w: int, h: int, **kw) -> EncodingConfig:
    return EncodingConfig(name="grid", image_size=[w, h], **kw)


def test_one_feature_on_the_finest_level_puts_it_on_the_native_pixels_within_the_bytes():
    for w, h in [(2667, 1500), (1500, 2667), (2309, 1732), (640, 480)]:
        enc = MultiresGrid(cfg(w, h, **LUMA))
        assert enc.sizes[-1] == (w, h) and enc.level_features == [2] * 7 + [1] and enc.out_dim == 15
        assert enc.entries() <= 1.45 * w * h  # one byte an entry
        top = enc.sizes[-2]
        assert max(top) <= max(w, h) // 2 and enc.entries() > 1.3 * w * h  # the coarse ladder takes the rest
    same = level_sizes(cfg(2667, 1500, grid_table_bits=8))  # equal features: as before, below native
    assert same[-1][0] < 2667 * 0.8


def test_a_budget_below_the_native_level_falls_back_to_the_geometric_ladder():
    enc = MultiresGrid(cfg(400, 300, grid_bytes_per_pixel=0.9, **LUMA))
    assert enc.sizes[-1][0] < 400 and enc.entries() - enc.sizes[-1][0] * enc.sizes[-1][1] <= 0.9 * 400 * 300 * 2


@pytest.mark.parametrize("value", [17, -1])
def test_out_of_range_finest_features_are_refused_naming_the_range(value):
    with pytest.raises(UsageError, match=r"--grid-finest-features must be in 1\.\.16 \(or 0: derived\)"):
        MultiresGrid(cfg(30, 20, grid_finest_features=value))


def test_the_luma_goes_to_the_native_level_and_each_chroma_below_it():
    features = [2] * 7 + [1]
    assert slot_channel(7, 0, features) == 0
    assert [slot_channel(level, 1, features) for level in (6, 5, 4)] == [1, 2, 1]
    assert [slot_channel(level, 1, [2] * 8) for level in (7, 6, 5)] == [1, 2, 1]  # equal features: as before


def test_the_start_holds_the_luma_exactly_and_beats_equal_features_in_the_same_bytes(chelsea):
    luma, plain = grid_model(chelsea, **LUMA), grid_model(chelsea, grid_table_bits=8)
    assert luma.encoding.entries() <= plain.encoding.entries() * 1.01
    pyramid_init(luma, chelsea, "full")
    pyramid_init(plain, chelsea, "full")
    out = render(luma, chelsea)
    target = np.clip(chelsea, 0.5 / 255, 1 - 0.5 / 255)  # as the start clips the photo before its logits
    y_out = np.log(out / (1 - out)) @ BASIS[0].numpy()
    y_img = np.log(target / (1 - target)) @ BASIS[0].numpy()
    assert np.abs(y_out - y_img).max() < 1e-3  # the luma of the logits, pixel for pixel
    assert psnr(out, chelsea) > psnr(render(plain, chelsea), chelsea) + 3


def test_the_refit_wins_back_what_rounding_the_coarse_levels_lost(chelsea):
    """Moved along the luma (the coarse levels' first features, as their rounding moves them), every pixel can be
    put back through its own native cell: the refit returns to the start's PSNR."""
    m = grid_model(chelsea, **LUMA)
    pyramid_init(m, chelsea, "full")
    start = psnr(render(m, chelsea), chelsea)
    with torch.no_grad():
        for t in m.encoding.tables[:-1]:
            t[:, 0].add_(torch.randn_like(t[:, 0]) * 0.05)
    before = psnr(render(m, chelsea), chelsea)
    h, w = chelsea.shape[:2]
    tc, tt, _, _ = split_pixels(chelsea, "full")
    report = refit_native(m, tc, tt, w, h)
    after = psnr(render(m, chelsea), chelsea)
    assert report["mse_after"] < report["mse_before"] and after > before + 3 and after > start - 0.1, (
        start,
        before,
        after,
    )


def test_finishing_rounds_the_native_level_to_8_bits_that_store_as_uint8_with_parity(chelsea):
    m = grid_model(chelsea, **LUMA)
    pyramid_init(m, chelsea, "full")
    round_weights_fp16(m)
    round_tables_8bit(m)
    rounded = psnr(render(m, chelsea), chelsea)
    h, w = chelsea.shape[:2]
    tc, tt, _, _ = split_pixels(chelsea, "full")
    assert finish_native(m, tc, tt, w, h, 8) is not None
    assert psnr(render(m, chelsea), chelsea) >= rounded
    native = m.encoding.tables[-1]
    assert len(torch.unique(native)) <= 256
    again = copy.deepcopy(m)
    round_tables_8bit(again)  # the min/max rounding keeps the refit's steps
    assert torch.equal(again.encoding.tables[-1], native)
    small, report = store_tables_8bit(export_onnx(m, torch.rand(8, 2), "coords", ["rgb"]), m)
    assert report["u8_tables"] == 8
    u8 = [i for i in onnx.load_from_string(small).graph.initializer if i.data_type == onnx.TensorProto.UINT8]
    assert sum(int(np.prod(i.dims)) for i in u8) == m.encoding.entries()
    centres = pixel_centres(h, w).reshape(-1, 2).astype(np.float32)
    check_parity(m, small, centres, "coords", ["rgb"], atol=1e-5)


def test_the_paper_protocol_refits_only_the_training_pixels_cells(chelsea):
    m = grid_model(chelsea, **LUMA)
    pyramid_init(m, chelsea, "paper")
    with torch.no_grad():
        for t in m.encoding.tables[:-1]:
            t.add_(torch.randn_like(t) * 0.05)
    before = m.encoding.tables[-1].detach().clone()
    h, w = chelsea.shape[:2]
    tc, tt, _, _ = split_pixels(chelsea, "paper")
    refit_native(m, tc, tt, w, h)
    moved = (m.encoding.tables[-1] != before)[0, 0]
    assert moved[::2, ::2].any() and not moved[1::2].any() and not moved[:, 1::2].any()


def test_models_without_a_native_level_are_left_alone(chelsea):
    h, w = chelsea.shape[:2]
    tc, tt, _, _ = split_pixels(chelsea, "full")
    for m in (grid_model(chelsea, grid_table_bits=8), grid_model(chelsea, grid_table_bits=8, grid_finest_features=2)):
        state = copy.deepcopy(m.state_dict())
        assert finish_native(m, tc, tt, w, h, 8) is None
        assert all(torch.equal(state[k], v) for k, v in m.state_dict().items())


@pytest.mark.parametrize("w, h, flat", [(1, 1, False), (2, 3, False), (40, 30, True)])
def test_a_one_pixel_or_flat_photo_finishes_to_uint8_tables_that_match_torch(w, h, flat):
    """The native level's range is then one value: no NaN from a zero step, and still stored as uint8."""
    rng = np.random.default_rng(4)
    img = np.full((h, w, 3), 0.3, np.float32) if flat else rng.random((h, w, 3)).astype(np.float32)
    m = grid_model(img, **LUMA)
    pyramid_init(m, img, "full")
    round_weights_fp16(m)
    round_tables_8bit(m)
    tc, tt, _, _ = split_pixels(img, "full")
    finish_native(m, tc, tt, w, h, 8)
    assert all(torch.isfinite(t).all() for t in m.encoding.tables)
    small, report = store_tables_8bit(export_onnx(m, torch.rand(8, 2), "coords", ["rgb"]), m)
    assert report["u8_tables"] == 8
    probe = np.concatenate([pixel_centres(h, w).reshape(-1, 2), np.random.default_rng(5).random((64, 2))]).astype(
        np.float32
    )
    assert check_parity(m, small, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5
