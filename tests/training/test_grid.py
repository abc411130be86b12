"""The multiresolution grid encoding (training/encodings/grid.py): levels, aspect, dense and hashed lookups,
the range checks, and its export through onnxruntime."""

from __future__ import annotations

import numpy as np
import pytest
import torch
import torch.nn.functional as F

from training.encodings import EncodingConfig, build_encoding
from training.encodings.grid import PRIME_Y, MultiresGrid, level_sizes, table_log2
from training.errors import UsageError
from training.export import check_parity, export_onnx, ort_session
from training.image_models import ImageINR, ImageModelConfig


def grid_cfg(w: int, h: int, **kw) -> EncodingConfig:
    return EncodingConfig(**{"name": "grid", "image_size": [w, h], **kw})


def test_levels_are_geometric_up_to_the_native_size_with_square_cells():
    sizes = level_sizes(grid_cfg(2560, 1600, grid_levels=8, grid_base=16, grid_finest=2560))
    assert sizes[0] == (16, 10) and sizes[-1] == (2560, 1600)
    longs = np.array([s[0] for s in sizes], float)
    ratios = longs[1:] / longs[:-1]
    assert np.allclose(ratios, ratios.mean(), rtol=0.03)
    for rx, ry in sizes:
        assert abs(ry / rx - 1600 / 2560) <= 0.5 / rx + 1e-9  # the shorter side in proportion, rounded
    tall = level_sizes(grid_cfg(1600, 2560, grid_levels=8, grid_finest=2560))
    assert tall == [(ry, rx) for rx, ry in sizes]


def test_the_encoding_is_registered_and_gives_levels_times_features():
    enc = build_encoding(grid_cfg(40, 24, grid_levels=5, grid_features=3))
    assert isinstance(enc, MultiresGrid) and enc.out_dim == 15
    assert enc(torch.rand(17, 2)).shape == (17, 15)


def test_a_dense_level_reads_its_cell_at_each_pixel_centre():
    """align_corners=False: pixel (i, j) of a W×H image at ((j+0.5)/W, (i+0.5)/H) is exactly cell (i, j)."""
    w, h = 7, 4
    enc = MultiresGrid(grid_cfg(w, h, grid_levels=1, grid_features=1, grid_finest=w))
    assert enc.dense == [True] and enc.sizes == [(w, h)]
    with torch.no_grad():
        enc.tables[0].copy_(torch.arange(w * h, dtype=torch.float32).reshape(1, 1, h, w))
    i, j = np.meshgrid(np.arange(h), np.arange(w), indexing="ij")
    coords = torch.tensor(np.stack([(j + 0.5) / w, (i + 0.5) / h], -1).reshape(-1, 2), dtype=torch.float32)
    assert torch.allclose(enc(coords)[:, 0], torch.arange(w * h, dtype=torch.float32), atol=1e-5)


def test_a_hashed_level_equals_bilinear_sampling_of_its_hashed_table():
    """A level above 2^T cells is hashed with instant-ngp's primes; looked up at any point it equals
    grid_sample of the dense grid whose cell (i, j) holds table[(j ^ i·2654435761) mod T]."""
    w, h = 40, 30
    enc = MultiresGrid(grid_cfg(w, h, grid_levels=1, grid_features=2, grid_log2_table=8))
    assert enc.dense == [False] and enc.hashed and enc.tables[0].shape == (256, 2)
    with torch.no_grad():
        enc.tables[0].normal_()
    i, j = torch.meshgrid(torch.arange(h), torch.arange(w), indexing="ij")
    idx = torch.bitwise_and(torch.bitwise_xor(j, i * PRIME_Y), 255)
    dense = enc.tables[0][idx].permute(2, 0, 1).unsqueeze(0)  # [1, F, H, W]
    coords = torch.rand(500, 2) * 1.2 - 0.1  # inside and beyond
    ref = F.grid_sample(dense, (coords * 2 - 1).view(1, 1, -1, 2), align_corners=False, padding_mode="border")
    assert torch.allclose(enc(coords), ref.view(2, -1).t(), atol=1e-5)


def test_the_derived_table_keeps_the_tables_within_the_byte_budget():
    """With a native finest level, the largest T whose tables fit the float16 byte budget; levels above hash."""
    cfg = grid_cfg(2000, 1500, grid_levels=8, grid_features=2, grid_finest=2000, grid_bytes_per_pixel=1.5)
    enc = MultiresGrid(cfg)
    assert enc.log2_table == table_log2(cfg, enc.sizes)
    assert enc.entries() * 2 <= 1.5 * 2000 * 1500  # float16 bytes
    assert any(enc.dense) and enc.hashed
    bigger = MultiresGrid(grid_cfg(2000, 1500, grid_levels=8, grid_finest=2000, grid_log2_table=enc.log2_table + 1))
    assert bigger.entries() * 2 > 1.5 * 2000 * 1500  # the largest T that fits


def test_by_default_every_level_is_dense_and_the_finest_as_fine_as_the_budget_allows():
    enc = MultiresGrid(grid_cfg(2000, 1500, grid_levels=8, grid_features=2, grid_bytes_per_pixel=1.5))
    assert all(enc.dense) and enc.entries() * 2 <= 1.5 * 2000 * 1500
    finer = level_sizes(grid_cfg(2000, 1500, grid_levels=8, grid_finest=enc.sizes[-1][0] + 1))
    assert sum(rx * ry for rx, ry in finer) * 2 * 2 > 1.5 * 2000 * 1500
    assert 800 <= enc.sizes[-1][0] < 2000


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (1, 2000), (2000, 1)])
def test_tiny_and_extreme_images_build_and_run(size):
    enc = MultiresGrid(grid_cfg(*size, grid_levels=4))
    out = enc(torch.rand(9, 2))
    assert out.shape == (9, 8) and torch.isfinite(out).all()
    assert all(rx >= 1 and ry >= 1 and rx <= max(size) and ry <= max(size) for rx, ry in enc.sizes)


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("grid_levels", 0, "--grid-levels must be in 1..32"),
        ("grid_features", 0, "--grid-features must be in 1..16"),
        ("grid_log2_table", 40, "--grid-log2-table must be in 8..26"),
        ("grid_finest", 100_000, "--grid-finest must be in 1..32768"),
        ("image_size", [0, 5], "image's size"),
    ],
)
def test_out_of_range_options_are_refused_naming_the_range(field, value, message):
    with pytest.raises(UsageError, match=message.replace(".", r"\.")):
        MultiresGrid(grid_cfg(30, 20, **{field: value}))


@pytest.mark.parametrize("log2_table, opset", [(16, 17), (8, 18)])
def test_grid_models_export_and_onnxruntime_matches_torch(log2_table, opset):
    enc = grid_cfg(48, 30, grid_levels=4, grid_log2_table=log2_table)
    net = ImageINR(ImageModelConfig(depth=3, width=16, encoding=enc)).eval()
    with torch.no_grad():
        for t in net.encoding.tables:
            t.normal_(0, 0.5)
    onnx_bytes = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"], opset=opset)
    probe = np.random.default_rng(0).random((3000, 2), dtype=np.float32) * 1.5 - 0.25
    assert check_parity(net, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5
    ops = {n.op_type for n in __import__("onnx").load_from_string(onnx_bytes).graph.node}
    assert ("GridSample" in ops) == (log2_table == 8)  # all-dense grids export packed corners (grid_export.py)
    assert ("BitwiseXor" in ops) == (log2_table == 8)
    assert ort_session(onnx_bytes).run(["rgb"], {"coords": probe[:0]})[0].shape == (0, 3)
