"""The render layout of dense grid models (training/encodings/grid_export.py): one Gather of packed corner cells
instead of a GridSample per level, within the export's parity gate, float16 storage kept."""

from __future__ import annotations

import numpy as np
import onnx
import pytest
import torch

from training.encodings import EncodingConfig, grid_export
from training.export import check_parity, export_onnx, ort_session, trace
from training.fp16 import round_weights_fp16, store_weights_fp16
from training.image_models import ImageINR, ImageModelConfig

EDGES = np.array([[0, 0], [1, 1], [0, 1], [1, 0], [0.5, 0], [1, 0.5], [-3, 7], [1e30, -1e30], [-1e30, 0.5]], np.float32)


def grid_model(w: int, h: int, depth: int = 3, width: int = 16, **kw) -> ImageINR:
    enc = EncodingConfig(**{"name": "grid", "image_size": [w, h], "grid_levels": 4, **kw})
    net = ImageINR(ImageModelConfig(depth=depth, width=width, encoding=enc)).eval()
    with torch.no_grad():  # trained tables differ from cell to cell; the init (±1e-4) would hide rounding
        for t in net.encoding.tables:
            t.normal_(0, 0.5)
    return net


def ops(onnx_bytes: bytes) -> set[str]:
    return {n.op_type for n in onnx.load_from_string(onnx_bytes).graph.node}


@pytest.mark.parametrize("depth, width", [(3, 64), (2, 32)])
def test_a_dense_grid_exports_as_one_gather_and_matches_torch_everywhere(depth, width):
    net = grid_model(90, 60, depth, width)
    onnx_bytes = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    assert "Gather" in ops(onnx_bytes) and "GridSample" not in ops(onnx_bytes)
    probe = np.random.default_rng(0).random((3000, 2), dtype=np.float32) * 1.5 - 0.25
    centres = np.stack(np.meshgrid((np.arange(90) + 0.5) / 90, (np.arange(60) + 0.5) / 60), -1).reshape(-1, 2)
    for points in (probe, EDGES, centres.astype(np.float32)):
        assert check_parity(net, onnx_bytes, points, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5
    assert ort_session(onnx_bytes).run(["rgb"], {"coords": probe[:0]})[0].shape == (0, 3)


@pytest.mark.parametrize("features", [2, 3])
def test_a_native_finest_level_of_one_feature_exports_as_two_gathers_and_matches_torch(features):
    net = grid_model(90, 60, 2, 32, grid_features=features, grid_finest_features=1, grid_table_bits=8)
    assert net.encoding.sizes[-1] == (90, 60) and net.encoding.level_features == [features] * 3 + [1]
    onnx_bytes = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    graph = onnx.load_from_string(onnx_bytes).graph
    assert [n.op_type for n in graph.node].count("Gather") == 2 and "GridSample" not in ops(onnx_bytes)
    probe = np.random.default_rng(5).random((3000, 2), dtype=np.float32) * 1.5 - 0.25
    centres = np.stack(np.meshgrid((np.arange(90) + 0.5) / 90, (np.arange(60) + 0.5) / 60), -1).reshape(-1, 2)
    for points in (probe, EDGES, centres.astype(np.float32)):
        assert check_parity(net, onnx_bytes, points, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5


def test_the_packed_graph_is_closer_to_torch_than_the_traced_one():
    net = grid_model(700, 500, 3, 64, grid_levels=6)
    probe = np.random.default_rng(1).random((4000, 2), dtype=np.float32)
    with torch.no_grad():
        ref = net(torch.from_numpy(probe)).numpy()
    packed = ort_session(export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])).run(["rgb"], {"coords": probe})[0]
    traced = ort_session(trace(net, torch.rand(8, 2), "coords", ["rgb"], 17)).run(["rgb"], {"coords": probe})[0]
    assert np.abs(packed - ref).max() <= np.abs(traced - ref).max()


def test_float16_storage_keeps_the_small_file_and_the_parity():
    net = round_weights_fp16(grid_model(300, 200, 3, 64))
    packed, report = store_weights_fp16(export_onnx(net, torch.rand(8, 2), "coords", ["rgb"]))
    traced, _ = store_weights_fp16(trace(net, torch.rand(8, 2), "coords", ["rgb"], 17))
    assert report["fp16_initializers"] >= 1
    assert len(packed) <= len(traced) + 8192  # the tables are stored once, as float16; the packing is folded at load
    probe = np.random.default_rng(2).random((2000, 2), dtype=np.float32) * 1.5 - 0.25
    assert check_parity(net, packed, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5


@pytest.mark.parametrize("size", [(1, 1), (2, 3), (1, 500), (500, 1)])
def test_tiny_and_extreme_images_export_and_match(size):
    net = grid_model(*size)
    onnx_bytes = export_onnx(net, torch.rand(8, 2), "coords", ["rgb"])
    probe = np.concatenate([np.random.default_rng(3).random((500, 2), dtype=np.float32) * 1.5 - 0.25, EDGES])
    assert check_parity(net, onnx_bytes, probe, "coords", ["rgb"], atol=1e-5)["rgb"] <= 1e-5


def test_the_size_limit_counts_the_corners_in_the_dtype_they_are_stored_in(monkeypatch):
    """A grid of 8-bit tables packs a byte per corner value: a photo of ~12 MP (the one-model fits of a 2 GiB worker)
    keeps the dense layout, which the service renders with its lattice kernel, where a limit counted in float32
    gave it the traced graph (GridSample) and tiles through the whole graph."""
    from training.encodings.grid_quant import round_tables_8bit

    net = grid_model(90, 60)
    float32 = grid_export.stored_packed_bytes(net.encoding)
    round_tables_8bit(net)
    uint8 = grid_export.stored_packed_bytes(net.encoding)
    assert uint8 * 4 == float32
    monkeypatch.setattr(grid_export, "MAX_PACKED", uint8)
    assert grid_export.plan(net, "coords") is not None
    assert "GridSample" not in ops(export_onnx(net, torch.rand(8, 2), "coords", ["rgb"]))
    monkeypatch.setattr(grid_export, "MAX_PACKED", uint8 - 1)
    assert grid_export.plan(net, "coords") is None
    monkeypatch.setattr(grid_export, "MAX_PACKED", uint8)  # a run's cells past what float32 indexes exactly
    monkeypatch.setattr(grid_export, "MAX_CELLS", max(grid_export.run_cells(net.encoding)) - 1)
    assert grid_export.plan(net, "coords") is None


def test_large_and_hashed_grids_keep_the_traced_graph(monkeypatch):
    net = grid_model(90, 60)
    monkeypatch.setattr(grid_export, "MAX_PACKED", 3200)
    assert grid_export.plan(net, "coords") is None
    assert "GridSample" in ops(export_onnx(net, torch.rand(8, 2), "coords", ["rgb"]))
    monkeypatch.undo()
    assert grid_export.plan(grid_model(48, 30, grid_log2_table=8), "coords") is None  # a hashed level
    assert grid_export.plan(net.body, "coords") is None and grid_export.plan(net, "features") is None
